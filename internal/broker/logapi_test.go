package broker

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

func newLog(t *testing.T, cfg Config) (*Log, *logstore.MemStore) {
	t.Helper()
	store := logstore.NewMem()
	t.Cleanup(func() { _ = store.Close() })
	return New(store, cfg), store
}

func reason(t *testing.T, err error) apierr.Reason {
	t.Helper()
	require.Error(t, err)
	return apierr.ReasonOf(err)
}

func TestProduceRoutes(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{Now: func() time.Time { return time.UnixMilli(1234) }})
	_, err := l.CreateTopic(ctx, "t", 4, TopicSettings{})
	require.NoError(t, err)

	keyed := []logstore.Record{{Key: []byte("a")}, {Key: []byte("b")}, {Key: []byte("a"), Timestamp: 7}}
	res, err := l.Produce(ctx, "t", nil, keyed)
	require.NoError(t, err)
	assert.Equal(t, []int32{Partition([]byte("a"), 4), Partition([]byte("b"), 4), Partition([]byte("a"), 4)}, res.Partitions,
		"keyed records go where Kafka's default partitioner sends them")
	assert.EqualValues(t, 1234, res.LogAppendTime)
	recs, err := l.Fetch(ctx, FetchRequest{Topic: "t", Partition: res.Partitions[2], Offset: res.Offsets[2]})
	require.NoError(t, err)
	require.Len(t, recs.Records, 1)
	assert.EqualValues(t, 7, recs.Records[0].Timestamp, "a set timestamp is kept")
	recs, err = l.Fetch(ctx, FetchRequest{Topic: "t", Partition: res.Partitions[0], Offset: res.Offsets[0]})
	require.NoError(t, err)
	assert.EqualValues(t, 1234, recs.Records[0].Timestamp, "timestamp 0 is the log append time")

	keyless := make([]logstore.Record, 8)
	res, err = l.Produce(ctx, "t", nil, keyless)
	require.NoError(t, err)
	assert.Equal(t, []int32{0, 1, 2, 3, 0, 1, 2, 3}, res.Partitions, "keyless records go round-robin")

	p := int32(2)
	res, err = l.Produce(ctx, "t", &p, keyless[:3])
	require.NoError(t, err)
	assert.Equal(t, []int32{2, 2, 2}, res.Partitions)
	assert.Equal(t, []int64{res.Offsets[0], res.Offsets[0] + 1, res.Offsets[0] + 2}, res.Offsets, "contiguous in one partition")
}

func TestProduceRefuses(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{})
	_, err := l.CreateTopic(ctx, "t", 2, TopicSettings{})
	require.NoError(t, err)
	one := []logstore.Record{{Value: []byte("v")}}
	bad := int32(2)
	for name, tc := range map[string]struct {
		topic string
		part  *int32
		recs  []logstore.Record
		want  apierr.Reason
	}{
		"no topic":           {"", nil, one, apierr.InvalidRequest},
		"no records":         {"t", nil, nil, apierr.InvalidRequest},
		"too many records":   {"t", nil, make([]logstore.Record, MaxProduceRecords+1), apierr.InvalidRequest},
		"negative timestamp": {"t", nil, []logstore.Record{{Timestamp: -1}}, apierr.InvalidRequest},
		"unknown partition":  {"t", &bad, one, apierr.UnknownTopicOrPartition},
	} {
		_, err := l.Produce(ctx, tc.topic, tc.part, tc.recs)
		assert.Equal(t, tc.want, reason(t, err), name)
	}
	_, err = l.Produce(ctx, "missing", nil, one)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
}

func TestFetchLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		polls := NewLongPolls(1, 1)
		l, _ := newLog(t, Config{LongPolls: polls})
		_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
		require.NoError(t, err)

		got := make(chan Fetched, 1)
		go func() {
			res, err := l.Fetch(ctx, FetchRequest{Topic: "t", Offset: 0, MaxWait: 30 * time.Second})
			assert.NoError(t, err)
			got <- res
		}()
		synctest.Wait()
		assert.EqualValues(t, 1, polls.Waiting(), "the fetch waits and holds the slot")
		start := time.Now()
		p := int32(0)
		_, err = l.Produce(ctx, "t", &p, []logstore.Record{{Value: []byte("late")}})
		require.NoError(t, err)
		res := <-got
		require.Len(t, res.Records, 1, "an append wakes the waiting fetch")
		assert.Equal(t, []byte("late"), res.Records[0].Value)
		assert.Zero(t, time.Since(start), "woken at once")
		assert.Zero(t, polls.Waiting(), "the slot is released")

		start = time.Now()
		res, err = l.Fetch(ctx, FetchRequest{Topic: "t", Offset: 1, MaxWait: 100 * time.Millisecond})
		require.NoError(t, err)
		assert.Empty(t, res.Records)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "it waited MaxWait, then answered empty")

		// Every slot taken: the next fetch answers at once.
		require.True(t, polls.TryAcquire(ctx))
		start = time.Now()
		res, err = l.Fetch(ctx, FetchRequest{Topic: "t", Offset: 1, MaxWait: time.Second})
		require.NoError(t, err)
		assert.Empty(t, res.Records)
		assert.Zero(t, time.Since(start), "no slot: no wait")
		polls.Release(ctx)

		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := l.Fetch(cctx, FetchRequest{Topic: "t", Offset: 1, MaxWait: time.Minute})
			errc <- err
		}()
		synctest.Wait()
		cancel()
		assert.ErrorIs(t, <-errc, context.Canceled, "cancellation passes through")
	})
}

func TestFetchErrors(t *testing.T) {
	ctx := context.Background()
	l, store := newLog(t, Config{})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	p := int32(0)
	_, err = l.Produce(ctx, "t", &p, make([]logstore.Record, 5))
	require.NoError(t, err)
	_, err = store.DeleteRecordsBefore(ctx, "t", 0, 2)
	require.NoError(t, err)

	_, err = l.Fetch(ctx, FetchRequest{Topic: "t", Partition: 0, Offset: 1})
	var e *apierr.Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, apierr.OffsetOutOfRange, e.Reason)
	assert.Equal(t, map[string]string{"log_start_offset": "2", "high_watermark": "5"}, e.Metadata)

	_, err = l.Fetch(ctx, FetchRequest{Topic: "t", Partition: 3})
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(t, err))
	assert.EqualError(t, err, `topic "t" has no partition 3`)
	for _, req := range []FetchRequest{
		{}, {Topic: "t", Partition: -1}, {Topic: "t", MaxRecords: MaxFetchRecords + 1},
		{Topic: "t", MaxBytes: -1}, {Topic: "t", MaxWait: MaxWait + time.Millisecond},
	} {
		_, err := l.Fetch(ctx, req)
		assert.Equal(t, apierr.InvalidRequest, reason(t, err), "%+v", req)
	}
}

func TestListOffsets(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	p := int32(0)
	_, err = l.Produce(ctx, "t", &p, []logstore.Record{{Timestamp: 10}, {Timestamp: 20}})
	require.NoError(t, err)
	off, ts, err := l.ListOffsets(ctx, "t", 0, Earliest, 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{0, -1}, [2]int64{off, ts})
	off, _, err = l.ListOffsets(ctx, "t", 0, Latest, 0)
	require.NoError(t, err)
	assert.EqualValues(t, 2, off)
	off, ts, err = l.ListOffsets(ctx, "t", 0, ByTimestamp, 15)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{1, 20}, [2]int64{off, ts})
	_, _, err = l.ListOffsets(ctx, "t", 0, ByTimestamp, -1)
	assert.Equal(t, apierr.InvalidRequest, reason(t, err))
	_, _, err = l.ListOffsets(ctx, "t", 1, Latest, 0)
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(t, err))
}

