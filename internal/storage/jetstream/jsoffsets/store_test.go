package jsoffsets_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets/groupoffsetstest"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsoffsets"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
)

var cluster *jstest.Cluster

func TestMain(m *testing.M) {
	jstest.Main(m, jstest.Options{SyncAlways: true}, func(c *jstest.Cluster) { cluster = c })
}

// opener opens stores over one fresh bucket, each on its own connection
// (another instance).
func opener(t *testing.T) func(o jsoffsets.Options) *jsoffsets.Store {
	nc := cluster.Connect(t)
	prefix := cluster.Prefix()
	cluster.Cleanup(t, nc, prefix)
	return func(o jsoffsets.Options) *jsoffsets.Store {
		o.Prefix, o.Replicas = prefix, 3
		s, err := jsoffsets.Open(context.Background(), cluster.Connect(t), o)
		require.NoError(t, err)
		return s
	}
}

// The bucket passes the suite the file store passes; "reopen" is the next
// active instance (a newer term) opening the same bucket.
func TestConformance(t *testing.T) {
	groupoffsetstest.Run(t, func(t *testing.T) (groupoffsets.Store, func() groupoffsets.Store) {
		open := opener(t)
		var term atomic.Uint64
		next := func() groupoffsets.Store { return open(jsoffsets.Options{Epoch: term.Add(1)}) }
		return next(), next
	})
}

var ts = time.UnixMilli(1_700_000_000_000).UTC()

func off(p int32, o int64) groupoffsets.Offset {
	return groupoffsets.Offset{Topic: "t", Partition: p, Offset: o, LeaderEpoch: -1, CommitTime: ts}
}

// A newer term's Load fences the older: the older's next write is
// refused (ErrFenced, OnFenced told) and changes nothing; the newer one
// read everything the older wrote before.
func TestUnscopedFencing(t *testing.T) {
	open := opener(t)
	fenced := make(chan string, 1)
	old := open(jsoffsets.Options{Epoch: 10, OnFenced: func(g string) { fenced <- g }})
	_, err := old.Load()
	require.NoError(t, err)
	require.NoError(t, old.Commit("g", []groupoffsets.Offset{off(0, 5)}))

	cur := open(jsoffsets.Options{Epoch: 11})
	got, err := cur.Load()
	require.NoError(t, err)
	require.Equal(t, []groupoffsets.Group{{ID: "g", Offsets: []groupoffsets.Offset{off(0, 5)}}}, got)

	err = old.Commit("g", []groupoffsets.Offset{off(0, 9)})
	require.ErrorIs(t, err, groupoffsets.ErrFenced)
	select {
	case g := <-fenced:
		assert.Equal(t, "g", g)
	case <-time.After(5 * time.Second):
		t.Fatal("OnFenced was not told")
	}
	assert.ErrorIs(t, old.Commit("g", []groupoffsets.Offset{off(0, 10)}), groupoffsets.ErrFenced, "a fenced group stays refused")

	require.NoError(t, cur.Commit("g", []groupoffsets.Offset{off(1, 1)}))
	check := open(jsoffsets.Options{Epoch: 12})
	got, err = check.Load()
	require.NoError(t, err)
	assert.Equal(t, []groupoffsets.Group{{ID: "g", Offsets: []groupoffsets.Offset{off(0, 5), off(1, 1)}}}, got,
		"the fenced write changed nothing")

	// An instance of an older term than the bucket's cannot load it.
	_, err = open(jsoffsets.Options{Epoch: 3}).Load()
	assert.ErrorIs(t, err, groupoffsets.ErrFenced)
}

// Scoped stores write only the groups they adopted; an adoption by a
// newer term fences the previous holder, and sees what it wrote.
func TestScopedAdoption(t *testing.T) {
	open := opener(t)
	a := open(jsoffsets.Options{Scoped: true})
	b := open(jsoffsets.Options{Scoped: true})
	ctx := context.Background()

	got, err := a.Load()
	require.NoError(t, err)
	assert.Empty(t, got, "a scoped store loads nothing")
	assert.ErrorIs(t, a.Commit("g", []groupoffsets.Offset{off(0, 1)}), groupoffsets.ErrFenced, "not adopted")

	g, ok, err := a.Adopt(ctx, "g", 5)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, groupoffsets.Group{ID: "g"}, g)
	require.NoError(t, a.Commit("g", []groupoffsets.Offset{off(0, 1)}))
	require.NoError(t, a.SetMeta("g", groupoffsets.Meta{ProtocolType: "consumer"}))
	_, _, err = a.Adopt(ctx, "h", 5)
	require.NoError(t, err)
	require.NoError(t, a.Commit("h", []groupoffsets.Offset{off(0, 7)}))

	ids, err := b.GroupIDs(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"g", "h"}, ids)

	// b takes g over without a's drop (a lost its lease unaware).
	g, ok, err = b.Adopt(ctx, "g", 6)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, groupoffsets.Group{ID: "g", Offsets: []groupoffsets.Offset{off(0, 1)}, Meta: groupoffsets.Meta{ProtocolType: "consumer"}}, g)
	assert.ErrorIs(t, a.Commit("g", []groupoffsets.Offset{off(0, 2)}), groupoffsets.ErrFenced)
	require.NoError(t, a.Commit("h", []groupoffsets.Offset{off(0, 8)}), "a's other group is still a's")
	require.NoError(t, b.Commit("g", []groupoffsets.Offset{off(0, 3)}))

	// a cannot take it back with its old term.
	_, _, err = a.Adopt(ctx, "g", 5)
	assert.ErrorIs(t, err, groupoffsets.ErrFenced)

	// A handover: b drops, a adopts with a newer term and sees b's write.
	b.Drop("g")
	assert.ErrorIs(t, b.Commit("g", []groupoffsets.Offset{off(0, 4)}), groupoffsets.ErrFenced, "dropped")
	g, ok, err = a.Adopt(ctx, "g", 7)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []groupoffsets.Offset{off(0, 3)}, g.Offsets)

	// Deleting the whole group deletes its key.
	require.NoError(t, a.Delete("g", nil))
	ids, err = b.GroupIDs(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"h"}, ids)
	_, ok, err = b.Adopt(ctx, "g", 8)
	require.NoError(t, err)
	assert.False(t, ok)
}
