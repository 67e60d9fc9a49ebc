package sharegroup

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// dlqEnv is a manager whose dead-letter worker runs only when the test
// flushes it.
func dlqEnv(t *testing.T, store logstore.Store, dir string, mut func(*testOpts)) *env {
	t.Helper()
	return newEnvOn(t, store, dir, func(o *testOpts) {
		o.dlqManual = true
		o.DeliveryCountLimit = 2
		if mut != nil {
			mut(o)
		}
	})
}

// dlqRecords reads every record of topic's partition 0.
func dlqRecords(t *testing.T, store logstore.Store, topic string) []logstore.Record {
	t.Helper()
	ls, hw, err := store.Bounds(topic, 0)
	require.NoError(t, err)
	if hw == ls {
		return nil
	}
	recs, err := store.Read(context.Background(), topic, 0, ls, int(hw-ls), 1<<30)
	require.NoError(t, err)
	return recs
}

func header(r logstore.Record, key string) string {
	v := ""
	for _, h := range r.Headers {
		if h.Key == key {
			v = string(h.Value)
		}
	}
	return v
}

// sourceOffsets lists the dlq.source.offset of each copy, in order.
func sourceOffsets(recs []logstore.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i], _ = strconv.ParseInt(header(r, DLQHeaderSourceOffset), 10, 64)
	}
	return out
}

// REJECT copies the record, with its key, value, timestamp and headers
// and the dlq.* headers, once; then it is ARCHIVED and SPSO passes it.
func TestDeadLetterReject(t *testing.T) {
	store := logstore.NewMem()
	defer store.Close()
	e := dlqEnv(t, store, t.TempDir(), nil)
	e.topic("t", 1)
	e.topic("dlq.t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeadLetterTopic: str("dlq.t")})
	_, err := store.Append(context.Background(), "t", 0, []logstore.Record{
		{Timestamp: 1234, Key: []byte("k0"), Value: []byte("v0"), Headers: []logstore.Header{{Key: "h", Value: []byte("x")}}},
		{Timestamp: 1235, Key: []byte("k1"), Value: []byte("v1")},
	})
	require.NoError(t, err)
	require.Equal(t, []AcquiredRange{rng(0, 1, 1)}, acquired(t, e.open("m", x), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckReject), batch(1, 1, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, "spso=0 [0-0 ARCHIVING(1)] [1-1 ACKNOWLEDGED(0)]", e.state(x), "the copy is pending: SPSO stays")

	require.NoError(t, e.m.DeadLetterFlush(context.Background()))
	assert.Equal(t, "spso=2", e.state(x))
	recs := dlqRecords(t, store, "dlq.t")
	require.Len(t, recs, 1)
	r := recs[0]
	assert.Equal(t, int64(1234), r.Timestamp)
	assert.Equal(t, "k0", string(r.Key))
	assert.Equal(t, "v0", string(r.Value))
	assert.Equal(t, []logstore.Header{
		{Key: "h", Value: []byte("x")},
		{Key: DLQHeaderSourceTopic, Value: []byte("t")},
		{Key: DLQHeaderSourcePartition, Value: []byte("0")},
		{Key: DLQHeaderSourceOffset, Value: []byte("0")},
		{Key: DLQHeaderGroup, Value: []byte(testGroup)},
		{Key: DLQHeaderDeliveryCount, Value: []byte("1")},
	}, r.Headers)

	require.NoError(t, e.m.DeadLetterFlush(context.Background()))
	assert.Len(t, dlqRecords(t, store, "dlq.t"), 1, "a second flush copies nothing")
	d, err := e.m.DescribeGroup(context.Background(), testGroup)
	require.NoError(t, err)
	assert.Equal(t, "dlq.t", *d.Config.DeadLetterTopic)
	assert.Equal(t, uint64(1), d.DeadLetteredRecords)
	assert.Equal(t, uint64(0), d.DeadLetterSkippedRecords)
	assert.Equal(t, uint64(1), e.m.Stats().DeadLettered)
}

// The delivery-count limit (RELEASE at the limit, lock expiry at the
// limit, a lowered limit found by acquisition) copies too; GAP and ACCEPT
// do not, nor does a group without a dead-letter topic.
func TestDeadLetterLimit(t *testing.T) {
	store := logstore.NewMem()
	defer store.Close()
	e := dlqEnv(t, store, t.TempDir(), func(o *testOpts) { o.DeliveryCountLimit = 3 })
	e.topic("t", 1)
	e.topic("dlq.t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeadLetterTopic: str("dlq.t"), RecordLockDurationMs: i32(60000)})
	e.produce("t", 0, 10, 5)
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, e.open("m", x), x))
	// 0-1 released twice more (count 3 = limit on the third), 2 GAP, 3-9 released once.
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 1, AckRelease), batch(2, 2, AckGap), batch(3, 9, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(0, 1, 2), rng(3, 9, 2)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 1, AckRelease), batch(3, 9, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(0, 1, 3), rng(3, 9, 3)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 1, AckRelease), batch(3, 4, AckAccept), batch(5, 9, AckRelease))).Partitions[0].ErrorCode)
	assert.Equal(t, "spso=0 [0-1 ARCHIVING(3)] [2-2 ARCHIVED(0)] [3-4 ACKNOWLEDGED(0)] [5-9 ARCHIVING(3)]", e.state(x))
	require.NoError(t, e.m.DeadLetterFlush(context.Background()))
	assert.Equal(t, "spso=10", e.state(x))
	recs := dlqRecords(t, store, "dlq.t")
	assert.Equal(t, []int64{0, 1, 5, 6, 7, 8, 9}, sourceOffsets(recs))
	for _, r := range recs {
		assert.Equal(t, "3", header(r, DLQHeaderDeliveryCount))
	}

	// A lowered limit: acquisition archives AVAILABLE records over it.
	e.produce("t", 0, 2, 5) // 10, 11
	require.Equal(t, []AcquiredRange{rng(10, 11, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(10, 11, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(10, 11, 2)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(10, 11, AckRelease))).Partitions[0].ErrorCode)
	e.update(GroupConfig{DeliveryCountLimit: i32(2)})
	assert.False(t, hasPart(e.fetch("m", FetchRequest{}), x), "nothing acquired")
	assert.Equal(t, "spso=10 [10-11 ARCHIVING(2)]", e.state(x))
	require.NoError(t, e.m.DeadLetterFlush(context.Background()))
	assert.Equal(t, []int64{0, 1, 5, 6, 7, 8, 9, 10, 11}, sourceOffsets(dlqRecords(t, store, "dlq.t")))

	// No dead-letter topic: REJECT archives at once.
	e.update(GroupConfig{DeadLetterTopic: str("")})
	e.produce("t", 0, 1, 5) // 12
	require.Equal(t, []AcquiredRange{rng(12, 12, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(12, 12, AckReject))).Partitions[0].ErrorCode)
	assert.Equal(t, "spso=13", e.state(x))
	assert.Len(t, dlqRecords(t, store, "dlq.t"), 9)
}

