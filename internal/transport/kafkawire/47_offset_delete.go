package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[47] = handler{0, 0, (*Listener).handleOffsetDelete} }

// handleOffsetDelete needs DELETE on the group and READ on each topic
// (TOPIC_AUTHORIZATION_FAILED per partition), as Kafka.
func (l *Listener) handleOffsetDelete(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.OffsetDeleteRequest)
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if err := l.requireGroup(ctx, authz.Delete, req.Group); err != nil {
		resp.ErrorCode, _ = l.requestError("offset delete", err)
		return resp, nil
	}
	gate := l.gate(authz.Read)
	var topics []consumergroup.TopicPartitions
	denied := map[int]bool{}
	for i, t := range req.Topics {
		if gate.require(ctx, t.Topic) != nil {
			denied[i] = true
			continue
		}
		tp := consumergroup.TopicPartitions{Topic: t.Topic}
		for _, p := range t.Partitions {
			tp.Partitions = append(tp.Partitions, p.Partition)
		}
		topics = append(topics, tp)
	}
	gc, err := l.groupsOf(ctx)
	var res []consumergroup.TopicErrors
	if err == nil {
		res, err = gc.DeleteOffsets(ctx, req.Group, topics)
	}
	l.cfg.Guard.Changed(ctx, "OffsetDelete", authz.Group, req.Group, err)
	if err != nil {
		resp.ErrorCode, _ = l.requestError("offset delete", err)
		return resp, nil
	}
	for i, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		var tr consumergroup.TopicErrors
		if !denied[i] {
			tr, res = res[0], res[1:]
		}
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			if denied[i] {
				rp.ErrorCode = apierr.TopicAuthorizationFailed.KafkaCode()
			} else {
				rp.ErrorCode = errorCode(tr.Partitions[j].Err)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
