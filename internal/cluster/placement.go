package cluster

import (
	"slices"
)

// Place assigns items to the live instances, balanced within one item per
// instance, moving as few items as it can from their current owners.
//
// The answer depends only on its arguments (every instance that reads the
// same live set and the same current owners computes the same placement):
//
//   - every instance gets ⌊n/m⌋ or ⌈n/m⌉ of the n items; the ⌈n/m⌉ go to
//     the instances that already own the most (ties: the smaller ID), so
//     a balanced placement does not move;
//   - an item keeps its current owner while that owner is live and under
//     its quota (items taken in sorted order, so an owner over its quota
//     keeps its first ones);
//   - every other item goes, in sorted order, to the instance with the
//     most room left (ties: the smaller ID).
//
// So when an instance leaves only its items move, and when one joins it
// takes its fair share from the instances that had more than theirs.
// current maps an item to its owner's ID; live lists the live instances'
// IDs (duplicates ignored). With no live instance nothing is placed.
func Place(items []string, live []string, current map[string]string) map[string]string {
	ids := slices.Clone(live)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make(map[string]string, len(items))
	if len(ids) == 0 {
		return out
	}
	sorted := slices.Clone(items)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)

	owned := make(map[string]int, len(ids))
	for _, it := range sorted {
		if o, ok := current[it]; ok {
			owned[o]++
		}
	}
	// Instances with the most items first get the larger quotas.
	byOwned := slices.Clone(ids)
	slices.SortStableFunc(byOwned, func(a, b string) int { return owned[b] - owned[a] })
	n, m := len(sorted), len(ids)
	quota := make(map[string]int, m)
	for i, id := range byOwned {
		quota[id] = n / m
		if i < n%m {
			quota[id]++
		}
	}

	count := make(map[string]int, m)
	var rest []string
	for _, it := range sorted {
		o, ok := current[it]
		if ok && count[o] < quota[o] { // quota is 0 for an instance not live
			out[it] = o
			count[o]++
			continue
		}
		rest = append(rest, it)
	}
	for _, it := range rest {
		best := ""
		for _, id := range ids {
			if best == "" || quota[id]-count[id] > quota[best]-count[best] {
				best = id
			}
		}
		out[it] = best
		count[best]++
	}
	return out
}
