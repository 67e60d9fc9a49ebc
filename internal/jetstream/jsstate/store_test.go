package jsstate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	sljs "github.com/sharelog/sharelog/internal/jetstream"
	"github.com/sharelog/sharelog/internal/jetstream/jsstate"
	"github.com/sharelog/sharelog/internal/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/sharestate"
	"github.com/sharelog/sharelog/internal/sharestate/sharestatetest"
)

// cluster is the package's 3-node JetStream cluster (fsync before every
// acknowledgement), shared by every test.
var cluster *jstest.Cluster

func TestMain(m *testing.M) {
	c, err := jstest.Start(jstest.Options{SyncAlways: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the JetStream test cluster:", err)
		os.Exit(1)
	}
	cluster = c
	code := m.Run()
	c.Shutdown()
	os.Exit(code)
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
