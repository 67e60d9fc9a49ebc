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

	for name, value := range map[string]string{
		ConfigMaxMessageBytes: "10485760", ConfigRetentionBytes: "-1", ConfigSegmentMs: "3600000",
		ConfigCompressionType: "zstd", ConfigMessageTimestampType: "LogAppendTime", ConfigMinInsyncReplicas: "2",
	} {
		require.NoError(t, s.SetConfig(name, value), name)
	}
	assert.EqualValues(t, 10485760, *s.MaxMessageBytes)
	assert.EqualValues(t, -1, *s.RetentionBytes)
	assert.EqualValues(t, 3600000, *s.SegmentMs)
	assert.Equal(t, "zstd", *s.CompressionType)
	assert.Equal(t, TimestampLogAppendTime, *s.MessageTimestampType)
	assert.EqualValues(t, 2, *s.MinInsyncReplicas)

	for _, bad := range []struct{ name, value, why string }{
		{"flush.ms", "1", "unknown name"},
		{"kfake.is_internal", "true", "unknown name"},
		{ConfigSegmentBytes, "big", "not an integer"},
		{ConfigMinCleanableDirtyRatio, "half", "not a number"},
		{ConfigMinCleanableDirtyRatio, "0", "0 is not in (0, 1]"},
		{ConfigMaxMessageBytes, "0", "at least 1"},
		{ConfigMaxMessageBytes, "2147483648", "above Kafka's int"},
		{ConfigRetentionBytes, "0", "0 would read as unset"},
		{ConfigRetentionBytes, "-2", "below -1"},
		{ConfigDeleteRetentionMs, "0", "0 would read as the default"},
		{ConfigSegmentMs, "0", "at least 1"},
		{ConfigMinInsyncReplicas, "0", "at least 1"},
		{ConfigCompressionType, "brotli", "no such codec"},
		{ConfigMessageTimestampType, "logappendtime", "case matters, as in Kafka"},
		{ConfigCleanupPolicy, "delete,shred", "unknown policy"},
	} {
		err := s.SetConfig(bad.name, bad.value)
		assert.Equal(t, FaultConfig, fault(t, err), "%s=%s: %s", bad.name, bad.value, bad.why)
		assert.Contains(t, err.Error(), bad.name, "the message names the config")
	}
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
	l, _ := newLog(t, Config{SegmentBytes: 4096})
	got := l.ConfigEntries(TopicConfig{SegmentBytes: 4096, RetentionMs: -1, CleanupPolicy: CleanupDelete})
	type entry struct {
		name, value string
		def         bool
	}
	var short []entry
	for _, e := range got {
		short = append(short, entry{e.Name, e.Value, e.Default})
		assert.NotEmpty(t, e.Doc, e.Name)
		assert.NotZero(t, e.Kind, e.Name)
	}
	assert.Equal(t, []entry{
		{ConfigCleanupPolicy, "delete", true},
		{ConfigCompressionType, "producer", true},
		{ConfigDeleteRetentionMs, "86400000", true},
		{ConfigMaxMessageBytes, "67108864", true},
		{ConfigMessageTimestampType, "CreateTime", true},
		{ConfigMinCleanableDirtyRatio, "0.5", true},
		{ConfigMinInsyncReplicas, "1", true},
		{ConfigRetentionBytes, "-1", true},
		{ConfigRetentionMs, "-1", true},
		{ConfigSegmentBytes, "4096", true},
		{ConfigSegmentMs, "604800000", true},
	}, short, "sorted by name; every config, unset ones with their defaults")

	// Set explicitly (an override), even to the default value; or, for a
	// topic that recorded no overrides, a value that is not the default.
	got = l.ConfigEntries(TopicConfig{SegmentBytes: 8192, RetentionMs: -1, CleanupPolicy: CleanupCompact,
		MinCleanableDirtyRatio: 1, RetentionBytes: 1 << 20, Overrides: []string{ConfigRetentionMs}})
	short = nil
	for _, e := range got {
		if !e.Default {
			short = append(short, entry{e.Name, e.Value, e.Default})
		}
	}
	assert.Equal(t, []entry{
		{ConfigCleanupPolicy, "compact", false},
		{ConfigMinCleanableDirtyRatio, "1.0", false},
		{ConfigRetentionBytes, "1048576", false},
		{ConfigRetentionMs, "-1", false},
		{ConfigSegmentBytes, "8192", false},
	}, short)
	assert.Equal(t, "1.0E-4", javaDouble(0.0001), "Java's Double.toString, as Kafka formats doubles")
	assert.Equal(t, "0.25", javaDouble(0.25))
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
