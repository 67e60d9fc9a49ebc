package sharegroup

import (
	"slices"
)

// The simple assignor. As Kafka's SimpleAssignor: when every member
// subscribes to the same topics (homogeneous), the partitions of all those
// topics form one pool, ordered by (topic name, partition), and are
// assigned together as if they were one topic's (membership.go,
// assignPooledLocked) — two members on topics a and b of one partition
// each get one partition each; otherwise each topic is assigned on its own
// among its subscribers. Either way assignTopic below does the work. It is
// a pure function of
// the subscribed members (sorted by member ID), the partition count and
// each member's previous target for the topic, so the same inputs always
// give the same assignment.
//
// n ≤ P: every partition goes to exactly one member and every member gets
// ⌊P/n⌋ or ⌈P/n⌉. The P mod n larger quotas go to the members that already
// hold the most partitions (ties: member ID), so as little as possible
// moves. Each member keeps its lowest previous partitions up to its quota
// (a partition previously shared goes to the first holder in member-ID
// order); each remaining partition, ascending, goes to the member with the
// most room left (ties: member ID).
//
// n > P: every member gets exactly one partition and every partition is
// shared by ⌊n/P⌋ or ⌈n/P⌉ members (7 members, 3 partitions → 3, 2, 2).
// The n mod P larger shares go to the partitions with the most previous
// holders (ties: partition index). Each member, in member-ID order, keeps
// its lowest previous partition that still has a free share; the others,
// in member-ID order, take the partition with the most free shares (ties:
// partition index).

// assignTopic returns each member's partitions (ascending) of one topic
// with partitions partitions; members are sorted by ID, prev[i] is member
// i's previous partitions of the topic (any order, possibly out of range).
func assignTopic(members []string, partitions int32, prev [][]int32) [][]int32 {
	n, p := len(members), int(partitions)
	out := make([][]int32, n)
	if n == 0 || p <= 0 {
		return out
	}
	// Valid previous holdings, ascending and without duplicates.
	held := make([][]int32, n)
	for i := range members {
		var h []int32
		if i < len(prev) {
			for _, x := range prev[i] {
				if x >= 0 && int(x) < p {
					h = append(h, x)
				}
			}
		}
		slices.Sort(h)
		held[i] = slices.Compact(h)
	}
	if n <= p {
		return assignPartitionsToMembers(n, p, held)
	}
	return assignMembersToPartitions(n, p, held)
}

// assignPartitionsToMembers is the n ≤ P case.
func assignPartitionsToMembers(n, p int, held [][]int32) [][]int32 {
	owner := make([]int, p)
	for i := range owner {
		owner[i] = -1
	}
	kept := make([][]int32, n)
	for i := range n {
		for _, x := range held[i] {
			if owner[x] < 0 {
				owner[x] = i
				kept[i] = append(kept[i], x)
			}
		}
	}
	// Quotas: the larger ones to the members holding the most.
	q, r := p/n, p%n
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(kept[b]) - len(kept[a]) })
	quota := make([]int, n)
	for k, i := range order {
		quota[i] = q
		if k < r {
			quota[i]++
		}
	}
	for i := range n {
		if len(kept[i]) > quota[i] {
			for _, x := range kept[i][quota[i]:] {
				owner[x] = -1
			}
			kept[i] = kept[i][:quota[i]]
		}
	}
	for x := range p {
		if owner[x] >= 0 {
			continue
		}
		best := -1
		for i := range n {
			if room := quota[i] - len(kept[i]); room > 0 && (best < 0 || room > quota[best]-len(kept[best])) {
				best = i
			}
		}
		owner[x] = best
		kept[best] = append(kept[best], int32(x))
	}
	for i := range n {
		slices.Sort(kept[i])
	}
	return kept
}

// assignMembersToPartitions is the n > P case.
func assignMembersToPartitions(n, p int, held [][]int32) [][]int32 {
	holders := make([]int, p)
	for i := range n {
		for _, x := range held[i] {
			holders[x]++
		}
	}
	q, r := n/p, n%p
	order := make([]int, p)
	for x := range order {
		order[x] = x
	}
	slices.SortStableFunc(order, func(a, b int) int { return holders[b] - holders[a] })
	free := make([]int, p)
	for k, x := range order {
		free[x] = q
		if k < r {
			free[x]++
		}
	}
	out := make([][]int32, n)
	for i := range n {
		for _, x := range held[i] {
			if free[x] > 0 {
				free[x]--
				out[i] = []int32{x}
				break
			}
		}
	}
	for i := range n {
		if out[i] != nil {
			continue
		}
		best := 0
		for x := 1; x < p; x++ {
			if free[x] > free[best] {
				best = x
			}
		}
		free[best]--
		out[i] = []int32{int32(best)}
	}
	return out
}
