package jslog

import (
	"context"
	"fmt"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/logstore/logstoretest"
)

var bg = context.Background()

// waitTimeout bounds waits for something that must happen; it matters only
// when a test fails.
const waitTimeout = 10 * time.Second

func rec(key, value string) logstore.Record {
	return logstore.Record{Key: []byte(key), Value: []byte(value), Timestamp: 1}
}

// pair opens two stores (two sharelog instances) on one prefix, each on
// its own connection.
func pair(t *testing.T) (*Store, *Store) {
	t.Helper()
	nc := cluster.Connect(t)
	prefix := cluster.Prefix()
	cluster.Cleanup(t, nc, prefix)
	a := openStore(t, nc, Options{Prefix: prefix})
	b := openStore(t, cluster.Connect(t), Options{Prefix: prefix})
	return a, b
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("no wake-up after %s", what)
	}
}

// The layout operators see: one stream per partition, named and configured
// as docs/cluster.md says, and offsets equal to sequence - 1.
func TestStreamLayout(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	info, err := s.CreateTopic(bg, "layout", 2, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	_, err = s.Append(bg, "layout", 1, []logstore.Record{rec("a", "1"), rec("b", "2")})
	require.NoError(t, err)
	st, err := s.js.Stream(bg, s.prefix+"_"+info.ID+"_1")
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	assert.Equal(t, []string{s.prefix + "." + info.ID + ".1"}, cfg.Subjects)
	assert.Equal(t, njs.FileStorage, cfg.Storage)
	assert.Equal(t, 3, cfg.Replicas)
	assert.Equal(t, njs.LimitsPolicy, cfg.Retention)
	assert.True(t, cfg.DenyDelete)
	assert.False(t, cfg.DenyPurge)
	assert.True(t, cfg.AllowDirect)
	assert.True(t, cfg.AllowAtomicPublish)
	assert.Equal(t, info.ID, cfg.Metadata["sharelog.topic_id"])
	m, err := st.GetMsg(bg, 2)
	require.NoError(t, err)
	r, err := logstore.DecodeRecord(m.Data)
	require.NoError(t, err)
	assert.Equal(t, int64(1), r.Offset, "sequence 2 holds offset 1")
	assert.Equal(t, "b", string(r.Key))
}

// An append that expects a stale end of the stream is refused with
// ErrFenced and stores nothing; the store then re-reads the end, so its
// next append (if the caller still owns the partition) goes after the
// other writer's records.
func TestAppendFenced(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	info, err := s.CreateTopic(bg, "fence", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	_, err = s.Append(bg, "fence", 0, []logstore.Record{rec("a", "mine")})
	require.NoError(t, err)
	p, err := s.partition("fence", 0)
	require.NoError(t, err)
	// Stop following the stream, as if this instance were partitioned
	// from the other writer's records, then let another writer append.
	p.mu.Lock()
	cc := p.cons
	p.mu.Unlock()
	cc.Stop()
	other := logstore.EncodeRecord(nil, &logstore.Record{Value: []byte("theirs")}, 1, true)
	_, err = s.js.Publish(bg, sljs.Subject(s.prefix, info.ID, 0), other)
	require.NoError(t, err)

	_, err = s.Append(bg, "fence", 0, []logstore.Record{rec("b", "stale")})
	require.ErrorIs(t, err, sljs.ErrFenced)
	st, err := s.js.Stream(bg, sljs.StreamName(s.prefix, info.ID, 0))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), st.CachedInfo().State.LastSeq, "the fenced batch stored nothing")

	base, err := s.Append(bg, "fence", 0, []logstore.Record{rec("c", "after")})
	require.NoError(t, err)
	assert.Equal(t, int64(2), base, "after a fence the store appends after the other writer's records")
	_, err = s.ScanKeys(bg, "fence", 0, nil, 3)
	assert.ErrorIs(t, err, logstore.ErrIndexNotReady, "the index has not seen the other writer's record")
	recs, err := s.Read(bg, "fence", 0, 0, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 3)
	assert.Equal(t, []string{"mine", "theirs", "after"}, []string{string(recs[0].Value), string(recs[1].Value), string(recs[2].Value)})
}

