package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
)

func TestCreatePartitions(t *testing.T) {
	ctx := context.Background()
	l, store := newLog(t, Config{SegmentBytes: 1 << 20})
	_, err := l.CreateTopic(ctx, "t", 2, TopicSettings{})
	require.NoError(t, err)
	ch, err := store.Watch("t", 0)
	require.NoError(t, err)

	for name, tc := range map[string]struct {
		count int32
		want  TopicFault
	}{
		"the same count": {2, FaultPartitions},
		"fewer":          {1, FaultPartitions},
		"none":           {0, FaultPartitions},
		"too many":       {MaxPartitions + 1, FaultPartitions},
	} {
		_, err := l.CreatePartitions(ctx, "t", tc.count, false)
		assert.Equal(t, tc.want, fault(t, err), name)
		_, err = l.CreatePartitions(ctx, "t", tc.count, true)
		assert.Equal(t, tc.want, fault(t, err), "validate_only refuses alike: %s", name)
	}
	_, err = l.CreatePartitions(ctx, "nope", 3, false)
	assert.Equal(t, apierr.UnknownTopicOrPartition, ErrorOf(err).Reason)
	assert.Equal(t, FaultName, fault(t, func() error { _, err := l.CreatePartitions(ctx, "", 3, false); return err }()))

	info, err := l.CreatePartitions(ctx, "t", 5, true)
	require.NoError(t, err)
	assert.Equal(t, int32(5), info.Partitions, "validate_only answers the topic as it would be")
	cur, err := l.TopicInfo(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int32(2), cur.Partitions, "and changes nothing")

	info, err = l.CreatePartitions(ctx, "t", 5, false)
	require.NoError(t, err)
	assert.Equal(t, int32(5), info.Partitions)
	assert.Equal(t, cur.ID, info.ID)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the watchers of the topic were not woken")
	}
	p := int32(4)
	res, err := l.Produce(ctx, "t", &p, []Record{{Value: []byte("on the new partition")}})
	require.NoError(t, err)
	assert.Equal(t, []int64{0}, res.Offsets)
	// Keyed records spread over the new count, as Kafka's partitioner.
	key := []byte("some key")
	res, err = l.Produce(ctx, "t", nil, []Record{{Key: key, Value: []byte("v")}})
	require.NoError(t, err)
	assert.Equal(t, Partition(key, 5), res.Partitions[0])
}

func TestCreatePartitionsUnderTheCap(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{PartitionLimit: 6})
	_, err := l.CreateTopic(ctx, "t", 2, TopicSettings{})
	require.NoError(t, err)
	_, err = l.CreatePartitions(ctx, "t", 7, true)
	assert.Equal(t, apierr.PolicyViolation, reason(t, err))
	_, err = l.CreatePartitions(ctx, "t", 7, false)
	assert.Equal(t, apierr.PolicyViolation, reason(t, err))
	assert.Contains(t, err.Error(), "--max-partitions")
	info, err := l.CreatePartitions(ctx, "t", 6, false)
	require.NoError(t, err)
	assert.Equal(t, int32(6), info.Partitions)
	_, err = l.CreateTopic(ctx, "u", 1, TopicSettings{})
	assert.Equal(t, apierr.PolicyViolation, reason(t, err), "the added partitions count")
}

func TestCreatePartitionsAtTheController(t *testing.T) {
	ctx := context.Background()
	here, b, p, _, _ := controlled(t, fakeController{peer: "B"})
	_, err := here.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	info, err := here.CreatePartitions(ctx, "t", 3, false)
	require.NoError(t, err)
	assert.Equal(t, int32(3), info.Partitions)
	got, err := b.TopicInfo(ctx, "t")
	require.NoError(t, err)
	assert.Equal(t, int32(3), got.Partitions, "the controller added them")
	assert.Contains(t, p.calls, "B CreatePartitions")
	_, err = here.CreatePartitions(ctx, "t", 2, false)
	assert.Equal(t, FaultPartitions, fault(t, err), "the controller's refusal, as it gave it")
}

