package jstxn_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstxn"
	"github.com/sharelog/sharelog/internal/storage/txnstate"
)

var cluster *jstest.Cluster

func TestMain(m *testing.M) {
	jstest.Main(m, jstest.Options{SyncAlways: true}, func(c *jstest.Cluster) { cluster = c })
}

// opener opens stores over one fresh bucket, each on its own connection
// (another instance); prefix is the bucket's.
func opener(t *testing.T) (open func(o jstxn.Options) *jstxn.Store, prefix string) {
	nc := cluster.Connect(t)
	prefix = cluster.Prefix()
	cluster.Cleanup(t, nc, prefix)
	return func(o jstxn.Options) *jstxn.Store {
		o.Prefix, o.Replicas = prefix, 3
		s, err := jstxn.Open(context.Background(), cluster.Connect(t), o)
		require.NoError(t, err)
		return s
	}, prefix
}

func ongoing(id string, epoch int16) txnstate.Txn {
	return txnstate.Txn{ID: id, ProducerID: 7, Epoch: epoch, TimeoutMs: 60000, Status: txnstate.Ongoing, StartMs: 1000, UpdateMs: 1001,
		Partitions: []txnstate.Partition{{Topic: "out", Partition: 0}, {Topic: "out", Partition: 2}},
		Groups:     []string{"g"},
		Offsets:    map[string][]txnstate.Offset{"g": {{Topic: "in", Partition: 1, Offset: 42, LeaderEpoch: 3, Metadata: "m"}}}}
}

// What one term wrote is what the next term's Load reads, every field,
// the last Put of each id winning; an id never written is not there.
func TestReload(t *testing.T) {
	open, _ := opener(t)
	a := open(jstxn.Options{Epoch: 1})
	got, err := a.Load()
	require.NoError(t, err)
	require.Empty(t, got)
	first := ongoing("tx-a", 0)
	require.NoError(t, a.Put(first))
	second := first.Clone()
	second.Status, second.UpdateMs = txnstate.PrepareCommit, 2000
	require.NoError(t, a.Put(second))
	other := txnstate.Txn{ID: "tx.b/with dots", ProducerID: 9, Epoch: 4, TimeoutMs: 1000, Status: txnstate.Empty}
	require.NoError(t, a.Put(other))

	b := open(jstxn.Options{Epoch: 2})
	got, err = b.Load()
	require.NoError(t, err)
	assert.Equal(t, []txnstate.Txn{second, other}, got)

	// The next term writes on from what it read.
	third := second.Clone()
	third.Status, third.Partitions, third.Groups, third.Offsets = txnstate.CompleteCommit, nil, nil, nil
	require.NoError(t, b.Put(third))
	c := open(jstxn.Options{Epoch: 3})
	got, err = c.Load()
	require.NoError(t, err)
	assert.Equal(t, []txnstate.Txn{third, other}, got)
}

// A newer term's Load fences the older: the older's next Put of an id it
// wrote is refused (ErrFenced, OnFenced told) and changes nothing, and a
// refused id stays refused. Two terms never both write an id.
func TestFencedByNewerTerm(t *testing.T) {
	open, _ := opener(t)
	fenced := make(chan string, 1)
	old := open(jstxn.Options{Epoch: 10, OnFenced: func(id string) { fenced <- id }})
	_, err := old.Load()
	require.NoError(t, err)
	require.NoError(t, old.Put(ongoing("x", 1)))

	cur := open(jstxn.Options{Epoch: 11})
	got, err := cur.Load()
	require.NoError(t, err)
	require.Equal(t, []txnstate.Txn{ongoing("x", 1)}, got)

	late := ongoing("x", 1)
	late.Status = txnstate.PrepareCommit
	require.ErrorIs(t, old.Put(late), txnstate.ErrFenced)
	select {
	case id := <-fenced:
		assert.Equal(t, "x", id)
	case <-time.After(5 * time.Second):
		t.Fatal("OnFenced was not told")
	}
	assert.ErrorIs(t, old.Put(late), txnstate.ErrFenced, "a fenced id stays refused")

	abort := ongoing("x", 2)
	abort.Status = txnstate.PrepareAbort
	require.NoError(t, cur.Put(abort))
	got, err = open(jstxn.Options{Epoch: 12}).Load()
	require.NoError(t, err)
	assert.Equal(t, []txnstate.Txn{abort}, got, "the older term's late write changed nothing")

	// A store of an older term than the bucket's cannot even load.
	_, err = open(jstxn.Options{Epoch: 5}).Load()
	assert.ErrorIs(t, err, txnstate.ErrFenced)
}