// Lock expiry at the limit copies the record (the background path).
func TestDeadLetterExpiry(t *testing.T) {
	store := logstore.NewMem()
	defer store.Close()
	e := dlqEnv(t, store, t.TempDir(), func(o *testOpts) {
		o.DeliveryCountLimit = 2
	})
	e.topic("t", 1)
	e.topic("dlq.t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeadLetterTopic: str("dlq.t"), RecordLockDurationMs: i32(60000)})
	e.produce("t", 0, 1, 5)
	require.Equal(t, []AcquiredRange{rng(0, 0, 1)}, acquired(t, e.open("m", x), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(0, 0, 2)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	// Expire the lock now (as its deadline passing would).
	sp := e.sp(x)
	sp.mu.Lock()
	sp.expire(sp.runs[0].deadline)
	sp.mu.Unlock()
	assert.Equal(t, "spso=0 [0-0 ARCHIVING(2)]", e.state(x))
	require.NoError(t, e.m.DeadLetterFlush(context.Background()))
	assert.Equal(t, []int64{0}, sourceOffsets(dlqRecords(t, store, "dlq.t")))
	assert.Equal(t, "spso=1", e.state(x))
}

// A crash between the copy and the archive: at recovery the record is
// ARCHIVING; the copy is found in the dead-letter topic and not made again.
// A crash before the copy (ARCHIVING durable, no copy) copies once after
// recovery.
func TestDeadLetterCrash(t *testing.T) {
	for _, afterCopy := range []bool{true, false} {
		name := "before copy"
		if afterCopy {
			name = "between copy and archive"
		}
		t.Run(name, func(t *testing.T) {
			store := logstore.NewMem()
			defer store.Close()
			dir := t.TempDir()
			var crashed string
			e := dlqEnv(t, store, dir, func(o *testOpts) {
				o.DeadLetterAfterAppend = func() { crashed = copyDir(t, dir) } // kill -9 right after the append
			})
			e.topic("t", 1)
			e.topic("dlq.t", 1)
			e.produce("dlq.t", 0, 3, 5) // other records before the copies
			x := tp("t", 0)
			e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeadLetterTopic: str("dlq.t")})
			e.produce("t", 0, 4, 5)
			require.Equal(t, []AcquiredRange{rng(0, 3, 1)}, acquired(t, e.open("m", x), x))
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 1, AckAccept), batch(2, 3, AckReject))).Partitions[0].ErrorCode)
			if afterCopy {
				require.NoError(t, e.m.DeadLetterFlush(context.Background()))
				require.NotEmpty(t, crashed)
				e.produce("dlq.t", 0, 2, 5) // records after the copies
			} else {
				crashed = copyDir(t, dir)
			}

			e2 := dlqEnv(t, store, crashed, nil)
			assert.Equal(t, "spso=2 [2-3 ARCHIVING(1)]", e2.state(x))
			resp := e2.open("m", x)
			assert.Empty(t, acquired(t, resp, x), "ARCHIVING records are never redelivered")
			require.NoError(t, e2.m.DeadLetterFlush(context.Background()))
			assert.Equal(t, "spso=4", e2.state(x))
			var copies []int64
			for _, r := range dlqRecords(t, store, "dlq.t") {
				if header(r, DLQHeaderGroup) == testGroup {
					copies = append(copies, sourceOffsets([]logstore.Record{r})[0])
				}
			}
			assert.Equal(t, []int64{2, 3}, copies, "each record copied exactly once")
			d, err := e2.m.DescribeGroup(context.Background(), testGroup)
			require.NoError(t, err)
			want := uint64(2)
			if afterCopy {
				want = 0 // copied by the crashed process
			}
			assert.Equal(t, want, d.DeadLetteredRecords)
		})
	}
}

