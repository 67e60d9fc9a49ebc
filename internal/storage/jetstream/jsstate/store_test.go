package jsstate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsstate"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/storage/sharestate/sharestatetest"
)

// cluster is the package's 3-node JetStream cluster (fsync before every
// acknowledgement), shared by every test.
var cluster *jstest.Cluster

// The tests share one JetStream cluster; once it is shut down, nothing
// they started (connections, watchers, loops) may still run.
func TestMain(m *testing.M) {
	jstest.Main(m, jstest.Options{SyncAlways: true}, func(c *jstest.Cluster) { cluster = c })
}

// medium is one share state bucket.
type medium struct {
	t      *testing.T
	nc     *nats.Conn
	prefix string
}

func newMedium(t *testing.T) medium {
	nc := cluster.Connect(t)
	prefix := cluster.Prefix()
	cluster.Cleanup(t, nc, prefix)
	return medium{t: t, nc: nc, prefix: prefix}
}

func (m medium) Open(t *testing.T) sharestate.Store {
	t.Helper()
	s, err := jsstate.Open(context.Background(), m.nc, jsstate.Options{Prefix: m.prefix, Replicas: 3})
	require.NoError(t, err)
	return s
}

// Crash returns the same bucket: the bucket is the durable medium, and a
// crash of the sharelog process loses only what its store has not written
// yet, which is nothing the suite has waited for.
func (m medium) Crash(*testing.T) sharestatetest.Medium { return m }

// SetFailing makes the bucket refuse writes as a full disk would, by
// lowering its stream's largest accepted message to one byte.
func (m medium) SetFailing(on bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := njs.New(m.nc)
	require.NoError(m.t, err)
	st, err := js.Stream(ctx, "KV_"+sljs.ShareBucket(m.prefix))
	require.NoError(m.t, err)
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = -1
	if on {
		cfg.MaxMsgSize = 1
	}
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(m.t, err)
	return true
}

func TestConformance(t *testing.T) {
	sharestatetest.Run(t, func(t *testing.T) sharestatetest.Medium { return newMedium(t) })
}

// kvStreamLast is the last sequence of the share bucket's stream: how many
// writes it has taken.
func kvStreamLast(t *testing.T, m medium) uint64 {
	t.Helper()
	js, err := njs.New(m.nc)
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), "KV_"+sljs.ShareBucket(m.prefix))
	require.NoError(t, err)
	return st.CachedInfo().State.LastSeq
}

func openStarted(t *testing.T, m medium) *jsstate.Store {
	t.Helper()
	s := m.Open(t).(*jsstate.Store)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Start(func() error { return nil }))
	return s
}

func ack(first, last int64) sharestate.Range {
	return sharestate.Range{First: first, Last: last, State: sharestate.Acknowledged}
}

func delta(g string, spso int64, rs ...sharestate.Range) sharestate.Entry {
	return sharestate.Entry{Kind: sharestate.KindPartDelta, Group: g, Topic: "t", TopicID: "tid", Partition: 0, SPSO: spso, Ranges: rs}
}

// Entries written while a commit round is in flight share the next round:
// 200 acknowledgements of one share-partition take a handful of KV writes,
// not 200.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	s := openStarted(t, m)
	before := kvStreamLast(t, m)
	_, err := s.Write(sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 1})
	require.NoError(t, err)
	var last uint64
	for i := range int64(200) {
		last, err = s.Write(delta("g", 0, ack(i, i)))
		require.NoError(t, err)
	}
	require.NoError(t, s.Wait(last))
	writes := kvStreamLast(t, m) - before
	t.Logf("201 entries took %d snapshot writes", writes)
	require.Less(t, writes, uint64(50), "201 entries took %d snapshot writes", writes)
	require.NoError(t, s.Close())

	again := m.Open(t)
	t.Cleanup(func() { _ = again.Close() })
	rec := again.Recovered()
	require.Len(t, rec.Groups, 1)
	require.Len(t, rec.Groups[0].Partitions, 1)
	require.Equal(t, int64(200), rec.Groups[0].Partitions[0].SPSO, "every acknowledgement is in the snapshot")
}

