package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// PurgeTopic asks to move the log start offset of some partitions of one
// topic; an Offset of -1 means the high watermark.
type PurgeTopic struct {
	Topic      string
	Partitions []PurgePartition
}

// PurgePartition is one partition of a PurgeTopic.
type PurgePartition struct {
	Partition int32
	Offset    int64
}

// PurgeTopicResult is one topic's outcomes, in request order.
type PurgeTopicResult struct {
	Topic      string
	Partitions []PurgePartitionResult
}

// PurgePartitionResult is one partition's outcome: its log start offset
// after the call (Code apierr.None), or -1 with a reason and a message. The
// transports answer Code.KafkaCode() (the proto's ErrorCode is the same
// number).
type PurgePartitionResult struct {
	Partition    int32
	LowWatermark int64
	Code         apierr.Reason
	Message      string
}

// purgeHere is [Log.Purge] of partitions this instance serves (a single
// node's, or one owner's part of a split request).
func (l *Log) purgeHere(ctx context.Context, topics []PurgeTopic) ([]PurgeTopicResult, error) {
	type tp struct {
		topic     string
		partition int32
	}
	seen := map[tp]int{}
	for _, t := range topics {
		for _, p := range t.Partitions {
			seen[tp{t.Topic, p.Partition}]++
		}
	}
	infos := map[string]*logstore.TopicInfo{} // nil value: unknown topic
	out := make([]PurgeTopicResult, 0, len(topics))
	for _, t := range topics {
		info, ok := infos[t.Topic]
		if !ok {
			if ti, err := l.store.TopicInfo(ctx, t.Topic); err == nil {
				info = &ti
			} else if !errors.Is(err, logstore.ErrUnknownTopic) && !errors.Is(err, logstore.ErrInvalidArgument) {
				return nil, err
			}
			infos[t.Topic] = info
		}
		tr := PurgeTopicResult{Topic: t.Topic, Partitions: make([]PurgePartitionResult, 0, len(t.Partitions))}
		for _, p := range t.Partitions {
			tr.Partitions = append(tr.Partitions, l.purgePartition(ctx, info, t.Topic, p, seen[tp{t.Topic, p.Partition}] > 1))
		}
		out = append(out, tr)
	}
	return out, nil
}

func (l *Log) purgePartition(ctx context.Context, info *logstore.TopicInfo, topic string, p PurgePartition, duplicate bool) PurgePartitionResult {
	fail := func(code apierr.Reason, format string, args ...any) PurgePartitionResult {
		return PurgePartitionResult{Partition: p.Partition, LowWatermark: -1, Code: code, Message: fmt.Sprintf(format, args...)}
	}
	part := p.Partition
	switch {
	case info == nil:
		return fail(apierr.UnknownTopicOrPartition, "topic %q does not exist", topic)
	case part < 0 || part >= info.Partitions:
		return fail(apierr.UnknownTopicOrPartition, "topic %q has no partition %d", topic, part)
	case info.Config.CleanupPolicy == logstore.CleanupCompact:
		return fail(apierr.PolicyViolation, "topic %q has cleanup_policy \"compact\": records cannot be purged", topic)
	case duplicate:
		return fail(apierr.InvalidRequest, "partition %s-%d appears more than once in the request", topic, part)
	}
	storeErr := func(err error) PurgePartitionResult {
		switch {
		case errors.Is(err, logstore.ErrUnknownTopic):
			return fail(apierr.UnknownTopicOrPartition, "%v", err)
		case errors.Is(err, logstore.ErrOffsetOutOfRange):
			return fail(apierr.OffsetOutOfRange, "%v", err)
		}
		l.log.ErrorContext(ctx, "purge failed", "topic", topic, "partition", part, "err", err)
		return fail(apierr.KafkaStorageError, "the log start offset could not be stored durably")
	}
	logStart, hw, err := l.store.Bounds(topic, part)
	if err != nil {
		return storeErr(err)
	}
	offset := p.Offset
	if offset == -1 {
		offset = hw
	}
	if offset < 0 || offset > hw {
		return fail(apierr.OffsetOutOfRange,
			"offset %d is outside [0, %d] (the high watermark); -1 means the high watermark", p.Offset, hw)
	}
	if offset <= logStart {
		return PurgePartitionResult{Partition: part, LowWatermark: logStart}
	}
	newStart, err := l.deleteBefore(ctx, topic, part, offset)
	if err != nil {
		return storeErr(err)
	}
	return PurgePartitionResult{Partition: part, LowWatermark: newStart}
}
