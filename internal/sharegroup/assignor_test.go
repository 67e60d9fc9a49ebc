package sharegroup

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAssignTopic(t *testing.T) {
	p := func(xs ...int32) []int32 { return xs }
	tests := []struct {
		name       string
		members    []string
		partitions int32
		prev       [][]int32
		want       [][]int32
	}{
		{name: "no members", partitions: 3, want: [][]int32{}},
		{name: "one member takes all", members: []string{"a"}, partitions: 3, want: [][]int32{p(0, 1, 2)}},
		{name: "even split, ties by member then partition", members: []string{"a", "b", "c"}, partitions: 6,
			want: [][]int32{p(0, 3), p(1, 4), p(2, 5)}},
		{name: "uneven split: larger quota to the first member", members: []string{"a", "b"}, partitions: 3,
			want: [][]int32{p(0, 1), p(2)}},
		{name: "as many members as partitions", members: []string{"a", "b", "c"}, partitions: 3,
			want: [][]int32{p(0), p(1), p(2)}},
		{name: "7 members on 3 partitions share 3, 2, 2", members: []string{"a", "b", "c", "d", "e", "f", "g"}, partitions: 3,
			want: [][]int32{p(0), p(0), p(1), p(2), p(0), p(1), p(2)}},
		{name: "4 members on 2 partitions share 2, 2", members: []string{"a", "b", "c", "d"}, partitions: 2,
			want: [][]int32{p(0), p(1), p(0), p(1)}},
		{name: "sticky: a joining member takes one partition from a member at its quota",
			members: []string{"a", "b", "c", "d"}, partitions: 6,
			prev: [][]int32{p(0, 3), p(1, 4), p(2, 5), nil},
			want: [][]int32{p(0, 3), p(1, 4), p(2), p(5)}},
		{name: "sticky: a leaving member's partitions go to those with room",
			members: []string{"a", "c"}, partitions: 6,
			prev: [][]int32{p(0, 3), p(2, 5)},
			want: [][]int32{p(0, 1, 3), p(2, 4, 5)}},
		{name: "sticky: the larger quota goes to the member holding most",
			members: []string{"a", "b"}, partitions: 3,
			prev: [][]int32{p(2), p(0, 1)},
			want: [][]int32{p(2), p(0, 1)}},
		{name: "sticky when shared: the partition with most holders takes the extra member",
			members: []string{"a", "b", "c", "d", "e"}, partitions: 2,
			prev: [][]int32{p(1), p(0), p(1), p(0), nil},
			want: [][]int32{p(1), p(0), p(1), p(0), p(0)}},
		{name: "shared to exclusive: the first holder in member order keeps a shared partition",
			members: []string{"a", "b"}, partitions: 4,
			prev: [][]int32{p(0), p(0)},
			want: [][]int32{p(0, 2), p(1, 3)}},
		{name: "previous partitions out of range are ignored", members: []string{"a", "b"}, partitions: 2,
			prev: [][]int32{p(5, -1), p(1)},
			want: [][]int32{p(0), p(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := assignTopic(tt.members, tt.partitions, tt.prev)
			require.Len(t, got, len(tt.members))
			for i := range got {
				assert.Equal(t, tt.want[i], got[i], "member %s", tt.members[i])
			}
		})
	}
}

// Property: for any members, partition count and previous assignment the
// result obeys the assignor's balance rules, is deterministic, and is stable
// (assigning again from the result changes nothing).
func TestAssignTopicProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 2000 {
		n := r.IntN(25)
		parts := int32(1 + r.IntN(25))
		members := make([]string, n)
		prev := make([][]int32, n)
		for i := range members {
			members[i] = fmt.Sprintf("m%02d", i)
			for range r.IntN(4) {
				prev[i] = append(prev[i], int32(r.IntN(int(parts)+3)-1))
			}
		}
		got := assignTopic(members, parts, prev)
		msg := fmt.Sprintf("iteration %d: n=%d P=%d prev=%v got=%v", iter, n, parts, prev, got)
		require.Equal(t, got, assignTopic(members, parts, prev), "deterministic: "+msg)
		if n == 0 {
			continue
		}
		per := make([]int, parts)
		for i, ps := range got {
			require.True(t, slices.IsSorted(ps), msg)
			for _, x := range ps {
				require.True(t, x >= 0 && x < parts, msg)
				per[x]++
			}
			if n <= int(parts) {
				lo, hi := int(parts)/n, (int(parts)+n-1)/n
				require.True(t, len(ps) >= lo && len(ps) <= hi, "member %d has %d partitions: %s", i, len(ps), msg)
			} else {
				require.Len(t, ps, 1, msg)
			}
		}
		for x, c := range per {
			if n <= int(parts) {
				require.Equal(t, 1, c, "partition %d: %s", x, msg)
			} else {
				lo, hi := n/int(parts), (n+int(parts)-1)/int(parts)
				require.True(t, c >= lo && c <= hi, "partition %d shared by %d: %s", x, c, msg)
			}
		}
		require.Equal(t, got, assignTopic(members, parts, got), "stable: "+msg)
	}
}
