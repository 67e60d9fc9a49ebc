package cluster

import (
	"maps"
	"slices"
	"strings"
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
	ids := liveIDs(live)
	out := make(map[string]string, len(items))
	if len(ids) == 0 {
		return out
	}
	place(out, sortedItems(items), ids, current, nil)
	return out
}

func liveIDs(live []string) []string {
	ids := slices.Clone(live)
	slices.Sort(ids)
	return slices.Compact(ids)
}

func sortedItems(items []string) []string {
	sorted := slices.Clone(items)
	slices.Sort(sorted)
	return slices.Compact(sorted)
}

// place is Place of sorted items over ids into out. load, when not nil,
// is what each instance already holds of other classes of the same kind
// (PlaceFair): among instances that own as many of these items, the
// larger quotas go to the least loaded, and so do free items among
// instances with as much room; it is updated with what is placed here.
func place(out map[string]string, sorted, ids []string, current map[string]string, load map[string]int) {
	owned := make(map[string]int, len(ids))
	for _, it := range sorted {
		if o, ok := current[it]; ok {
			owned[o]++
		}
	}
	// Instances with the most items first get the larger quotas.
	byOwned := slices.Clone(ids)
	slices.SortStableFunc(byOwned, func(a, b string) int {
		if d := owned[b] - owned[a]; d != 0 {
			return d
		}
		return load[a] - load[b] // nil load: 0, the ID order stands
	})
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
			if best == "" {
				best = id
				continue
			}
			room, bestRoom := quota[id]-count[id], quota[best]-count[best]
			if room > bestRoom || room == bestRoom && load[id]+count[id] < load[best]+count[best] {
				best = id
			}
		}
		out[it] = best
		count[best]++
	}
	if load != nil {
		for id, c := range count {
			load[id] += c
		}
	}
}

// PlaceFair is Place for the items of a cluster (docs/cluster.md
// "Placement"): each kind (the prefix before the first '/': partitions
// "p", share groups "g", ...) is placed on its own, and within the
// partitions each topic ("p/<topic id>/<n>", PartitionItem) is balanced
// within one partition per instance, so a joining instance takes its
// share of every topic, the busiest too. The totals of a kind are then
// balanced within one item per instance, by moving items that keep their
// topic balanced: from an instance with more of the topic to one with
// fewer. Deterministic and moving as little as Place: a placement that is
// balanced per topic and in total does not move.
func PlaceFair(items []string, live []string, current map[string]string) map[string]string {
	ids := liveIDs(live)
	out := make(map[string]string, len(items))
	if len(ids) == 0 {
		return out
	}
	kinds := map[string]map[string][]string{} // kind -> class -> items
	for _, item := range sortedItems(items) {
		kind, rest, _ := strings.Cut(item, "/")
		class := kind
		if kind == "p" {
			if i := strings.LastIndexByte(rest, '/'); i > 0 {
				class = "p/" + rest[:i]
			}
		}
		if kinds[kind] == nil {
			kinds[kind] = map[string][]string{}
		}
		kinds[kind][class] = append(kinds[kind][class], item)
	}
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		classes := kinds[kind]
		load := make(map[string]int, len(ids))
		for _, class := range slices.Sorted(maps.Keys(classes)) {
			place(out, classes[class], ids, current, load)
		}
		balanceTotals(out, classes, ids, load)
	}
	return out
}

// balanceTotals moves items of one kind until every instance holds
// within one of every other: each move takes an item of a class from the
// instance holding the most items to one holding fewer, where the giver
// holds more of that class than the taker, so every class stays within
// one per instance. Each move narrows the spread, so it ends.
func balanceTotals(out map[string]string, classes map[string][]string, ids []string, load map[string]int) {
	per := map[string]map[string]int{} // class -> instance -> items
	for class, its := range classes {
		per[class] = map[string]int{}
		for _, it := range its {
			per[class][out[it]]++
		}
	}
	order := slices.Sorted(maps.Keys(classes))
	for {
		byLoad := slices.Clone(ids)
		slices.SortStableFunc(byLoad, func(a, b string) int { return load[a] - load[b] })
		moved := false
		for i := len(byLoad) - 1; i > 0 && !moved; i-- {
			from := byLoad[i]
			for _, to := range byLoad[:i] {
				if load[from]-load[to] <= 1 {
					break
				}
				for _, class := range order {
					if per[class][from] <= per[class][to] {
						continue
					}
					its := classes[class]
					for j := len(its) - 1; j >= 0; j-- { // the giver keeps its first items
						if out[its[j]] == from {
							out[its[j]] = to
							per[class][from]--
							per[class][to]++
							load[from]--
							load[to]++
							moved = true
							break
						}
					}
					break
				}
				if moved {
					break
				}
			}
		}
		if !moved {
			return
		}
	}
}
