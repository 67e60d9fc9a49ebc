package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[69] = handler{0, 1, (*Listener).handleConsumerGroupDescribe} }

// handleConsumerGroupDescribe needs DESCRIBE on each group; a classic or
// unknown group is GROUP_ID_NOT_FOUND, as Kafka answers.
func (l *Listener) handleConsumerGroupDescribe(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ConsumerGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	assignment := func(tps []consumergroup.TopicPartitions) kmsg.Assignment {
		a := kmsg.NewAssignment()
		for _, t := range tps {
			tp := kmsg.AssignmentTopicPartition{TopicID: l.nameID(ctx, t.Topic), Topic: t.Topic, Partitions: t.Partitions}
			a.TopicPartitions = append(a.TopicPartitions, tp)
		}
		return a
	}
	for _, id := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = id
		if err := l.requireGroup(ctx, authz.Describe, id); err != nil {
			rg.ErrorCode, rg.ErrorMessage = l.requestError("consumer group describe", err)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		gc, err := l.groupsOf(ctx)
		var d consumergroup.ConsumerGroupDescription
		if err == nil {
			d, err = gc.ConsumerDescribe(ctx, id)
		}
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = l.requestError("consumer group describe", err)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = d.State, d.Epoch, d.AssignmentEpoch, d.Assignor
		for _, m := range d.Members {
			rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			rm.MemberID, rm.InstanceID, rm.RackID, rm.MemberEpoch = m.MemberID, m.InstanceID, m.RackID, m.MemberEpoch
			rm.ClientID, rm.ClientHost, rm.SubscribedTopics, rm.SubscribedTopicRegex = m.ClientID, m.ClientHost, m.SubscribedTopics, m.SubscribedRegex
			rm.Assignment, rm.TargetAssignment = assignment(m.Assignment), assignment(m.TargetAssignment)
			rm.MemberType = 1 // a consumer-protocol member (v1)
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}