// failStore fails appends to one topic: before writing, or after writing
// (the caller cannot tell whether the append happened).
type failStore struct {
	logstore.Store
	mu          sync.Mutex
	topic       string
	failBefore  int
	failAfter   int
	appendCalls int
}

var errInjected = errors.New("injected I/O error")

func (f *failStore) Append(ctx context.Context, topic string, part int32, recs []logstore.Record) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if topic != f.topic {
		return f.Store.Append(ctx, topic, part, recs)
	}
	f.appendCalls++
	if f.failBefore > 0 {
		f.failBefore--
		return 0, errInjected
	}
	base, err := f.Store.Append(ctx, topic, part, recs)
	if err == nil && f.failAfter > 0 {
		f.failAfter--
		return 0, errInjected
	}
	return base, err
}

// A failing dead-letter append keeps the records ARCHIVING (nothing lost,
// SPSO stays) and is retried; an append that failed after writing is
// found by the retry and not made twice.
func TestDeadLetterAppendFails(t *testing.T) {
	mem := logstore.NewMem()
	defer mem.Close()
	fs := &failStore{Store: mem, topic: "dlq.t", failBefore: 1, failAfter: 1}
	e := dlqEnv(t, fs, t.TempDir(), nil)
	e.topic("t", 1)
	e.topic("dlq.t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeadLetterTopic: str("dlq.t")})
	e.produce("t", 0, 3, 5)
	require.Equal(t, []AcquiredRange{rng(0, 2, 1)}, acquired(t, e.open("m", x), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 2, AckReject))).Partitions[0].ErrorCode)

	err := e.m.DeadLetterFlush(context.Background())
	require.ErrorIs(t, err, errInjected)
	assert.Equal(t, "spso=0 [0-2 ARCHIVING(1)]", e.state(x))
	assert.Empty(t, dlqRecords(t, mem, "dlq.t"))

	err = e.m.DeadLetterFlush(context.Background()) // written, but reported failed
	require.ErrorIs(t, err, errInjected)
	assert.Equal(t, "spso=0 [0-2 ARCHIVING(1)]", e.state(x))
	assert.Len(t, dlqRecords(t, mem, "dlq.t"), 3)

	require.NoError(t, e.m.DeadLetterFlush(context.Background()))
	assert.Equal(t, "spso=3", e.state(x))
	assert.Equal(t, []int64{0, 1, 2}, sourceOffsets(dlqRecords(t, mem, "dlq.t")), "copied exactly once")
	assert.Equal(t, 2, fs.appendCalls, "the third pass found the copies and appended nothing")
}

