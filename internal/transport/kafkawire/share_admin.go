package kafkawire

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// The share-group admin APIs translate one to one to the Manager's admin
// calls, which the gRPC admin RPCs use too.

func init() {
	shareHandlers[77] = handler{1, 1, (*Listener).handleShareGroupDescribe}
	shareHandlers[90] = handler{1, 1, (*Listener).handleDescribeShareGroupOffsets}
	shareHandlers[91] = handler{0, 0, (*Listener).handleAlterShareGroupOffsets}
	shareHandlers[92] = handler{0, 0, (*Listener).handleDeleteShareGroupOffsets}
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

func (l *Listener) handleShareGroupDescribe(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ShareGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	for _, id := range req.GroupIDs {
		rg := kmsg.NewShareGroupDescribeResponseGroup()
		rg.GroupID = id
		err := l.requireGroup(ctx, authz.Describe, id)
		var d sharegroup.GroupDescription
		if err == nil {
			d, err = l.shareOf(ctx).DescribeGroup(ctx, id)
		}
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = l.requestError("share group describe", err)
			rg.GroupState = "Dead"
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.GroupState, rg.GroupEpoch, rg.AssignmentEpoch, rg.Assignor = d.State.String(), d.GroupEpoch, d.AssignmentEpoch, "simple"
		for _, m := range d.Members {
			rm := kmsg.NewShareGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch, rm.ClientID, rm.ClientHost = m.MemberID, m.MemberEpoch, m.ClientID, m.ClientHost
			rm.RackID = optString(m.RackID)
			rm.SubscribedTopicNames = m.SubscribedTopicNames
			for _, t := range m.Assignment.Topics {
				tp := kmsg.NewShareGroupDescribeResponseGroupMemberAssignmentTopicPartition()
				tp.Topic, tp.TopicID, tp.Partitions = t.Topic, l.nameID(ctx, t.Topic), t.Partitions
				rm.Assignment.TopicPartitions = append(rm.Assignment.TopicPartitions, tp)
			}
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func (l *Listener) handleDescribeShareGroupOffsets(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	for _, g := range req.Groups {
		rg := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		rg.GroupID = g.GroupID
		err := l.requireGroup(ctx, authz.Describe, g.GroupID)
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = l.requestError("describe share group offsets", err)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		// DESCRIBE on each topic too, as the gRPC DescribeShareGroupOffsets:
		// a requested topic without it answers TOPIC_AUTHORIZATION_FAILED per
		// partition; with no topics named, such topics are left out.
		describable := l.topics(authz.Describe)
		var topics []sharegroup.TopicPartitions
		for _, t := range g.Topics {
			if !describable.Allowed(ctx, t.Topic) {
				rt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
				rt.Topic, rt.TopicID = t.Topic, l.nameID(ctx, t.Topic)
				for _, p := range t.Partitions {
					rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
					rp.Partition, rp.StartOffset, rp.Lag, rp.LeaderEpoch = p, -1, -1, -1
					rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
					rp.ErrorMessage = optString(fmt.Sprintf("not authorized to %s topic %q", authz.Describe, t.Topic))
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
				continue
			}
			topics = append(topics, sharegroup.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
		}
		var out []sharegroup.TopicOffsets
		if len(topics) > 0 || len(g.Topics) == 0 {
			if out, err = l.shareOf(ctx).DescribeOffsets(ctx, g.GroupID, topics); err != nil {
				rg.ErrorCode, rg.ErrorMessage = l.requestError("describe share group offsets", err)
				resp.Groups = append(resp.Groups, rg)
				continue
			}
		}
		for _, t := range out {
			if len(g.Topics) == 0 && !l.allowed(ctx, authz.Describe, authz.Topic, t.Topic) {
				continue
			}
			rt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			rt.Topic, rt.TopicID = t.Topic, l.nameID(ctx, t.Topic)
			for _, p := range t.Partitions {
				rp := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
				rp.Partition, rp.StartOffset, rp.Lag, rp.LeaderEpoch = p.Partition, p.StartOffset, p.Lag, 0
				rp.ErrorCode, rp.ErrorMessage = p.ErrorCode.KafkaCode(), optString(p.ErrorMessage)
				rt.Partitions = append(rt.Partitions, rp)
			}
			rg.Topics = append(rg.Topics, rt)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func (l *Listener) handleAlterShareGroupOffsets(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AlterShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	if err := l.requireGroup(ctx, authz.Read, req.GroupID); err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("alter share group offsets", err)
		return resp, nil
	}
	// READ on each topic too, as the gRPC AlterShareGroupOffsets: a denied
	// topic is not passed on and answers TOPIC_AUTHORIZATION_FAILED per
	// partition (docs/security.md).
	readable := l.topics(authz.Read)
	var topics []sharegroup.TopicStartOffsets
	for _, t := range req.Topics {
		if !readable.Allowed(ctx, t.Topic) {
			rt := kmsg.NewAlterShareGroupOffsetsResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, l.nameID(ctx, t.Topic)
			for _, p := range t.Partitions {
				rp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
				rp.ErrorMessage = optString(fmt.Sprintf("not authorized to %s topic %q", authz.Read, t.Topic))
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		ts := sharegroup.TopicStartOffsets{Topic: t.Topic}
		for _, p := range t.Partitions {
			ts.Partitions = append(ts.Partitions, sharegroup.PartitionStartOffset{Partition: p.Partition, StartOffset: p.StartOffset})
		}
		topics = append(topics, ts)
	}
	if len(topics) == 0 && len(req.Topics) > 0 {
		return resp, nil
	}
	out, err := l.shareOf(ctx).AlterOffsets(ctx, req.GroupID, topics)
	l.cfg.Guard.Changed(ctx, "AlterShareGroupOffsets", authz.Group, req.GroupID, err)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("alter share group offsets", err)
		return resp, nil
	}
	for _, t := range out {
		rt := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, l.nameID(ctx, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.ErrorMessage = p.Partition, p.ErrorCode.KafkaCode(), optString(p.ErrorMessage)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func (l *Listener) handleDeleteShareGroupOffsets(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	var topics []string
	for _, t := range req.Topics {
		topics = append(topics, t.Topic)
	}
	if err := l.requireGroup(ctx, authz.Delete, req.GroupID); err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("delete share group offsets", err)
		return resp, nil
	}
	out, err := l.shareOf(ctx).DeleteOffsets(ctx, req.GroupID, topics)
	l.cfg.Guard.Changed(ctx, "DeleteShareGroupOffsets", authz.Group, req.GroupID, err)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("delete share group offsets", err)
		return resp, nil
	}
	for _, t := range out {
		rt := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, l.nameID(ctx, t.Topic)
		rt.ErrorCode, rt.ErrorMessage = t.ErrorCode.KafkaCode(), optString(t.ErrorMessage)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
