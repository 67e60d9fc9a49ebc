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
)

func fault(t *testing.T, err error) TopicFault {
	t.Helper()
	te, ok := errors.AsType[*TopicError](err)
	require.True(t, ok, "not a *TopicError: %v", err)
	assert.Equal(t, apierr.InvalidRequest, apierr.ReasonOf(err), "every fault is INVALID_REQUEST")
	return te.Fault
}

func TestTopicSettingsSetConfig(t *testing.T) {
	var s TopicSettings
	for name, value := range map[string]string{
		ConfigRetentionMs: "60000", ConfigSegmentBytes: "4096", ConfigCleanupPolicy: "delete,compact",
		ConfigDeleteRetentionMs: "1000", ConfigMinCleanableDirtyRatio: "0.25",
	} {
		require.NoError(t, s.SetConfig(name, value), name)
	}
	assert.EqualValues(t, 60000, *s.RetentionMs)
	assert.EqualValues(t, 4096, *s.SegmentBytes)
	assert.Equal(t, CleanupCompactDelete, *s.CleanupPolicy, "Kafka's list is unordered")
	assert.EqualValues(t, 1000, *s.DeleteRetentionMs)
	assert.InDelta(t, 0.25, *s.MinCleanableDirtyRatio, 0)

	assert.Equal(t, FaultConfig, fault(t, s.SetConfig("max.message.bytes", "1")), "unknown name")
	assert.Equal(t, FaultConfig, fault(t, s.SetConfig(ConfigSegmentBytes, "big")), "not an integer")
	assert.Equal(t, FaultConfig, fault(t, s.SetConfig(ConfigMinCleanableDirtyRatio, "half")), "not a number")
}

func TestValidateTopic(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{SegmentBytes: 1 << 20})
	i64 := func(v int64) *int64 { return &v }
	str := func(v string) *string { return &v }
	cfg, err := l.ValidateTopic("t", 1, TopicSettings{})
	require.NoError(t, err)
	assert.Equal(t, TopicConfig{SegmentBytes: 1 << 20, RetentionMs: -1, CleanupPolicy: CleanupDelete}, cfg, "the server defaults")

	for name, tc := range map[string]struct {
		name       string
		partitions int32
		s          TopicSettings
		want       TopicFault
	}{
		"empty name":          {"", 1, TopicSettings{}, FaultName},
		"malformed name":      {"a b", 1, TopicSettings{}, FaultName},
		"reserved name":       {"__x", 1, TopicSettings{}, FaultName},
		"0 partitions":        {"t", 0, TopicSettings{}, FaultPartitions},
		"too many partitions": {"t", MaxPartitions + 1, TopicSettings{}, FaultPartitions},
		"partitions first":    {"a b", 0, TopicSettings{}, FaultPartitions},
		"segment too small":   {"t", 1, TopicSettings{SegmentBytes: i64(MinSegmentBytes - 1)}, FaultConfig},
		"segment too large":   {"t", 1, TopicSettings{SegmentBytes: i64(MaxSegmentBytes + 1)}, FaultConfig},
		"retention below -1":  {"t", 1, TopicSettings{RetentionMs: i64(-2)}, FaultConfig},
		"unknown policy":      {"t", 1, TopicSettings{CleanupPolicy: str("shred")}, FaultConfig},
		"negative tombstones": {"t", 1, TopicSettings{CleanupPolicy: str(CleanupCompact), DeleteRetentionMs: i64(-1)}, FaultConfig},
	} {
		_, err := l.ValidateTopic(tc.name, tc.partitions, tc.s)
		assert.Equal(t, tc.want, fault(t, err), name)
		_, err = l.CreateTopic(ctx, tc.name, tc.partitions, tc.s)
		assert.Equal(t, tc.want, fault(t, err), "CreateTopic refuses as ValidateTopic: %s", name)
	}

	require.NoError(t, l.CheckNewTopic(ctx, "t", 1, TopicSettings{}))
	_, err = l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	assert.Equal(t, apierr.TopicAlreadyExists, reason(t, l.CheckNewTopic(ctx, "t", 1, TopicSettings{})))
	assert.Equal(t, FaultPartitions, fault(t, l.CheckNewTopic(ctx, "t", 0, TopicSettings{})), "the checks come first")
}

