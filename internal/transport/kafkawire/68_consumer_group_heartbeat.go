package kafkawire

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[68] = handler{0, 1, (*Listener).handleConsumerGroupHeartbeat} }

// handleConsumerGroupHeartbeat is the consumer protocol's (KIP-848)
// heartbeat (docs/consumer-groups.md "KIP-848"): READ on the group;
// subscribed topics the caller may not DESCRIBE are left out, as Kafka
// does. Topic ids translate to names both ways; an owned id that no
// topic has now is dropped (the topic is gone).
func (l *Listener) handleConsumerGroupHeartbeat(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	if err := l.requireGroup(ctx, authz.Read, req.Group); err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("consumer group heartbeat", err)
		return resp, nil
	}
	if l.cfg.Cluster != nil {
		if node := l.cfg.Cluster.Coordinator(ctx, coordinatorGroup, req.Group); node != l.self() {
			resp.ErrorCode = kerr.NotCoordinator.Code
			msg := fmt.Sprintf("group %q is coordinated by broker %d", req.Group, node)
			resp.ErrorMessage = &msg
			return resp, nil
		}
	}
	if req.Version >= 1 && req.MemberID == "" {
		resp.ErrorCode = kerr.InvalidRequest.Code
		msg := "ConsumerGroupHeartbeat v1 needs a member id chosen by the client"
		resp.ErrorMessage = &msg
		return resp, nil
	}
	hr := consumergroup.ConsumerHeartbeatRequest{Group: req.Group, MemberID: req.MemberID, MemberEpoch: req.MemberEpoch,
		InstanceID: req.InstanceID, RackID: req.RackID, ClientID: clientIDOf(c), ClientHost: clientHost(c),
		RebalanceTimeout: millis(req.RebalanceTimeoutMillis), SubscribedRegex: req.SubscribedTopicRegex,
		ServerAssignor: req.ServerAssignor}
	if req.RebalanceTimeoutMillis < 0 {
		hr.RebalanceTimeout = -1
	}
	if req.SubscribedTopicNames != nil {
		subs := make([]string, 0, len(req.SubscribedTopicNames))
		check := l.topics(authz.Describe)
		for _, t := range req.SubscribedTopicNames {
			if !l.cfg.Guard.Enforcing() || check.Allowed(ctx, t) {
				subs = append(subs, t)
			}
		}
		hr.SubscribedTopics = subs
	}
	if req.Topics != nil {
		hr.Owned = []consumergroup.TopicPartitions{}
		for _, t := range req.Topics {
			name, ok := l.resolveTopicID(ctx, t.TopicID)
			if !ok {
				continue
			}
			hr.Owned = append(hr.Owned, consumergroup.TopicPartitions{Topic: name, Partitions: t.Partitions})
		}
	}
	gc, err := l.groupsOf(ctx)
	var out consumergroup.ConsumerHeartbeatResponse
	if err == nil {
		out, err = gc.ConsumerHeartbeat(ctx, hr)
	}
	if err != nil {
		code, msg, cerr := l.groupErr(ctx, "consumer group heartbeat", err)
		if cerr != nil {
			return nil, cerr
		}
		resp.ErrorCode, resp.ErrorMessage = code, msg
		return resp, nil
	}
	resp.MemberID = &out.MemberID
	resp.MemberEpoch = out.MemberEpoch
	resp.HeartbeatIntervalMillis = int32(out.HeartbeatInterval.Milliseconds())
	if out.Assignment != nil {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		a.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
		for _, t := range out.Assignment {
			id := l.nameID(ctx, t.Topic)
			if id == ([16]byte{}) {
				continue // deleted meanwhile: the next heartbeat reassigns
			}
			rt := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			rt.TopicID, rt.Partitions = id, t.Partitions
			a.Topics = append(a.Topics, rt)
		}
		resp.Assignment = &a
	}
	return resp, nil
}
