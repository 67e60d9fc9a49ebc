package kafkawire

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// handleDeleteRecords moves each partition's log start offset through
// broker.Log.Purge, which holds the purge rules (docs/purge.md): each
// partition judged alone, -1 means the high watermark, an offset above it
// is OFFSET_OUT_OF_RANGE, one at or below the log start changes nothing, a
// partition named twice in one request is INVALID_REQUEST for both entries.
// Each partition's result is the low watermark after the call. In cluster
// mode a partition led elsewhere answers NOT_LEADER_OR_FOLLOWER
// (Listener.leads) and is not passed on.
func (l *Listener) handleDeleteRecords(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	// DELETE on each topic before any lookup, as the gRPC Purge: a denied
	// topic answers TOPIC_AUTHORIZATION_FAILED with low watermark -1 on
	// each partition and is not passed on.
	check := l.topics(authz.Delete)
	allowed := make([]bool, len(req.Topics))
	notLed := make([][]error, len(req.Topics)) // per partition: why it is not purged here
	var topics []broker.PurgeTopic
	for i, t := range req.Topics {
		if allowed[i] = check.Allowed(ctx, t.Topic); !allowed[i] {
			continue
		}
		notLed[i] = make([]error, len(t.Partitions))
		pt := broker.PurgeTopic{Topic: t.Topic}
		for j, p := range t.Partitions {
			if _, err := l.leads(ctx, t.Topic, p.Partition, -1); err != nil {
				notLed[i][j] = err
				continue
			}
			pt.Partitions = append(pt.Partitions, broker.PurgePartition{Partition: p.Partition, Offset: p.Offset})
		}
		if len(pt.Partitions) == 0 {
			allowed[i] = false // nothing to pass on; answered from notLed
			continue
		}
		topics = append(topics, pt)
	}
	var res []broker.PurgeTopicResult
	var err error
	if len(topics) > 0 {
		if res, err = l.logOf(ctx).Purge(ctx, topics); err != nil {
			l.logger.Error("kafka delete records", "error", err)
			l.cfg.Guard.Changed(ctx, "Purge", authz.Topic, topics[0].Topic, err)
		}
	}
	k := 0 // the next result of an allowed topic
	for i, t := range req.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		m := 0 // the next result of this topic's partitions passed on
		for j, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark = p.Partition, -1
			var lerr error
			if notLed[i] != nil {
				lerr = notLed[i][j]
			}
			switch {
			case lerr != nil:
				rp.ErrorCode = errorCode(lerr)
			case !allowed[i]:
				rp.ErrorCode = apierr.TopicAuthorizationFailed.KafkaCode()
			case err != nil:
				rp.ErrorCode = errorCode(err) // the store failed the whole call
			default:
				r := res[k].Partitions[m]
				m++
				rp.LowWatermark, rp.ErrorCode = r.LowWatermark, r.Code.KafkaCode()
				if r.Code == apierr.None {
					l.cfg.Guard.Changed(ctx, "Purge", authz.Topic, t.Topic, nil, slog.Int("partition", int(p.Partition)), slog.Int64("low_watermark", r.LowWatermark))
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		if allowed[i] {
			k++
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
