package cluster

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func items(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p%02d", i)
	}
	return out
}

func counts(p map[string]string) map[string]int {
	c := map[string]int{}
	for _, o := range p {
		c[o]++
	}
	return c
}

func requireBalanced(t *testing.T, p map[string]string, live []string, n int) {
	t.Helper()
	require.Len(t, p, n)
	c := counts(p)
	lo, hi := n/len(live), (n+len(live)-1)/len(live)
	for _, id := range live {
		require.GreaterOrEqual(t, c[id], lo, "instance %s in %v", id, c)
		require.LessOrEqual(t, c[id], hi, "instance %s in %v", id, c)
	}
	require.Len(t, c, min(len(live), n), "only live instances own items: %v", c)
}

func moved(a, b map[string]string) int {
	n := 0
	for it, o := range a {
		if b[it] != o {
			n++
		}
	}
	return n
}

func TestPlaceBalancedFromNothing(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 12, 13} {
		for _, m := range []int{1, 2, 3, 5} {
			live := items(m)
			for i := range live {
				live[i] = fmt.Sprintf("i%d", i)
			}
			p := Place(items(n), live, nil)
			requireBalanced(t, p, live, n)
			// Deterministic, whatever the order of the arguments.
			rev := make([]string, len(live))
			for i, id := range live {
				rev[len(live)-1-i] = id
			}
			require.Equal(t, p, Place(items(n), rev, nil))
			// A balanced placement does not move.
			require.Equal(t, p, Place(items(n), live, p))
		}
	}
}

func TestPlaceLeaveMovesOnlyTheLeaversItems(t *testing.T) {
	live := []string{"a", "b", "c"}
	p := Place(items(12), live, nil)
	after := Place(items(12), []string{"a", "c"}, p)
	requireBalanced(t, after, []string{"a", "c"}, 12)
	for it, o := range p {
		if o != "b" {
			require.Equal(t, o, after[it], "item %s of a live owner moved", it)
		}
	}
	require.Equal(t, counts(p)["b"], moved(p, after))
}

func TestPlaceJoinTakesAFairShare(t *testing.T) {
	p := Place(items(13), []string{"a", "b"}, nil)
	after := Place(items(13), []string{"a", "b", "c"}, p)
	requireBalanced(t, after, []string{"a", "b", "c"}, 13)
	// Only what c takes moves: 13/3 rounds to 4 or 5.
	require.Equal(t, counts(after)["c"], moved(p, after))
	for it, o := range after {
		if o != "c" {
			require.Equal(t, p[it], o)
		}
	}
}

func TestPlaceIgnoresDeadOwnersAndUnknownItems(t *testing.T) {
	cur := map[string]string{"p00": "x", "p01": "a", "gone": "a"}
	p := Place(items(3), []string{"a", "b"}, cur)
	requireBalanced(t, p, []string{"a", "b"}, 3)
	require.Equal(t, "a", p["p01"])
	require.NotContains(t, p, "gone")
	require.Empty(t, Place(items(3), nil, cur))
	require.True(t, maps.Equal(p, Place(items(3), []string{"b", "a", "a"}, cur)))
}

// Each kind is balanced on its own: an instance with its fair share of
// partitions but both groups hands one group over, not a partition.
func TestPlaceByKind(t *testing.T) {
	current := map[string]string{"p/t/0": "a", "p/t/1": "a", "p/t/2": "b", "p/t/3": "b", "g/x": "a", "g/y": "a"}
	items := slices.Sorted(maps.Keys(current))
	got := PlaceFair(items, []string{"a", "b"}, current)
	for _, p := range []string{"p/t/0", "p/t/1", "p/t/2", "p/t/3"} {
		require.Equal(t, current[p], got[p], p)
	}
	require.ElementsMatch(t, []string{"a", "b"}, []string{got["g/x"], got["g/y"]})
}

// topicItems is n partitions of each topic, as PartitionItem names them.
func topicItems(topics map[string]int) []string {
	var out []string
	for t, n := range topics {
		for p := range n {
			out = append(out, PartitionItem(t, int32(p)))
		}
	}
	return out
}

// requireFair checks PlaceFair's promise: every topic and the total
// within one item per live instance.
func requireFair(t *testing.T, p map[string]string, live []string, topics map[string]int) {
	t.Helper()
	total := 0
	for topic, n := range topics {
		of := map[string]string{}
		for it, o := range p {
			if id, _, _ := ParsePartitionItem(it); id == topic {
				of[it] = o
			}
		}
		requireBalanced(t, of, live, n)
		total += n
	}
	requireBalanced(t, p, live, total)
}

// A joining instance takes its share of every topic, the busiest too,
// and only what it takes moves; a fair placement does not move
// (docs/cluster.md "Placement").
func TestPlaceFairJoinTakesAShareOfEveryTopic(t *testing.T) {
	topics := map[string]int{"busy": 12, "small": 3}
	its := topicItems(topics)
	two := PlaceFair(its, []string{"a", "b"}, nil)
	requireFair(t, two, []string{"a", "b"}, topics)
	require.Equal(t, two, PlaceFair(its, []string{"b", "a"}, two), "fair: nothing moves")
	three := PlaceFair(its, []string{"a", "b", "c"}, two)
	requireFair(t, three, []string{"a", "b", "c"}, topics)
	require.Equal(t, counts(three)["c"], moved(two, three), "only what c takes moves")
	busy := 0
	for it, o := range three {
		if id, _, _ := ParsePartitionItem(it); id == "busy" && o == "c" {
			busy++
		}
	}
	require.Equal(t, 4, busy, "c has its third of the busiest topic")
	// Leaving: only the leaver's partitions move.
	back := PlaceFair(its, []string{"a", "c"}, three)
	requireFair(t, back, []string{"a", "c"}, topics)
	for it, o := range three {
		if o != "b" {
			require.Equal(t, o, back[it], "item %s of a live owner moved", it)
		}
	}
}

// Many topics with fewer partitions than instances: each topic is within
// one per instance by itself, so the totals are balanced by where the
// extra partitions go, also after a join.
func TestPlaceFairBalancesTheTotals(t *testing.T) {
	topics := map[string]int{}
	for i := range 10 {
		topics[fmt.Sprintf("t%d", i)] = 1 + i%2
	}
	its := topicItems(topics) // 15 partitions
	live := []string{"a", "b", "c"}
	p := PlaceFair(its, live, nil)
	requireFair(t, p, live, topics)
	require.Equal(t, p, PlaceFair(its, live, p))
	joined := PlaceFair(its, []string{"a", "b", "c", "d"}, p)
	requireFair(t, joined, []string{"a", "b", "c", "d"}, topics)
	require.Equal(t, counts(joined)["d"], moved(p, joined), "only what d takes moves")
	require.Equal(t, joined, PlaceFair(its, []string{"d", "c", "b", "a"}, joined), "deterministic, and fair does not move")
}