// Every Put is a compare-and-set of the revision held: a write that slipped
// in between (here another store of the same term, as a write whose answer
// was lost) is detected, read and written over by this term's record, never
// silently lost in the other direction; one of a newer term fences.
func TestCASConflict(t *testing.T) {
	open, prefix := opener(t)
	a := open(jstxn.Options{Epoch: 3})
	_, err := a.Load()
	require.NoError(t, err)
	require.NoError(t, a.Put(ongoing("y", 0)))

	// Write the key behind a's back, as a newer term would, with the raw
	// KV: a's revision is now stale.
	js, err := jetstream.New(cluster.Connect(t))
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), sljs.TxnsBucket(prefix))
	require.NoError(t, err)
	k := "t." + sljs.HexKey("y")
	e, err := kv.Get(context.Background(), k)
	require.NoError(t, err)
	_, err = kv.Update(context.Background(), k, []byte(`{"v":1,"e":4,"t":{"id":"y","producer_id":7,"epoch":5,"timeout_ms":1,"status":"Empty","update_ms":0}}`), e.Revision())
	require.NoError(t, err)

	// a's conditional write conflicts, finds term 4 > 3: fenced.
	require.ErrorIs(t, a.Put(ongoing("y", 1)), txnstate.ErrFenced)
	e2, err := kv.Get(context.Background(), k)
	require.NoError(t, err)
	assert.Contains(t, string(e2.Value()), `"epoch":5`, "the newer term's record stands")

	// The same term's write in between (a lost answer): written over.
	b := open(jstxn.Options{Epoch: 4})
	_, err = b.Load()
	require.NoError(t, err)
	require.NoError(t, b.Put(ongoing("y", 6)))
	e3, err := kv.Get(context.Background(), k)
	require.NoError(t, err)
	_, err = kv.Update(context.Background(), k, []byte(`{"v":1,"e":4,"t":{"id":"y","producer_id":7,"epoch":6,"timeout_ms":1,"status":"Empty","update_ms":0}}`), e3.Revision())
	require.NoError(t, err)
	final := ongoing("y", 6)
	final.Status = txnstate.PrepareAbort
	require.NoError(t, b.Put(final))
	got, err := open(jstxn.Options{Epoch: 5}).Load()
	require.NoError(t, err)
	assert.Equal(t, []txnstate.Txn{final}, got)
}

// A value of another layout version, or damaged, fails the Load: the
// server does not guess which transactions were in flight.
func TestDamagedValueFailsLoad(t *testing.T) {
	open, prefix := opener(t)
	a := open(jstxn.Options{Epoch: 1})
	js, err := jetstream.New(cluster.Connect(t))
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), sljs.TxnsBucket(prefix))
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), "t."+sljs.HexKey("z"), []byte(`{"v":2,"e":1,"t":{"id":"z"}}`))
	require.NoError(t, err)
	_, err = a.Load()
	require.ErrorIs(t, err, jstxn.ErrStorage)
	assert.Contains(t, err.Error(), "version 2")
	_, err = kv.Put(context.Background(), "t."+sljs.HexKey("z"), []byte(`{`))
	require.NoError(t, err)
	_, err = open(jstxn.Options{Epoch: 2}).Load()
	require.ErrorIs(t, err, jstxn.ErrStorage)
}