func TestAlterTopicConfigs(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{SegmentBytes: 1 << 20, Now: func() time.Time { return time.UnixMilli(777) }})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	values := func() map[string]ConfigEntry {
		info, err := l.TopicInfo(ctx, "t")
		require.NoError(t, err)
		out := map[string]ConfigEntry{}
		for _, e := range l.ConfigEntries(info.Config) {
			out[e.Name] = e
		}
		return out
	}

	info, err := l.AlterTopicConfigs(ctx, "t", []ConfigChange{
		{Name: ConfigMaxMessageBytes, Op: ConfigSet, Value: "100"},
		{Name: ConfigMessageTimestampType, Op: ConfigSet, Value: TimestampLogAppendTime},
		{Name: ConfigRetentionMs, Op: ConfigSet, Value: "-1"},
	}, false)
	require.NoError(t, err)
	assert.Equal(t, []string{ConfigMaxMessageBytes, ConfigMessageTimestampType, ConfigRetentionMs}, info.Config.Overrides)
	v := values()
	assert.Equal(t, "100", v[ConfigMaxMessageBytes].Value)
	assert.False(t, v[ConfigMaxMessageBytes].Default)
	assert.False(t, v[ConfigRetentionMs].Default, "set explicitly, to the default value")
	assert.True(t, v[ConfigSegmentBytes].Default)

	// max.message.bytes: a record over it fails the call, nothing appended.
	_, err = l.Produce(ctx, "t", nil, []Record{{Value: make([]byte, 100)}, {Value: make([]byte, 101)}})
	assert.Equal(t, apierr.MessageTooLarge, reason(t, err))
	assert.Contains(t, err.Error(), "records[1]")
	_, hw, err := l.store.Bounds("t", 0)
	require.NoError(t, err)
	assert.Zero(t, hw)
	// LogAppendTime: the server's time replaces the producer's.
	res, err := l.Produce(ctx, "t", nil, []Record{{Value: make([]byte, 100), Timestamp: 5}})
	require.NoError(t, err)
	recs, err := l.store.Read(ctx, "t", 0, res.Offsets[0], 1, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, int64(777), recs[0].Timestamp)
	assert.NoError(t, CheckBatchSize("t", info.Config, 100))
	assert.Equal(t, apierr.MessageTooLarge, reason(t, CheckBatchSize("t", info.Config, 101)))

	// DELETE: back to the default, no longer an override.
	info, err = l.AlterTopicConfigs(ctx, "t", []ConfigChange{{Name: ConfigMaxMessageBytes, Op: ConfigDelete}}, false)
	require.NoError(t, err)
	assert.Equal(t, []string{ConfigMessageTimestampType, ConfigRetentionMs}, info.Config.Overrides)
	assert.Zero(t, info.Config.MaxMessageBytes, "stored unset: it follows the default")
	assert.True(t, values()[ConfigMaxMessageBytes].Default)
	_, err = l.Produce(ctx, "t", nil, []Record{{Value: make([]byte, 101)}})
	assert.NoError(t, err)

	// APPEND and SUBTRACT on the list.
	_, err = l.AlterTopicConfigs(ctx, "t", []ConfigChange{{Name: ConfigCleanupPolicy, Op: ConfigAppend, Value: "compact"}}, false)
	require.NoError(t, err)
	assert.Equal(t, CleanupCompactDelete, values()[ConfigCleanupPolicy].Value)
	_, err = l.AlterTopicConfigs(ctx, "t", []ConfigChange{{Name: ConfigCleanupPolicy, Op: ConfigSubtract, Value: "delete"}}, false)
	require.NoError(t, err)
	assert.Equal(t, CleanupCompact, values()[ConfigCleanupPolicy].Value)
	assert.Equal(t, "86400000", values()[ConfigDeleteRetentionMs].Value)

	// Refusals change nothing, validate_only neither.
	before := values()
	for name, changes := range map[string][]ConfigChange{
		"unknown name":       {{Name: ConfigRetentionMs, Value: "1"}, {Name: "flush.ms", Value: "1"}},
		"named twice":        {{Name: ConfigRetentionMs, Value: "1"}, {Name: ConfigRetentionMs, Value: "2"}},
		"bad value":          {{Name: ConfigRetentionMs, Value: "1"}, {Name: ConfigSegmentMs, Value: "soon"}},
		"append to no list":  {{Name: ConfigRetentionMs, Op: ConfigAppend, Value: "1"}},
		"empty list":         {{Name: ConfigCleanupPolicy, Op: ConfigSubtract, Value: "compact"}},
		"unknown op":         {{Name: ConfigRetentionMs, Op: 9, Value: "1"}},
		"segment too small":  {{Name: ConfigSegmentBytes, Value: "10"}},
		"retention below -1": {{Name: ConfigRetentionMs, Value: "-2"}},
	} {
		_, err := l.AlterTopicConfigs(ctx, "t", changes, false)
		assert.Equal(t, FaultConfig, fault(t, err), name)
		assert.Equal(t, before, values(), "nothing changed: %s", name)
	}
	_, err = l.AlterTopicConfigs(ctx, "t", []ConfigChange{{Name: ConfigRetentionMs, Value: "5000"}}, true)
	require.NoError(t, err)
	assert.Equal(t, before, values(), "validate_only")
	_, err = l.AlterTopicConfigs(ctx, "nope", []ConfigChange{{Name: ConfigRetentionMs, Value: "5000"}}, false)
	assert.Equal(t, apierr.UnknownTopicOrPartition, ErrorOf(err).Reason)

	// AlterConfigs: the configs named are the overrides, the rest default.
	info, err = l.ReplaceTopicConfigs(ctx, "t", []ConfigEntry{{Name: ConfigRetentionMs, Value: "60000"}}, false)
	require.NoError(t, err)
	assert.Equal(t, []string{ConfigRetentionMs}, info.Config.Overrides)
	v = values()
	assert.Equal(t, "60000", v[ConfigRetentionMs].Value)
	assert.Equal(t, "delete", v[ConfigCleanupPolicy].Value, "reset to the default")
	assert.Equal(t, "CreateTime", v[ConfigMessageTimestampType].Value, "reset to the default")
	for name, e := range v {
		assert.Equal(t, name != ConfigRetentionMs, e.Default, name)
	}
	_, err = l.ReplaceTopicConfigs(ctx, "t", []ConfigEntry{{Name: "flush.ms", Value: "1"}}, false)
	assert.Equal(t, FaultConfig, fault(t, err))
}

// DELETE of segment.bytes takes the server's --segment-bytes as it is now.
func TestAlterTopicConfigsSegmentBytesDefault(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{SegmentBytes: 1 << 20})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{SegmentBytes: new(int64(4096))})
	require.NoError(t, err)
	info, err := l.AlterTopicConfigs(ctx, "t", []ConfigChange{{Name: ConfigSegmentBytes, Op: ConfigDelete}}, false)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), info.Config.SegmentBytes)
	assert.Empty(t, info.Config.Overrides)
}