// A missing dead-letter topic: without auto-creation the records are
// archived without a copy (as Kafka), counted; with it the topic is created
// (one partition) at the first copy.
func TestDeadLetterMissingTopic(t *testing.T) {
	for _, auto := range []bool{false, true} {
		t.Run("auto="+strconv.FormatBool(auto), func(t *testing.T) {
			store := logstore.NewMem()
			defer store.Close()
			e := dlqEnv(t, store, t.TempDir(), func(o *testOpts) { o.DLQAutoCreateTopics = auto })
			e.topic("t", 1)
			x := tp("t", 0)
			e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeadLetterTopic: str("dlq.t")})
			e.produce("t", 0, 2, 5)
			require.Equal(t, []AcquiredRange{rng(0, 1, 1)}, acquired(t, e.open("m", x), x))
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 1, AckReject))).Partitions[0].ErrorCode)
			require.NoError(t, e.m.DeadLetterFlush(context.Background()))
			assert.Equal(t, "spso=2", e.state(x))
			d, err := e.m.DescribeGroup(context.Background(), testGroup)
			require.NoError(t, err)
			_, _, terr := store.Topic(context.Background(), "dlq.t")
			if auto {
				require.NoError(t, terr)
				assert.Equal(t, []int64{0, 1}, sourceOffsets(dlqRecords(t, store, "dlq.t")))
				assert.Equal(t, uint64(2), d.DeadLetteredRecords)
			} else {
				require.ErrorIs(t, terr, logstore.ErrUnknownTopic)
				assert.Equal(t, uint64(0), d.DeadLetteredRecords)
				assert.Equal(t, uint64(2), d.DeadLetterSkippedRecords)
			}
		})
	}
}

// The dead-letter topic may be a topic the group consumes (as Kafka): the
// copy is a new record there, delivered like any other.
func TestDeadLetterSameTopic(t *testing.T) {
	store := logstore.NewMem()
	defer store.Close()
	e := dlqEnv(t, store, t.TempDir(), nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeadLetterTopic: str("t")})
	e.produce("t", 0, 1, 5)
	require.Equal(t, []AcquiredRange{rng(0, 0, 1)}, acquired(t, e.open("m", x), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckReject))).Partitions[0].ErrorCode)
	require.NoError(t, e.m.DeadLetterFlush(context.Background()))
	assert.Equal(t, "spso=1", e.state(x))
	require.Equal(t, []AcquiredRange{rng(1, 1, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	recs := dlqRecords(t, store, "t")
	require.Len(t, recs, 2)
	assert.Equal(t, "0", header(recs[1], DLQHeaderSourceOffset))
}

// dead_letter_topic is validated: a topic name, not internal ("__"), and
// with auto-creation it must start with the prefix. "" clears it.
func TestDeadLetterConfig(t *testing.T) {
	e := newEnv(t, func(o *testOpts) { o.DLQAutoCreateTopics = true })
	for _, bad := range []string{"__x", "a b", "orders.dead", string(make([]byte, 250))} {
		_, err := e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{DeadLetterTopic: str(bad)})
		if re := reqErr(err); assert.NotNil(t, re, "%q", bad) {
			assert.Equal(t, apierr.InvalidRequest, re.Reason)
			assert.Contains(t, re.Message, "dead_letter_topic")
		}
	}
	cfg, err := e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{DeadLetterTopic: str("dlq.orders")})
	require.NoError(t, err)
	assert.Equal(t, "dlq.orders", *cfg.DeadLetterTopic)
	cfg, err = e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{DeadLetterTopic: str("")})
	require.NoError(t, err)
	assert.Equal(t, "", *cfg.DeadLetterTopic)

	// Without auto-creation any valid name goes.
	e2 := newEnv(t, nil)
	cfg, err = e2.m.UpdateConfig(context.Background(), testGroup, GroupConfig{DeadLetterTopic: str("orders.dead")})
	require.NoError(t, err)
	assert.Equal(t, "orders.dead", *cfg.DeadLetterTopic)

	// The prefix option is checked at Open.
	_, err = Open(logstore.NewMem(), sharestate.NewMem(), Options{DLQTopicPrefix: "a b"})
	require.Error(t, err)
}

// The dead-letter topic is persisted with the group's config.
func TestDeadLetterConfigPersisted(t *testing.T) {
	store := logstore.NewMem()
	defer store.Close()
	dir := t.TempDir()
	e := newEnvOn(t, store, dir, nil)
	e.update(GroupConfig{DeadLetterTopic: str("dlq.x")})
	require.NoError(t, e.m.Close())
	e2 := newEnvOn(t, store, dir, nil)
	cfg, err := e2.m.GetConfig(context.Background(), testGroup)
	require.NoError(t, err)
	assert.Equal(t, "dlq.x", *cfg.DeadLetterTopic)
}

// The background worker makes the copy without any flush.
func TestDeadLetterWorker(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	e.topic("dlq.t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeadLetterTopic: str("dlq.t")})
	e.produce("t", 0, 1, 5)
	require.Equal(t, []AcquiredRange{rng(0, 0, 1)}, acquired(t, e.open("m", x), x))
	ch, err := e.store.Watch("dlq.t", 0)
	require.NoError(t, err)
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckReject))).Partitions[0].ErrorCode)
	<-ch // the copy was appended
	require.NoError(t, e.m.DeadLetterFlush(context.Background()))
	assert.Equal(t, "spso=1", e.state(x))
	assert.Equal(t, []int64{0}, sourceOffsets(dlqRecords(t, e.store, "dlq.t")))
}
