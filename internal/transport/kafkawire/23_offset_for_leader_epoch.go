package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

func init() {
	leaderEpochHandlers[23] = handler{2, 4, (*Listener).handleOffsetForLeaderEpoch}
}

// leaderEpochHandlers are the APIs about leader epochs (served in every
// mode; docs/kafka.md "Cluster mode").
var leaderEpochHandlers = map[int16]handler{}

// handleOffsetForLeaderEpoch answers a consumer validating its position
// after a change of leader (KIP-320): for each partition, after the
// leadership and current_leader_epoch check of Fetch (Listener.leads),
// the end offset of the largest epoch at or below the one asked. No log
// here is ever truncated — JetStream and the file store keep every
// acknowledged record, whichever instance leads — so every epoch up to
// the current one ends at the high watermark: a consumer's position is
// never found diverged. An epoch above the current one, or none (-1), is
// UNDEFINED (-1, -1), as Kafka answers. DESCRIBE on the topic, as
// ListOffsets.
func (l *Listener) handleOffsetForLeaderEpoch(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	describable := l.gate(authz.Describe)
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
		rt.Topic = t.Topic
		terr := describable.require(ctx, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			rp.Partition, rp.LeaderEpoch, rp.EndOffset = p.Partition, -1, -1
			if terr != nil {
				rp.ErrorCode = errorCode(terr)
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			ld, err := l.leads(ctx, t.Topic, p.Partition, p.CurrentLeaderEpoch)
			if err == nil && p.LeaderEpoch >= 0 && p.LeaderEpoch <= ld.Epoch {
				var hw int64
				if hw, _, err = l.logOf(ctx).ListOffsets(ctx, t.Topic, p.Partition, broker.Latest, 0); err == nil {
					rp.LeaderEpoch, rp.EndOffset = p.LeaderEpoch, hw
				}
			}
			rp.ErrorCode = errorCode(err)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
