package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/broker"
)

// handleDeleteRecords moves each partition's log start offset through
// broker.Log.Purge, which holds the purge rules (docs/purge.md): each
// partition judged alone, -1 means the high watermark, an offset above it
// is OFFSET_OUT_OF_RANGE, one at or below the log start changes nothing, a
// partition named twice in one request is INVALID_REQUEST for both entries.
// Each partition's result is the low watermark after the call.
func (l *Listener) handleDeleteRecords(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	topics := make([]broker.PurgeTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i] = broker.PurgeTopic{Topic: t.Topic, Partitions: make([]broker.PurgePartition, len(t.Partitions))}
		for j, p := range t.Partitions {
			topics[i].Partitions[j] = broker.PurgePartition{Partition: p.Partition, Offset: p.Offset}
		}
	}
	res, err := l.log.Purge(ctx, topics)
	if err != nil {
		l.logger.Error("kafka delete records", "error", err)
	}
	for i, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark = p.Partition, -1
			if err != nil {
				rp.ErrorCode = errorCode(err) // the store failed the whole call
			} else {
				r := res[i].Partitions[j]
				rp.LowWatermark, rp.ErrorCode = r.LowWatermark, r.Code.KafkaCode()
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