// A second instance sees topics the first creates and deletes, follows its
// appends (Watch wakes, the high watermark moves) and rebuilds the key
// index from the stream.
func TestSecondInstanceFollows(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	_, err := a.CreateTopic(bg, "shared", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	var want []logstore.KeyEntry
	for i := range 60 {
		_, err := a.Append(bg, "shared", 0, []logstore.Record{rec(fmt.Sprintf("k%02d", i%20), fmt.Sprint(i))})
		require.NoError(t, err)
		if i >= 40 {
			want = append(want, logstore.KeyEntry{Key: []byte(fmt.Sprintf("k%02d", i%20)), Offset: int64(i)})
		}
	}
	require.Eventually(t, func() bool { _, err := b.TopicID("shared"); return err == nil }, waitTimeout, 5*time.Millisecond,
		"the metadata watch brings the topic")
	ch, err := b.Watch("shared", 0)
	require.NoError(t, err)
	_, hw, err := b.Bounds("shared", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(60), hw, "a loading instance reads the end of the stream")

	_, err = a.Append(bg, "shared", 0, []logstore.Record{rec("new", "x")})
	require.NoError(t, err)
	waitClosed(t, ch, "another instance's append")
	require.Eventually(t, func() bool { _, hw, _ := b.Bounds("shared", 0); return hw == 61 }, waitTimeout, 5*time.Millisecond)

	require.Eventually(t, func() bool { _, err := b.ScanKeys(bg, "shared", 0, nil, 60); return err == nil }, waitTimeout, 5*time.Millisecond,
		"the key index is rebuilt from the stream")
	assert.Equal(t, want, logstoretest.ScanAll(t, b, "shared", 0, nil, 60))

	ch, err = b.Watch("shared", 0)
	require.NoError(t, err)
	require.NoError(t, a.DeleteTopic(bg, "shared"))
	waitClosed(t, ch, "the topic's deletion by another instance")
	_, _, err = b.Bounds("shared", 0)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	_, err = b.CreateTopic(bg, "shared", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err, "the name is free again")
	_, err = a.CreateTopic(bg, "shared", 1, logstore.TopicConfig{RetentionMs: -1})
	assert.ErrorIs(t, err, logstore.ErrTopicExists, "one creation wins")
}

// A purge by one instance is found by another's reads: the records below
// it are out of range and its log start moves.
func TestPurgeSeenByOtherInstance(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	_, err := a.CreateTopic(bg, "purged", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	for i := range 10 {
		_, err := a.Append(bg, "purged", 0, []logstore.Record{rec("k", fmt.Sprint(i))})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { _, hw, err := b.Bounds("purged", 0); return err == nil && hw == 10 }, waitTimeout, 5*time.Millisecond)
	ls, err := a.DeleteRecordsBefore(bg, "purged", 0, 6)
	require.NoError(t, err)
	assert.Equal(t, int64(6), ls)
	_, err = b.Read(bg, "purged", 0, 2, 10, 1<<20)
	require.ErrorIs(t, err, logstore.ErrOffsetOutOfRange)
	ls, _, err = b.Bounds("purged", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(6), ls, "the read taught the other instance the new log start")
	recs, err := b.Read(bg, "purged", 0, 6, 10, 1<<20)
	require.NoError(t, err)
	assert.Len(t, recs, 4)
}

// One append is one atomic batch: more records than a batch may hold is
// refused up front, and a batch of the server's default limit goes through.
func TestBatchLimits(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	_, err := s.CreateTopic(bg, "big", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	recs := make([]logstore.Record, 1001)
	for i := range recs {
		recs[i] = rec("k", fmt.Sprint(i))
	}
	_, err = s.Append(bg, "big", 0, recs)
	require.ErrorIs(t, err, logstore.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "at most 1000")
	_, err = s.Append(bg, "big", 0, []logstore.Record{{Value: make([]byte, 2<<20)}})
	require.ErrorIs(t, err, logstore.ErrInvalidArgument, "a record over the servers' max_payload")
	assert.Contains(t, err.Error(), "max_payload")
	base, err := s.Append(bg, "big", 0, recs[:1000])
	require.NoError(t, err)
	assert.Zero(t, base)
	_, hw, err := s.Bounds("big", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), hw)
}

// With the cluster out of reach, calls fail with ErrStorage within the
// store's timeout instead of hanging.
func TestUnreachableIsStorageError(t *testing.T) {
	t.Parallel()
	nc := cluster.Connect(t)
	prefix := cluster.Prefix()
	cluster.Cleanup(t, cluster.Connect(t), prefix)
	s := openStore(t, nc, Options{Prefix: prefix, Timeout: 2 * time.Second})
	_, err := s.CreateTopic(bg, "cut", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	_, err = s.Append(bg, "cut", 0, []logstore.Record{rec("a", "b")})
	require.NoError(t, err)
	nc.Close()
	_, err = s.Append(bg, "cut", 0, []logstore.Record{rec("a", "c")})
	assert.ErrorIs(t, err, logstore.ErrStorage)
	_, err = s.Read(bg, "cut", 0, 0, 10, 1<<20)
	assert.ErrorIs(t, err, logstore.ErrStorage)
	_, err = s.DeleteRecordsBefore(bg, "cut", 0, 1)
	assert.ErrorIs(t, err, logstore.ErrStorage)
	_, err = s.CreateTopic(bg, "cut2", 1, logstore.TopicConfig{RetentionMs: -1})
	assert.ErrorIs(t, err, logstore.ErrStorage)
}

// A change of stream leader (as when a NATS server is restarted cleanly)
// loses nothing: appends go on at the next offset and every record reads
// back.
func TestStreamLeaderChange(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	info, err := s.CreateTopic(bg, "moved", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	_, err = s.Append(bg, "moved", 0, []logstore.Record{rec("a", "0"), rec("b", "1")})
	require.NoError(t, err)
	stream := sljs.StreamName(s.prefix, info.ID, 0)
	leader := func() string {
		st, err := s.js.Stream(bg, stream)
		if err != nil || st.CachedInfo().Cluster == nil {
			return ""
		}
		return st.CachedInfo().Cluster.Leader
	}
	old := leader()
	require.NotEmpty(t, old)
	require.NoError(t, sljs.Request(bg, s.nc, "STREAM.LEADER.STEPDOWN."+stream, struct{}{}, nil))
	require.Eventually(t, func() bool { l := leader(); return l != "" && l != old }, waitTimeout, 10*time.Millisecond,
		"a new stream leader")

	base, err := s.Append(bg, "moved", 0, []logstore.Record{rec("c", "2")})
	require.NoError(t, err)
	assert.Equal(t, int64(2), base)
	recs, err := s.Read(bg, "moved", 0, 0, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 3)
	for i, r := range recs {
		assert.Equal(t, fmt.Sprint(i), string(r.Value))
	}
}

// Resync makes an instance that has just become the owner append after the
// records it has not seen yet (no fence) and know the log start another
// instance purged to.
func TestResyncBeforeTakingOver(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	info, err := s.CreateTopic(bg, "resync", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	_, err = s.Append(bg, "resync", 0, []logstore.Record{rec("a", "mine")})
	require.NoError(t, err)
	p, err := s.partition("resync", 0)
	require.NoError(t, err)
	// This instance stops following the stream; the previous owner appends
	// two records and purges below offset 2.
	p.mu.Lock()
	cc := p.cons
	p.mu.Unlock()
	cc.Stop()
	for off := int64(1); off <= 2; off++ {
		_, err = s.js.Publish(bg, sljs.Subject(s.prefix, info.ID, 0),
			logstore.EncodeRecord(nil, &logstore.Record{Value: []byte("theirs")}, off, true))
		require.NoError(t, err)
	}
	st, err := s.js.Stream(bg, sljs.StreamName(s.prefix, info.ID, 0))
	require.NoError(t, err)
	require.NoError(t, st.Purge(bg, njs.WithPurgeSequence(3)))

	require.NoError(t, s.Resync(bg, "resync", 0))
	ls, hw, err := s.Bounds("resync", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), ls)
	assert.Equal(t, int64(3), hw)
	base, err := s.Append(bg, "resync", 0, []logstore.Record{rec("b", "new owner")})
	require.NoError(t, err, "not fenced after a resync")
	assert.Equal(t, int64(3), base)
}

// Describing a topic reads each partition's bounds from its stream and
// does not start following the partitions: an instance that answers
// DescribeTopic must not go on reading partitions it does not serve.
func TestTopicDoesNotFollow(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	_, err := a.CreateTopic(bg, "described", 2, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	for i := range 5 {
		_, err := a.Append(bg, "described", 1, []logstore.Record{rec("k", fmt.Sprint(i))})
		require.NoError(t, err)
	}
	_, err = a.DeleteRecordsBefore(bg, "described", 1, 2)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := b.TopicID("described"); return err == nil }, waitTimeout, 5*time.Millisecond)

	_, parts, err := b.Topic(bg, "described")
	require.NoError(t, err)
	require.Len(t, parts, 2)
	assert.Equal(t, int64(0), parts[0].HighWatermark)
	assert.Equal(t, int64(2), parts[1].LogStartOffset, "the purge, from the stream's first sequence")
	assert.Equal(t, int64(5), parts[1].HighWatermark, "the end, from the stream's last sequence")
	for i := range int32(2) {
		p, err := b.partition("described", i)
		require.NoError(t, err)
		p.mu.Lock()
		loaded := p.loaded
		p.mu.Unlock()
		assert.False(t, loaded, "partition %d is followed after a describe", i)
	}
	// The writer's own view agrees.
	_, own, err := a.Topic(bg, "described")
	require.NoError(t, err)
	assert.Equal(t, parts, own)
}

// An alteration made through one instance reaches the other through the
// metadata watch (new partitions it can write and read, the new config,
// a wake-up of its watchers), and a store opened afterwards loads it: it is
// in the metadata entry, not only in memory.
func TestAlterTopicFollowedAndDurable(t *testing.T) {
	t.Parallel()
	a, b := pair(t)
	info, err := a.CreateTopic(bg, "altered", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	_, err = a.Append(bg, "altered", 0, []logstore.Record{rec("a", "1")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := b.TopicID("altered"); return err == nil }, waitTimeout, 5*time.Millisecond)
	ch, err := b.Watch("altered", 0)
	require.NoError(t, err)

	_, err = a.AlterTopic(bg, "altered", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
		cur.Partitions = 3
		cur.Config.MaxMessageBytes = 4096
		cur.Config.DeleteRetentionMs = 1000
		cur.Config.Overrides = []string{"max.message.bytes"}
		return cur, nil
	})
	require.NoError(t, err)
	waitClosed(t, ch, "the alteration made by another instance")
	require.Eventually(t, func() bool {
		got, err := b.TopicInfo(bg, "altered")
		return err == nil && got.Partitions == 3
	}, waitTimeout, 5*time.Millisecond)
	got, err := b.TopicInfo(bg, "altered")
	require.NoError(t, err)
	assert.Equal(t, info.ID, got.ID)
	assert.Equal(t, int64(4096), got.Config.MaxMessageBytes)
	assert.Equal(t, int64(1000), got.Config.DeleteRetentionMs)
	assert.Equal(t, []string{"max.message.bytes"}, got.Config.Overrides)

	// The new partitions' streams exist: the other instance writes them.
	base, err := b.Append(bg, "altered", 2, []logstore.Record{rec("k", "on 2")})
	require.NoError(t, err)
	assert.Equal(t, int64(0), base)
	st, err := a.js.Stream(bg, sljs.StreamName(a.prefix, info.ID, 2))
	require.NoError(t, err)
	assert.Equal(t, "2", st.CachedInfo().Config.Metadata["sharelog.partition"])

	// The old partition kept its record, for both.
	_, hw, err := b.Bounds("altered", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), hw)

	// A store opened now loads the altered topic from the bucket.
	c := openStore(t, cluster.Connect(t), Options{Prefix: a.prefix})
	loaded, parts, err := c.Topic(bg, "altered")
	require.NoError(t, err)
	assert.Equal(t, got, loaded)
	require.Len(t, parts, 3)
	assert.Equal(t, int64(1), parts[2].HighWatermark)
}