// A second instance that writes the same share-partition fences the first:
// the first's next commit fails with ErrConflict and is lost, and the
// bucket keeps the second's state.
func TestConflictFencesTheOldWriter(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	a := openStarted(t, m)
	tk, err := a.Write(delta("g", 0, ack(0, 0)))
	require.NoError(t, err)
	require.NoError(t, a.Wait(tk))

	b := m.Open(t).(*jsstate.Store)
	t.Cleanup(func() { _ = b.Close() })
	require.Equal(t, int64(1), b.Recovered().Groups[0].Partitions[0].SPSO)
	tk, err = b.Write(delta("g", 1, ack(1, 1)))
	require.NoError(t, err)
	require.NoError(t, b.Wait(tk))

	tk, err = a.Write(delta("g", 1, ack(1, 5)))
	require.NoError(t, err)
	err = a.Wait(tk)
	require.ErrorIs(t, err, jsstate.ErrConflict)
	require.True(t, a.Lost(tk))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())

	c := m.Open(t)
	t.Cleanup(func() { _ = c.Close() })
	require.Equal(t, int64(2), c.Recovered().Groups[0].Partitions[0].SPSO, "the fenced write is not in the bucket")
}

// A snapshot that cannot be decoded does not fail the open: its
// share-partition comes back offline, so it does not serve until repaired.
func TestUndecodableSnapshotIsOffline(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	s := openStarted(t, m)
	tk, err := s.Write(delta("g", 3))
	require.NoError(t, err)
	require.NoError(t, s.Wait(tk))
	require.NoError(t, s.Close())

	js, err := njs.New(m.nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), sljs.ShareBucket(m.prefix))
	require.NoError(t, err)
	key := "p." + sljs.HexKey("g") + "." + sljs.HexKey("tid") + ".0"
	_, err = kv.Get(context.Background(), key)
	require.NoError(t, err, "the snapshot key layout")
	_, err = kv.Put(context.Background(), key, []byte("{not json"))
	require.NoError(t, err)

	again := m.Open(t)
	t.Cleanup(func() { _ = again.Close() })
	rec := again.Recovered()
	require.Len(t, rec.Groups, 1)
	require.Len(t, rec.Groups[0].Partitions, 1)
	p := rec.Groups[0].Partitions[0]
	require.False(t, p.Initialized)
	require.Equal(t, "tid", p.TopicID)
	require.Contains(t, p.Offline, "undecodable")
}