func TestConfigEntries(t *testing.T) {
	got := ConfigEntries(TopicConfig{SegmentBytes: 4096, RetentionMs: -1, CleanupPolicy: CleanupDelete})
	assert.Equal(t, []ConfigEntry{
		{ConfigCleanupPolicy, "delete"},
		{ConfigDeleteRetentionMs, "86400000"},
		{ConfigMinCleanableDirtyRatio, "0.5"},
		{ConfigRetentionMs, "-1"},
		{ConfigSegmentBytes, "4096"},
	}, got, "sorted by name; unset compaction settings show their defaults")
}

func TestEnsureTopicPublishes(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{SegmentBytes: 1 << 20})
	var created []string
	l.Subscribe(func(ev TopicEvent) {
		if ev.Kind == TopicCreated {
			created = append(created, ev.Topic.Name)
		}
	})
	info, made, err := l.EnsureTopic(ctx, "auto", 3)
	require.NoError(t, err)
	assert.True(t, made)
	assert.EqualValues(t, 3, info.Partitions)
	info2, made, err := l.EnsureTopic(ctx, "auto", 5)
	require.NoError(t, err)
	assert.False(t, made, "an existing topic is returned as it is")
	assert.Equal(t, info, info2)
	assert.Equal(t, []string{"auto"}, created, "auto-creation is a topic event")
	_, _, err = l.EnsureTopic(ctx, "bad name", 1)
	assert.Equal(t, FaultName, fault(t, err))
}

func TestRemoveTopic(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{})
	var deleted []string
	l.Subscribe(func(ev TopicEvent) {
		if ev.Kind == TopicDeleted {
			deleted = append(deleted, ev.Topic.ID)
		}
	})
	top, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	info, err := l.RemoveTopic(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, top.Info, info)
	assert.Equal(t, []string{top.Info.ID}, deleted)
	_, err = l.RemoveTopic(ctx, "t")
	assert.ErrorIs(t, err, ErrUnknownTopic)
}

func TestProduceBatch(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{})
	_, err := l.CreateTopic(ctx, "t", 2, TopicSettings{})
	require.NoError(t, err)
	base, logStart, err := l.ProduceBatch(ctx, "t", 1, []Record{{Timestamp: 0, Value: []byte("a")}, {Timestamp: -1, Value: []byte("b")}})
	require.NoError(t, err)
	assert.EqualValues(t, 0, base)
	assert.EqualValues(t, 0, logStart)
	res, err := l.ReadPartition(ctx, "t", 1, 0, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, res.Records, 2)
	assert.EqualValues(t, 0, res.Records[0].Timestamp, "timestamps are kept as the batch has them")
	base, _, err = l.ProduceBatch(ctx, "t", 1, []Record{{Value: []byte("c")}})
	require.NoError(t, err)
	assert.EqualValues(t, 2, base)

	_, _, err = l.ProduceBatch(ctx, "t", 2, []Record{{}})
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(t, err))
	_, _, err = l.ProduceBatch(ctx, "nope", 0, []Record{{}})
	assert.ErrorIs(t, err, ErrUnknownTopic)
}

