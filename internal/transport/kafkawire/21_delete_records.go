package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// handleDeleteRecords moves each partition's log start offset (purge), with
// the rules of the gRPC Purge (docs/purge.md): -1
// means the high watermark; an offset above it is OFFSET_OUT_OF_RANGE; one
// at or below the log start changes nothing. Each partition has its own
// result, the low watermark after the call. A partition named twice in one
// request is INVALID_REQUEST for both entries (sharelog is stricter than
// Kafka here: the order of two purges of one partition would be ambiguous).
func (l *Listener) handleDeleteRecords(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	type tp struct {
		t string
		p int32
	}
	seen := map[tp]int{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			seen[tp{t.Topic, p.Partition}]++
		}
	}
	for _, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.LowWatermark = -1
			switch {
			case seen[tp{t.Topic, p.Partition}] > 1:
				rp.ErrorCode = kerr.InvalidRequest.Code
			case p.Offset < -1:
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			default:
				rp.LowWatermark, rp.ErrorCode = l.purge(ctx, t.Topic, p.Partition, p.Offset)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func (l *Listener) purge(ctx context.Context, topic string, partition int32, offset int64) (int64, int16) {
	info, err := l.store.TopicInfo(ctx, topic)
	switch {
	case err != nil:
		return -1, errorCode(err)
	case partition < 0 || partition >= info.Partitions:
		return -1, kerr.UnknownTopicOrPartition.Code
	case info.Config.CleanupPolicy == logstore.CleanupCompact:
		return -1, kerr.PolicyViolation.Code // a compacted-only topic cannot be purged
	}
	if offset == -1 {
		_, hw, err := l.store.Bounds(topic, partition)
		if err != nil {
			return -1, errorCode(err)
		}
		offset = hw
	}
	logStart, err := l.store.DeleteRecordsBefore(ctx, topic, partition, offset)
	if err != nil {
		return -1, errorCode(err)
	}
	return logStart, 0
}
