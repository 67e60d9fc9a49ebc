package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/txn"
)

func init() { groupHandlers[9] = handler{0, 9, (*Listener).handleOffsetFetch} }

// handleOffsetFetch serves the one-group form (v0–7) and the multi-group
// form (v8+). As Kafka it needs DESCRIBE on the group and on each topic
// (READ implies DESCRIBE): a named partition of a refused topic answers
// TOPIC_AUTHORIZATION_FAILED, and a fetch of every partition leaves the
// refused topics out. With RequireStable (v7+), a partition with offsets
// of an open transaction (TxnOffsetCommit, not yet committed or aborted;
// txn.Coordinator.PendingOffsets) answers UNSTABLE_OFFSET_COMMIT, which
// the client retries, as Kafka.
func (l *Listener) handleOffsetFetch(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	gate := l.gate(authz.Describe)
	if req.Version >= 8 {
		for _, g := range req.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			var topics []consumergroup.TopicPartitions
			if g.Topics != nil {
				topics = []consumergroup.TopicPartitions{}
				for _, t := range g.Topics {
					topics = append(topics, consumergroup.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
				}
			}
			res, code := l.fetchOffsets(ctx, gate, g.Group, topics, req.RequireStable)
			rg.ErrorCode = code
			for _, t := range res {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, optMetadata(p), errorCode(p.Err)
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil
	}
	var topics []consumergroup.TopicPartitions
	if req.Topics != nil || req.Version < 2 {
		topics = []consumergroup.TopicPartitions{}
		for _, t := range req.Topics {
			topics = append(topics, consumergroup.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
		}
	}
	res, code := l.fetchOffsets(ctx, gate, req.Group, topics, req.RequireStable)
	if req.Version >= 2 {
		resp.ErrorCode = code
	}
	for _, t := range res {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, optMetadata(p), errorCode(p.Err)
			if code != 0 {
				rp.ErrorCode = code // v0–1 have no top-level code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func optMetadata(p consumergroup.CommittedOffset) *string {
	s := p.Metadata
	return &s
}

// fetchOffsets is one group's fetch with its permissions: the offsets
// (with the refused topics' partitions answered or left out) and the
// group-level code.
func (l *Listener) fetchOffsets(ctx context.Context, gate topicGate, group string, topics []consumergroup.TopicPartitions, stable bool) ([]consumergroup.TopicOffsets, int16) {
	if err := l.requireGroup(ctx, authz.Describe, group); err != nil {
		code, _ := l.requestError("offset fetch", err)
		return refused(topics, code), code
	}
	var allowed []consumergroup.TopicPartitions
	denied := map[string]bool{}
	if topics != nil {
		allowed = []consumergroup.TopicPartitions{}
		for _, t := range topics {
			if gate.require(ctx, t.Topic) != nil {
				denied[t.Topic] = true
				continue
			}
			allowed = append(allowed, t)
		}
	}
	gc, err := l.groupsOf(ctx)
	var res []consumergroup.TopicOffsets
	if err == nil {
		res, err = gc.Fetch(ctx, group, allowed)
	}
	if err != nil {
		code, _ := l.requestError("offset fetch", err)
		return refused(topics, code), code
	}
	if tc, terr := l.txnOf(ctx); stable && terr == nil {
		if pending := tc.PendingOffsets(group); len(pending) > 0 {
			for i := range res {
				for j := range res[i].Partitions {
					p := &res[i].Partitions[j]
					if pending[txn.Partition{Topic: res[i].Topic, Partition: p.Partition}] {
						p.Offset, p.LeaderEpoch, p.Metadata = -1, -1, ""
						p.Err = apierr.New(apierr.UnstableOffsetCommit, "%s-%d has offsets of an open transaction", res[i].Topic, p.Partition)
					}
				}
			}
		}
	}
	if topics == nil {
		out := res[:0]
		for _, t := range res {
			if l.allowed(ctx, authz.Describe, authz.Topic, t.Topic) {
				out = append(out, t)
			}
		}
		return out, 0
	}
	// In request order, with the refused topics answered.
	out := make([]consumergroup.TopicOffsets, 0, len(topics))
	for _, t := range topics {
		if denied[t.Topic] {
			out = append(out, refused([]consumergroup.TopicPartitions{t}, kerr.TopicAuthorizationFailed.Code)...)
			continue
		}
		out = append(out, res[0])
		res = res[1:]
	}
	return out, 0
}

// refused answers every named partition with code (offset -1).
func refused(topics []consumergroup.TopicPartitions, code int16) []consumergroup.TopicOffsets {
	out := make([]consumergroup.TopicOffsets, 0, len(topics))
	for _, t := range topics {
		to := consumergroup.TopicOffsets{Topic: t.Topic}
		for _, p := range t.Partitions {
			to.Partitions = append(to.Partitions, consumergroup.CommittedOffset{Partition: p, Offset: -1, LeaderEpoch: -1, Err: codeError(code)})
		}
		out = append(out, to)
	}
	return out
}