// A startup snapshot that fails deletes nothing: the entries it wrote are
// kept as ordinary full states, and what it did not write stays.
func TestFailedStartupSnapshotDeletesNothing(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	s := openStarted(t, m)
	for _, g := range []string{"a", "b"} {
		tk, err := s.Write(sharestate.Entry{Kind: sharestate.KindGroup, Group: g, GroupEpoch: 1})
		require.NoError(t, err)
		require.NoError(t, s.Wait(tk))
	}
	require.NoError(t, s.Close())

	again := m.Open(t).(*jsstate.Store)
	t.Cleanup(func() { _ = again.Close() })
	boom := errors.New("snapshot failed half way")
	err := again.Start(func() error {
		if _, err := again.Write(sharestate.Entry{Kind: sharestate.KindGroup, Group: "a", GroupEpoch: 2}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.NoError(t, again.Close())

	third := m.Open(t)
	t.Cleanup(func() { _ = third.Close() })
	var got []string
	for _, g := range third.Recovered().Groups {
		got = append(got, fmt.Sprintf("%s epoch=%d", g.ID, g.GroupEpoch))
	}
	require.Equal(t, []string{"a epoch=2", "b epoch=1"}, got)
}

// Every field of a group's config survives Write and a re-open, the
// dead-letter topic included.
func TestGroupConfigRoundTrip(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	s := openStarted(t, m)
	i32 := func(v int32) *int32 { return &v }
	str := func(v string) *string { return &v }
	cfg := sharestate.GroupConfig{RecordLockDurationMs: i32(1), DeliveryCountLimit: i32(2), PartitionMaxRecordLocks: i32(3),
		AutoOffsetReset: str("earliest"), SessionTimeoutMs: i32(4), HeartbeatIntervalMs: i32(5), DeadLetterTopic: str("dlq")}
	tk, err := s.Write(sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 1, Config: cfg})
	require.NoError(t, err)
	require.NoError(t, s.Wait(tk))
	require.NoError(t, s.Close())

	again := m.Open(t)
	t.Cleanup(func() { _ = again.Close() })
	rec := again.Recovered()
	require.Len(t, rec.Groups, 1)
	require.Equal(t, cfg, rec.Groups[0].Config)
}

func openScoped(t *testing.T, m medium) *jsstate.Store {
	t.Helper()
	s, err := jsstate.Open(context.Background(), m.nc, jsstate.Options{Prefix: m.prefix, Replicas: 3, Scoped: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func write(t *testing.T, s sharestate.Store, es ...sharestate.Entry) {
	t.Helper()
	var tk uint64
	for _, e := range es {
		var err error
		tk, err = s.Write(e)
		require.NoError(t, err)
	}
	require.NoError(t, s.Wait(tk))
}

func groupEntry(g string, epoch int32) sharestate.Entry {
	return sharestate.Entry{Kind: sharestate.KindGroup, Group: g, GroupEpoch: epoch}
}

func partDelta(g, tid string, part int32, spso int64, rs ...sharestate.Range) sharestate.Entry {
	return sharestate.Entry{Kind: sharestate.KindPartDelta, Group: g, Topic: "t-" + tid, TopicID: tid, Partition: part, SPSO: spso, Ranges: rs}
}

// recoveredGroups opens the bucket unscoped and returns every group it
// recovers, by ID.
func recoveredGroups(t *testing.T, m medium) map[string]sharestate.GroupState {
	t.Helper()
	s := m.Open(t)
	defer func() { require.NoError(t, s.Close()) }()
	out := make(map[string]sharestate.GroupState)
	for _, g := range s.Recovered().Groups {
		out[g.ID] = g
	}
	return out
}

// A scoped store reads nothing at Open; AdoptGroup returns exactly the
// state an unscoped open recovers for that group — undecodable snapshots
// offline as there — and nothing of other groups, those whose hex key
// starts with the group's included.
func TestAdoptGroupReadsOnlyItsGroup(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	dlq := "dlq"
	write(t, u,
		sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 3, Config: sharestate.GroupConfig{DeadLetterTopic: &dlq}},
		partDelta("g", "tid", 0, 5, ack(7, 9)),
		partDelta("g", "tid", 1, 2),
		partDelta("g", "other", 0, 1),
		groupEntry("g2", 1), partDelta("g2", "tid", 0, 50), // hex("g2") starts with hex("g")
		groupEntry("h", 1), partDelta("h", "tid", 0, 60))
	require.NoError(t, u.Close())

	js, err := njs.New(m.nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(context.Background(), sljs.ShareBucket(m.prefix))
	require.NoError(t, err)
	_, err = kv.Put(context.Background(), "p."+sljs.HexKey("g")+"."+sljs.HexKey("other")+".0", []byte("{not json"))
	require.NoError(t, err)

	want := recoveredGroups(t, m)["g"]
	require.Len(t, want.Partitions, 3)
	require.Contains(t, want.Partitions[0].Offline, "undecodable", "partitions sorted by topic id: other first")

	s := openScoped(t, m)
	require.NotNil(t, s.Recovered())
	require.Empty(t, s.Recovered().Groups, "a scoped store reads nothing at Open")
	got, err := s.AdoptGroup(context.Background(), "g")
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, want, *got)

	// The adopted revisions are this store's: its next write of g
	// updates the snapshots instead of failing as a create would.
	write(t, s, partDelta("g", "tid", 0, 10))
	require.Equal(t, int64(10), recoveredGroups(t, m)["g"].Partitions[1].SPSO)
}

// Handover: A coordinates g, drops it; B adopts it and sees all A wrote;
// a late write of A is fenced (ErrConflict) and adds nothing — not even a
// share-partition key B never wrote — and DropGroup on A reports the loss.
func TestHandover(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	a := openScoped(t, m)
	require.NoError(t, a.Start(func() error { return nil }))
	got, err := a.AdoptGroup(context.Background(), "g")
	require.NoError(t, err)
	require.Nil(t, got)
	write(t, a, groupEntry("g", 1))
	for i := range int64(20) {
		write(t, a, partDelta("g", "tid", 0, 0, ack(0, i)))
	}
	write(t, a, partDelta("g", "tid", 1, 3, ack(5, 5)))
	require.NoError(t, a.DropGroup("g"))

	b := openScoped(t, m)
	require.NoError(t, b.Start(func() error { return nil }))
	got, err = b.AdoptGroup(context.Background(), "g")
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, int32(1), got.GroupEpoch)
	require.Len(t, got.Partitions, 2)
	require.Equal(t, int64(20), got.Partitions[0].SPSO, "every acknowledgement A waited for")
	require.Equal(t, []sharestate.Range{ack(5, 5)}, got.Partitions[1].Ranges)
	write(t, b, partDelta("g", "tid", 0, 20, ack(20, 29)))

	for _, e := range []sharestate.Entry{
		partDelta("g", "tid", 0, 20, ack(20, 99)), // a snapshot B has
		partDelta("g", "tid", 7, 0, ack(0, 9)),    // one it has not
		groupEntry("g", 2),
	} {
		tk, err := a.Write(e)
		require.NoError(t, err)
		err = a.Wait(tk)
		require.ErrorIs(t, err, jsstate.ErrConflict, "%v", e.Kind)
		require.True(t, a.Lost(tk))
	}
	err = a.DropGroup("g")
	require.ErrorIs(t, err, jsstate.ErrConflict, "DropGroup reports the group's lost entries")
	require.NoError(t, a.DropGroup("g"), "the loss was reported once")

	after := recoveredGroups(t, m)["g"]
	require.Equal(t, int32(1), after.GroupEpoch)
	require.Len(t, after.Partitions, 2, "A's fenced round created no key")
	require.Equal(t, int64(30), after.Partitions[0].SPSO, "B's write, not A's")
	require.Equal(t, []sharestate.Range{ack(5, 5)}, after.Partitions[1].Ranges)

	// B still owns g: its next write succeeds.
	write(t, b, partDelta("g", "tid", 0, 30, ack(30, 30)))
	require.NoError(t, b.DropGroup("g"))
}

// DropGroup reports the losses of its own group's entries only.
func TestDropGroupReportsItsGroupsLoss(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	s := openScoped(t, m)
	require.NoError(t, s.Start(func() error { return nil }))
	for _, g := range []string{"g", "h"} {
		_, err := s.AdoptGroup(context.Background(), g)
		require.NoError(t, err)
		write(t, s, groupEntry(g, 1))
	}
	m.SetFailing(true)
	tk, err := s.Write(partDelta("h", "tid", 0, 1))
	require.NoError(t, err)
	require.ErrorIs(t, s.Wait(tk), jsstate.ErrStorage)
	m.SetFailing(false)
	write(t, s, partDelta("g", "tid", 0, 1))

	require.NoError(t, s.DropGroup("g"))
	require.ErrorIs(t, s.DropGroup("h"), jsstate.ErrStorage)
}

// A group with no keys: AdoptGroup returns nil and the group's first
// write creates its keys.
func TestAdoptNewGroup(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	s := openScoped(t, m)
	require.NoError(t, s.Start(func() error { return nil }))
	ids, err := s.GroupIDs(context.Background())
	require.NoError(t, err)
	require.Empty(t, ids, "an empty bucket has no groups, and that is no error")

	got, err := s.AdoptGroup(context.Background(), "new")
	require.NoError(t, err)
	require.Nil(t, got)
	write(t, s, groupEntry("new", 4))

	ids, err = s.GroupIDs(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"new"}, ids)
	require.Equal(t, int32(4), recoveredGroups(t, m)["new"].GroupEpoch)

	other := openScoped(t, m)
	got, err = other.AdoptGroup(context.Background(), "new")
	require.NoError(t, err)
	require.Equal(t, &sharestate.GroupState{ID: "new", GroupEpoch: 4}, got)
}

// Start of a scoped store deletes only what it adopted: nothing after
// Open, the adopted group's snapshots when snap does not write them, and
// never a group it did not adopt.
func TestScopedStartDeletesOnlyAdoptedGroups(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	write(t, u, groupEntry("a", 1), partDelta("a", "tid", 0, 1), groupEntry("b", 1), partDelta("b", "tid", 0, 2))
	require.NoError(t, u.Close())

	s := openScoped(t, m)
	require.NoError(t, s.Start(func() error { return nil }))
	require.NoError(t, s.Close())
	rec := recoveredGroups(t, m)
	require.Len(t, rec, 2, "nothing adopted, nothing deleted")
	require.Equal(t, int64(1), rec["a"].Partitions[0].SPSO)
	require.Equal(t, int64(2), rec["b"].Partitions[0].SPSO)

	s = openScoped(t, m)
	_, err := s.AdoptGroup(context.Background(), "a")
	require.NoError(t, err)
	require.NoError(t, s.Start(func() error { return nil }))
	require.NoError(t, s.Close())
	rec = recoveredGroups(t, m)
	require.NotContains(t, rec, "a", "the adopted group is replaced by the empty snapshot")
	require.Equal(t, int64(2), rec["b"].Partitions[0].SPSO, "the group not adopted is untouched")
}

// AdoptGroup's misuses fail, a failed adopt leaves the group adoptable,
// and GroupIDs lists every group's ID, decoded and sorted.
func TestAdoptGroupRules(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	_, err := u.AdoptGroup(context.Background(), "g")
	require.Error(t, err, "an unscoped store owns every group")
	require.Error(t, u.DropGroup("g"))
	write(t, u, groupEntry("z", 1), groupEntry("a..b", 1), partDelta("p-only", "tid", 0, 1), groupEntry("g", 1))
	ids, err := u.GroupIDs(context.Background())
	require.NoError(t, err)
	// p-only has a group key too: a group's share-partition writes it.
	require.Equal(t, []string{"a..b", "g", "p-only", "z"}, ids)

	s := openScoped(t, m)
	ids, err = s.GroupIDs(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"a..b", "g", "p-only", "z"}, ids)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.AdoptGroup(cancelled, "g")
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.AdoptGroup(context.Background(), "g")
	require.NoError(t, err, "a failed adopt leaves the group adoptable")
	_, err = s.AdoptGroup(context.Background(), "g")
	require.ErrorContains(t, err, "adopted already")
	require.NoError(t, s.DropGroup("g"))
	got, err := s.AdoptGroup(context.Background(), "g")
	require.NoError(t, err, "adoptable again after DropGroup")
	require.Equal(t, int32(1), got.GroupEpoch)

	require.NoError(t, s.Close())
	_, err = s.AdoptGroup(context.Background(), "z")
	require.ErrorIs(t, err, sharestate.ErrClosed)
	require.ErrorIs(t, s.DropGroup("g"), sharestate.ErrClosed)
}

// fullEntries are the entries a startup snapshot writes for gs.
func fullEntries(gs *sharestate.GroupState) []sharestate.Entry {
	out := []sharestate.Entry{{Kind: sharestate.KindGroup, Group: gs.ID, GroupEpoch: gs.GroupEpoch, Config: gs.Config}}
	for _, p := range gs.Partitions {
		out = append(out, sharestate.Entry{Kind: sharestate.KindPartFull, Group: gs.ID, Topic: p.Topic, TopicID: p.TopicID,
			Partition: p.Partition, SPSO: p.SPSO, Ranges: p.Ranges})
	}
	return out
}

// An AdoptGroup during Start's snapshot is applied after the whole
// snapshot: applied in the middle, it would cut the snapshot's round in
// two, and the first part would delete the adopted groups whose entries
// are in the second (to be created again by it).
func TestAdoptGroupWaitsForStartSnapshot(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	for _, g := range []string{"a", "b", "c"} {
		write(t, u, groupEntry(g, 1), partDelta(g, "tid", 0, 3, ack(5, 6)))
	}
	require.NoError(t, u.Close())

	s := openScoped(t, m)
	adopted := make(map[string]*sharestate.GroupState)
	for _, g := range []string{"a", "b"} {
		gs, err := s.AdoptGroup(context.Background(), g)
		require.NoError(t, err)
		adopted[g] = gs
	}
	before := kvStreamLast(t, m)
	adoptedC := make(chan *sharestate.GroupState, 1)
	require.NoError(t, s.Start(func() error {
		for _, e := range fullEntries(adopted["a"]) {
			if _, err := s.Write(e); err != nil {
				return err
			}
		}
		go func() {
			gs, err := s.AdoptGroup(context.Background(), "c")
			assert.NoError(t, err)
			adoptedC <- gs
		}()
		time.Sleep(300 * time.Millisecond) // the adopt's read is done
		for _, e := range fullEntries(adopted["b"]) {
			if _, err := s.Write(e); err != nil {
				return err
			}
		}
		return nil
	}))
	gs := <-adoptedC
	require.NotNil(t, gs)
	require.Equal(t, int64(3), gs.Partitions[0].SPSO)
	// The snapshot equals the bucket, so it wrote and deleted nothing; the
	// adoption wrote its read's mark and rewrote c's keys once each (its
	// fence of c's previous coordinator).
	require.Equal(t, before+uint64(1+1+len(gs.Partitions)), kvStreamLast(t, m), "the snapshot wrote nothing, the adoption its mark and each of c's keys once")
	require.NoError(t, s.Close())
	require.Len(t, recoveredGroups(t, m), 3)
}

// LiveGroupIDs follows the bucket's group keys through its watch: a group
// written by another store appears, a deleted one goes.
func TestLiveGroupIDs(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	u := openStarted(t, m)
	write(t, u, groupEntry("a", 1))
	s := openScoped(t, m)
	ids, err := s.LiveGroupIDs(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
	require.Eventually(t, s.GroupWatchReady, 5*time.Second, 10*time.Millisecond, "the watch delivers the bucket's keys")
	write(t, u, groupEntry("b", 1))
	require.Eventually(t, func() bool {
		ids, err = s.LiveGroupIDs(context.Background())
		return err == nil && slices.Equal(ids, []string{"a", "b"})
	}, 5*time.Second, 10*time.Millisecond, "%v %v", ids, err)
	write(t, u, sharestate.Entry{Kind: sharestate.KindGroupDelete, Group: "a"})
	require.Eventually(t, func() bool {
		ids, err = s.LiveGroupIDs(context.Background())
		return err == nil && slices.Equal(ids, []string{"b"})
	}, 5*time.Second, 10*time.Millisecond, "%v %v", ids, err)
	require.True(t, s.GroupWatchReady(), "answered from the watch")
	require.NoError(t, s.Close())
	require.Eventually(t, func() bool { return !s.GroupWatchReady() }, 5*time.Second, 10*time.Millisecond, "Close stops the watch")
}

// Adopting a group fences its previous coordinator even when that one
// never dropped it (its lease expired while it still served): the new
// coordinator reads everything the old one confirmed, and the old one's
// next write is refused instead of landing after that read unseen.
func TestAdoptFencesACoordinatorThatDidNotDrop(t *testing.T) {
	t.Parallel()
	m := newMedium(t)
	a, b := openScoped(t, m), openScoped(t, m)
	_, err := a.AdoptGroup(context.Background(), "g")
	require.NoError(t, err)
	write(t, a, groupEntry("g", 1), partDelta("g", "tid", 0, 0, ack(0, 4)))

	gs, err := b.AdoptGroup(context.Background(), "g") // a did not DropGroup
	require.NoError(t, err)
	require.Len(t, gs.Partitions, 1)
	require.Equal(t, int64(5), gs.Partitions[0].SPSO, "what a confirmed is read")

	tk, err := a.Write(partDelta("g", "tid", 0, 5, ack(5, 9)))
	require.NoError(t, err)
	require.ErrorIs(t, a.Wait(tk), jsstate.ErrConflict, "a late write of the old coordinator is refused")
	write(t, b, partDelta("g", "tid", 0, 5, ack(5, 6)))
	require.Equal(t, int64(7), recoveredGroups(t, m)["g"].Partitions[0].SPSO)
}