// Scoped: nothing is loaded or written before Adopt; Adopt reads the
// id's record; a newer adopter fences the older; Drop refuses writes.
func TestScoped(t *testing.T) {
	open, _ := opener(t)
	var fenced atomic.Int32
	a := open(jstxn.Options{Scoped: true, OnFenced: func(string) { fenced.Add(1) }})
	got, err := a.Load()
	require.NoError(t, err)
	require.Empty(t, got)
	require.ErrorIs(t, a.Put(ongoing("s", 0)), txnstate.ErrFenced, "not adopted")

	_, ok, err := a.Adopt(context.Background(), "s", 100)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, a.Put(ongoing("s", 0)))

	b := open(jstxn.Options{Scoped: true})
	tx, ok, err := b.Adopt(context.Background(), "s", 101)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, ongoing("s", 0), tx)
	require.ErrorIs(t, a.Put(ongoing("s", 1)), txnstate.ErrFenced)
	require.Eventually(t, func() bool { return fenced.Load() == 1 }, 5*time.Second, 10*time.Millisecond)

	_, _, err = a.Adopt(context.Background(), "s", 100)
	require.ErrorIs(t, err, txnstate.ErrFenced, "an older lease cannot take it back")

	require.NoError(t, b.Put(ongoing("s", 2)))
	b.Drop("s")
	require.ErrorIs(t, b.Put(ongoing("s", 3)), txnstate.ErrFenced)
}

// HasState: false without a bucket (none is created) and with an empty
// one, true once an id was written.
func TestHasState(t *testing.T) {
	open, prefix := opener(t)
	nc := cluster.Connect(t)
	ctx := context.Background()
	has, err := jstxn.HasState(ctx, nc, prefix)
	require.NoError(t, err)
	assert.False(t, has)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.KeyValue(ctx, sljs.TxnsBucket(prefix))
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound, "HasState created no bucket")

	s := open(jstxn.Options{Epoch: 1})
	_, err = s.Load() // writes the read mark only
	require.NoError(t, err)
	has, err = jstxn.HasState(ctx, nc, prefix)
	require.NoError(t, err)
	assert.False(t, has)
	require.NoError(t, s.Put(ongoing("h", 0)))
	has, err = jstxn.HasState(ctx, nc, prefix)
	require.NoError(t, err)
	assert.True(t, has)
}

// Delete (an expired transactional id) removes the id for the next
// term's Load; the id can be written again afterwards, by this term and by
// the next; a Delete after another term fenced the id is refused.
func TestDelete(t *testing.T) {
	open, _ := opener(t)
	a := open(jstxn.Options{Epoch: 1})
	_, err := a.Load()
	require.NoError(t, err)
	gone := txnstate.Txn{ID: "gone", ProducerID: 3, TimeoutMs: 1000, Status: txnstate.CompleteCommit}
	kept := txnstate.Txn{ID: "kept", ProducerID: 4, TimeoutMs: 1000, Status: txnstate.Empty}
	require.NoError(t, a.Put(gone))
	require.NoError(t, a.Put(kept))
	require.NoError(t, a.Delete("gone"))
	require.NoError(t, a.Delete("never-written"))

	b := open(jstxn.Options{Epoch: 2})
	got, err := b.Load()
	require.NoError(t, err)
	assert.Equal(t, []txnstate.Txn{kept}, got)
	require.ErrorIs(t, a.Delete("kept"), txnstate.ErrFenced, "b fenced kept")
	back := gone
	back.ProducerID = 5
	require.NoError(t, b.Put(back), "a deleted id is written again")
	c := open(jstxn.Options{Epoch: 3})
	got, err = c.Load()
	require.NoError(t, err)
	assert.Equal(t, []txnstate.Txn{back, kept}, got)
}