func TestReadPartitionBounds(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	_, _, err = l.ProduceBatch(ctx, "t", 0, []Record{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}})
	require.NoError(t, err)
	res, err := l.Purge(ctx, []PurgeTopic{{Topic: "t", Partitions: []PurgePartition{{Partition: 0, Offset: 1}}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res[0].Partitions[0].LowWatermark)

	for name, off := range map[string]int64{"below log start": 0, "above HW": 4} {
		got, err := l.ReadPartition(ctx, "t", 0, off, 10, 1<<20)
		assert.Equal(t, apierr.OffsetOutOfRange, reason(t, err), name)
		assert.Equal(t, Fetched{LogStartOffset: 1, HighWatermark: 3}, got, "%s: the bounds come with the error", name)
	}
	got, err := l.ReadPartition(ctx, "t", 0, 3, 10, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, Fetched{LogStartOffset: 1, HighWatermark: 3}, got, "at HW: empty")
	got, err = l.ReadPartition(ctx, "t", 0, 1, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, Fetched{LogStartOffset: 1, HighWatermark: 3}, got, "no budget: the bounds only")
	got, err = l.ReadPartition(ctx, "t", 0, 1, 10, 1<<20)
	require.NoError(t, err)
	assert.Len(t, got.Records, 2)
	got, err = l.ReadPartition(ctx, "t", 5, 0, 10, 1<<20)
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(t, err))
	assert.Equal(t, Fetched{LogStartOffset: -1, HighWatermark: -1}, got, "no bounds known")
}

// A multi-partition long-poll (Kafka's Fetch) wakes on an append to any of
// its partitions, holding one slot.
func TestLongPollManyPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		polls := NewLongPolls(1, 1)
		l, _ := newLog(t, Config{LongPolls: polls})
		_, err := l.CreateTopic(ctx, "a", 2, TopicSettings{})
		require.NoError(t, err)
		_, err = l.CreateTopic(ctx, "b", 1, TopicSettings{})
		require.NoError(t, err)
		parts := []TopicPartition{{"a", 0}, {"a", 1}, {"b", 0}, {"nope", 0}}
		tries := 0
		has := func() bool {
			tries++
			r, err := l.ReadPartition(ctx, "a", 1, 0, 10, 1<<20)
			require.NoError(t, err)
			return len(r.Records) > 0
		}
		done := make(chan error, 1)
		go func() { done <- l.LongPoll(ctx, parts, time.Minute, has) }()
		synctest.Wait()
		assert.EqualValues(t, 1, polls.Waiting(), "one slot for all the partitions")
		assert.EqualValues(t, 1, l.Polling())
		_, _, err = l.ProduceBatch(ctx, "b", 0, []Record{{Value: []byte("x")}})
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, 2, tries, "an append elsewhere wakes the poll, which looks again")
		_, _, err = l.ProduceBatch(ctx, "a", 1, []Record{{Value: []byte("y")}})
		require.NoError(t, err)
		require.NoError(t, <-done)
		assert.Equal(t, 3, tries)
		assert.Zero(t, polls.Waiting())
		assert.Zero(t, l.Polling())

		start := time.Now()
		tries = 0
		require.NoError(t, l.LongPoll(ctx, parts, 50*time.Millisecond, func() bool { tries++; return false }))
		assert.Equal(t, 50*time.Millisecond, time.Since(start))
		assert.Equal(t, 2, tries, "one last look when the wait is over")

		require.True(t, polls.TryAcquire(ctx))
		tries = 0
		require.NoError(t, l.LongPoll(ctx, parts, time.Minute, func() bool { tries++; return false }))
		assert.Equal(t, 1, tries, "no slot: the first answer stands")
		polls.Release(ctx)
	})
}

func TestListOffsetsMaxTimestamp(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{})
	_, err := l.CreateTopic(ctx, "t", 2, TopicSettings{})
	require.NoError(t, err)
	_, _, err = l.ProduceBatch(ctx, "t", 0, []Record{{Timestamp: 10}, {Timestamp: 30}, {Timestamp: 20}, {Timestamp: 30}})
	require.NoError(t, err)
	off, ts, err := l.ListOffsets(ctx, "t", 0, MaxTimestamp, 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{1, 30}, [2]int64{off, ts}, "the first record with the largest timestamp")
	off, ts, err = l.ListOffsets(ctx, "t", 1, MaxTimestamp, 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{-1, -1}, [2]int64{off, ts}, "an empty partition")
	_, _, err = l.ListOffsets(ctx, "nope", 0, MaxTimestamp, 0)
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(t, err))
}
