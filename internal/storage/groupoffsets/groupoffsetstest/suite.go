// Package groupoffsetstest is the conformance suite every
// groupoffsets.Store passes: the memory store, the file store and the
// JetStream KV store (internal/storage/jetstream/jsoffsets).
package groupoffsetstest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// Factory opens the store under test. reopen, nil when the store keeps
// nothing durable, opens the same durable store again (a restart, or in
// cluster mode the next instance taking over) once the old one is closed.
type Factory func(t *testing.T) (s groupoffsets.Store, reopen func() groupoffsets.Store)

// Run runs the suite.
func Run(t *testing.T, open Factory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"CommitDeleteMeta", testCommitDeleteMeta},
		{"EmptyStore", testEmpty},
		{"MetaAloneKeepsGroup", testMetaAlone},
		{"ConcurrentGroups", testConcurrent},
		{"Closed", testClosed},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

var ts = time.UnixMilli(1_700_000_000_000).UTC()

func off(topic string, p int32, o int64) groupoffsets.Offset {
	return groupoffsets.Offset{Topic: topic, Partition: p, Offset: o, LeaderEpoch: -1, CommitTime: ts}
}

// reload is what s holds, and, when the store is durable, what a store
// reopened over it holds (which must be the same); it returns the store
// to go on with.
func reload(t *testing.T, s groupoffsets.Store, reopen func() groupoffsets.Store, want []groupoffsets.Group) groupoffsets.Store {
	t.Helper()
	got, err := s.Load()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	if reopen == nil {
		return s
	}
	require.NoError(t, s.Close())
	s = reopen()
	got, err = s.Load()
	require.NoError(t, err)
	assert.Equal(t, want, got, "after reopening")
	return s
}

// Commits replace a partition's offset, keep the others; deletes remove
// partitions or the whole group; Meta is kept with the offsets.
func testCommitDeleteMeta(t *testing.T, open Factory) {
	s, reopen := open(t)
	require.NoError(t, s.Commit("g1", []groupoffsets.Offset{{Topic: "a", Partition: 0, Offset: 5, LeaderEpoch: -1, Metadata: "m", CommitTime: ts},
		{Topic: "a", Partition: 1, Offset: 7, LeaderEpoch: 2, CommitTime: ts}}))
	require.NoError(t, s.Commit("g1", []groupoffsets.Offset{off("a", 0, 9)}))
	require.NoError(t, s.Commit("g2", []groupoffsets.Offset{{Topic: "b", Partition: 0, Offset: 1, CommitTime: ts}}))
	require.NoError(t, s.SetMeta("g2", groupoffsets.Meta{ProtocolType: "consumer", EmptySince: ts}))
	require.NoError(t, s.Commit("g3", []groupoffsets.Offset{{Topic: "c", Partition: 0, Offset: 1, CommitTime: ts}}))
	require.NoError(t, s.Delete("g3", nil))
	require.NoError(t, s.Delete("g1", []groupoffsets.Partition{{Topic: "a", Partition: 1}}))
	require.NoError(t, s.Delete("g2", []groupoffsets.Partition{}), "an empty delete deletes nothing")
	require.NoError(t, s.Delete("nope", nil), "deleting a group the store does not hold is no error")
	want := []groupoffsets.Group{
		{ID: "g1", Offsets: []groupoffsets.Offset{off("a", 0, 9)}},
		{ID: "g2", Offsets: []groupoffsets.Offset{{Topic: "b", Partition: 0, Offset: 1, CommitTime: ts}},
			Meta: groupoffsets.Meta{ProtocolType: "consumer", EmptySince: ts}},
	}
	s = reload(t, s, reopen, want)
	// The reopened store writes on from what it read.
	require.NoError(t, s.Commit("g1", []groupoffsets.Offset{off("a", 2, 3)}))
	require.NoError(t, s.Delete("g2", nil))
	want = []groupoffsets.Group{{ID: "g1", Offsets: []groupoffsets.Offset{off("a", 0, 9), off("a", 2, 3)}}}
	s = reload(t, s, reopen, want)
	require.NoError(t, s.Close())
}

func testEmpty(t *testing.T, open Factory) {
	s, reopen := open(t)
	s = reload(t, s, reopen, []groupoffsets.Group{})
	require.NoError(t, s.Close())
}

// A group with Meta and no offsets is kept; a group whose last partition
// is deleted and that has no Meta is gone.
func testMetaAlone(t *testing.T, open Factory) {
	s, reopen := open(t)
	require.NoError(t, s.SetMeta("m", groupoffsets.Meta{ProtocolType: "consumer"}))
	require.NoError(t, s.Commit("n", []groupoffsets.Offset{off("t", 0, 1)}))
	require.NoError(t, s.Delete("n", []groupoffsets.Partition{{Topic: "t", Partition: 0}}))
	s = reload(t, s, reopen, []groupoffsets.Group{{ID: "m", Meta: groupoffsets.Meta{ProtocolType: "consumer"}}})
	require.NoError(t, s.Close())
}

// Writes of different groups may run at once (the coordinator serializes
// only each group's); every one is kept.
func testConcurrent(t *testing.T, open Factory) {
	s, reopen := open(t)
	var wg sync.WaitGroup
	const groups, commits = 8, 10
	errs := make(chan error, groups*commits)
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range commits {
				errs <- s.Commit(string(rune('a'+g)), []groupoffsets.Offset{off("t", int32(i%2), int64(i))})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var want []groupoffsets.Group
	for g := range groups {
		want = append(want, groupoffsets.Group{ID: string(rune('a' + g)),
			Offsets: []groupoffsets.Offset{off("t", 0, commits-2), off("t", 1, commits-1)}})
	}
	s = reload(t, s, reopen, want)
	require.NoError(t, s.Close())
}

// A closed store refuses reads and writes; Close again is no error.
func testClosed(t *testing.T, open Factory) {
	s, _ := open(t)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "a second Close")
	assert.Error(t, s.Commit("g", []groupoffsets.Offset{off("t", 0, 1)}))
	_, err := s.Load()
	assert.Error(t, err)
}