func TestTopicEvents(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{SegmentBytes: 4096})
	var events []TopicEvent
	l.Subscribe(func(ev TopicEvent) { events = append(events, ev) })

	created, err := l.CreateTopic(ctx, "t", 2, TopicSettings{})
	require.NoError(t, err)
	assert.EqualValues(t, 4096, created.Info.Config.SegmentBytes, "the server default")
	assert.Len(t, created.Partitions, 2)
	_, err = l.CreateTopic(ctx, "t", 2, TopicSettings{})
	assert.ErrorIs(t, err, logstore.ErrTopicExists)
	require.NoError(t, l.DeleteTopic(ctx, "t"))
	assert.ErrorIs(t, l.DeleteTopic(ctx, "t"), logstore.ErrUnknownTopic)

	require.Len(t, events, 2, "one event per change, none for the failed calls")
	assert.Equal(t, TopicEvent{Kind: TopicCreated, Topic: created.Info}, events[0])
	assert.Equal(t, TopicEvent{Kind: TopicDeleted, Topic: created.Info}, events[1], "the deleted incarnation's id")

	_, err = l.CreateTopic(ctx, "u", 0, TopicSettings{})
	assert.Equal(t, apierr.InvalidRequest, reason(t, err))
	_, err = l.CreateTopic(ctx, "", 1, TopicSettings{})
	assert.Equal(t, apierr.InvalidRequest, reason(t, err))
}

func TestPurge(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{})
	_, err := l.CreateTopic(ctx, "t", 2, TopicSettings{})
	require.NoError(t, err)
	compact := logstore.CleanupCompact
	_, err = l.CreateTopic(ctx, "c", 1, TopicSettings{CleanupPolicy: &compact})
	require.NoError(t, err)
	p := int32(0)
	_, err = l.Produce(ctx, "t", &p, make([]logstore.Record, 5))
	require.NoError(t, err)

	res, err := l.Purge(ctx, []PurgeTopic{
		{Topic: "t", Partitions: []PurgePartition{{0, 3}, {1, -1}, {5, 0}}},
		{Topic: "t", Partitions: []PurgePartition{{1, 0}}},
		{Topic: "c", Partitions: []PurgePartition{{0, 0}}},
		{Topic: "missing", Partitions: []PurgePartition{{0, 0}}},
	})
	require.NoError(t, err)
	codes := func(tr PurgeTopicResult) (out []apierr.Reason) {
		for _, p := range tr.Partitions {
			out = append(out, p.Code)
		}
		return out
	}
	assert.Equal(t, []apierr.Reason{apierr.None, apierr.InvalidRequest, apierr.UnknownTopicOrPartition}, codes(res[0]),
		"partition 1 appears twice in the request")
	assert.EqualValues(t, 3, res[0].Partitions[0].LowWatermark)
	assert.EqualValues(t, -1, res[0].Partitions[1].LowWatermark)
	assert.Equal(t, []apierr.Reason{apierr.InvalidRequest}, codes(res[1]))
	assert.Equal(t, []apierr.Reason{apierr.PolicyViolation}, codes(res[2]))
	assert.Equal(t, []apierr.Reason{apierr.UnknownTopicOrPartition}, codes(res[3]))

	res, err = l.Purge(ctx, []PurgeTopic{{Topic: "t", Partitions: []PurgePartition{{0, 2}, {1, -2}}}})
	require.NoError(t, err)
	assert.Equal(t, PurgePartitionResult{Partition: 0, LowWatermark: 3}, res[0].Partitions[0], "at or below the log start: no change")
	assert.Equal(t, apierr.OffsetOutOfRange, res[0].Partitions[1].Code)
	res, err = l.Purge(ctx, []PurgeTopic{{Topic: "t", Partitions: []PurgePartition{{0, -1}, {1, 1}}}})
	require.NoError(t, err)
	assert.EqualValues(t, 5, res[0].Partitions[0].LowWatermark, "-1 is the high watermark")
	assert.Equal(t, apierr.OffsetOutOfRange, res[0].Partitions[1].Code, "above the high watermark")
}
