package consumergroup

import (
	"sort"
)

// The server-side assignors of the "consumer" protocol (KIP-848,
// docs/consumer-groups.md "Server-side assignors"). Each computes a
// group's target assignment from its members' subscriptions and the
// partition counts of the subscribed topics; neither looks at what a
// member owns now (reconciliation, consumer.go, moves partitions there).

const (
	assignorUniform = "uniform"
	assignorRange   = "range"
)

// assignorNames are the assignors a member may ask for; the first is the
// default.
var assignorNames = []string{assignorUniform, assignorRange}

func knownAssignor(name string) bool {
	for _, n := range assignorNames {
		if n == name {
			return true
		}
	}
	return false
}

// assignMember is one member as the assignors see it.
type assignMember struct {
	id     string
	sortBy string          // the instance id of a static member, else its id
	topics map[string]bool // what it subscribes to (resolved)
}

// assignment is member id -> topic -> sorted partitions.
type assignment map[string]map[string][]int32

func (a assignment) add(member, topic string, p int32) {
	if a[member] == nil {
		a[member] = map[string][]int32{}
	}
	a[member][topic] = append(a[member][topic], p)
}

func (a assignment) sortAll() {
	for _, ts := range a {
		for _, ps := range ts {
			sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		}
	}
}

func sortedMembers(ms []assignMember) []assignMember {
	out := append([]assignMember(nil), ms...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].sortBy != out[j].sortBy {
			return out[i].sortBy < out[j].sortBy
		}
		return out[i].id < out[j].id
	})
	return out
}

func sortedTopics(counts map[string]int32) []string {
	out := make([]string, 0, len(counts))
	for t, n := range counts {
		if n > 0 {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// assignRange is Kafka's range assignor run by the server: per topic, its
// subscribers in order (instance id, else member id) each take a
// contiguous range, the first ones one partition more when the count does
// not divide.
func assignRange(members []assignMember, counts map[string]int32) assignment {
	out := assignment{}
	ms := sortedMembers(members)
	for _, t := range sortedTopics(counts) {
		var subs []assignMember
		for _, m := range ms {
			if m.topics[t] {
				subs = append(subs, m)
			}
		}
		if len(subs) == 0 {
			continue
		}
		n := int(counts[t])
		per, extra := n/len(subs), n%len(subs)
		next := 0
		for i, m := range subs {
			k := per
			if i < extra {
				k++
			}
			for p := next; p < next+k; p++ {
				out.add(m.id, t, int32(p))
			}
			next += k
		}
	}
	out.sortAll()
	return out
}

// assignUniform spreads every subscribed partition so that member counts
// differ by at most one where subscriptions allow, keeping each partition
// where the previous target had it when that stays balanced (sticky, as
// Kafka's uniform assignor).
func assignUniform(members []assignMember, counts map[string]int32, prev assignment) assignment {
	ms := sortedMembers(members)
	if len(ms) == 0 {
		return assignment{}
	}
	type tp struct {
		t string
		p int32
	}
	var all []tp
	for _, t := range sortedTopics(counts) {
		for p := range counts[t] {
			all = append(all, tp{t, p})
		}
	}
	eligible := func(m assignMember, x tp) bool { return m.topics[x.t] }
	subscribed := 0
	for _, x := range all {
		for _, m := range ms {
			if eligible(m, x) {
				subscribed++
				break
			}
		}
	}
	quota := (subscribed + len(ms) - 1) / len(ms) // the most any member gets
	owner := map[tp]int{}                         // index into ms
	count := make([]int, len(ms))
	index := map[string]int{}
	for i, m := range ms {
		index[m.id] = i
	}
	// Keep the previous target where the member still subscribes, up to
	// the quota.
	for _, m := range ms {
		i := index[m.id]
		ts := prev[m.id]
		topics := make([]string, 0, len(ts))
		for t := range ts {
			topics = append(topics, t)
		}
		sort.Strings(topics)
		for _, t := range topics {
			for _, p := range ts[t] {
				x := tp{t, p}
				if p >= counts[t] || !eligible(m, x) || count[i] >= quota {
					continue
				}
				if _, taken := owner[x]; taken {
					continue
				}
				owner[x] = i
				count[i]++
			}
		}
	}
	// The rest go to the eligible member with the fewest.
	for _, x := range all {
		if _, ok := owner[x]; ok {
			continue
		}
		best := -1
		for i, m := range ms {
			if eligible(m, x) && (best < 0 || count[i] < count[best]) {
				best = i
			}
		}
		if best >= 0 {
			owner[x] = best
			count[best]++
		}
	}
	// Even out what heterogeneous subscriptions left uneven: move a
	// partition from a member with two more than an eligible other.
	for moved := true; moved; {
		moved = false
		for _, x := range all {
			i, ok := owner[x]
			if !ok {
				continue
			}
			for j, m := range ms {
				if j != i && eligible(m, x) && count[i] > count[j]+1 {
					owner[x] = j
					count[i]--
					count[j]++
					moved = true
					break
				}
			}
		}
	}
	out := assignment{}
	for _, x := range all {
		if i, ok := owner[x]; ok {
			out.add(ms[i].id, x.t, x.p)
		}
	}
	out.sortAll()
	return out
}
