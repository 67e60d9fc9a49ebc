package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[8] = handler{0, 9, (*Listener).handleOffsetCommit} }

// handleOffsetCommit needs READ on the group (every partition answers
// GROUP_AUTHORIZATION_FAILED otherwise) and READ on each topic (its
// partitions answer TOPIC_AUTHORIZATION_FAILED), as Kafka. The partitions
// that pass are committed together, durably (docs/consumer-groups.md).
func (l *Listener) handleOffsetCommit(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	fillAll := func(code int16) {
		resp.Topics = resp.Topics[:0]
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	if err := l.requireGroup(ctx, authz.Read, req.Group); err != nil {
		code, _ := l.requestError("offset commit", err)
		fillAll(code)
		return resp, nil
	}
	gate := l.gate(authz.Read)
	cr := consumergroup.CommitRequest{Group: req.Group, Generation: req.Generation, MemberID: req.MemberID,
		InstanceID: req.InstanceID, UnknownGroupNotFound: req.Version >= 9}
	if req.Version == 0 {
		cr.Generation = -1 // v0 commits are simple commits
	}
	denied := map[int]error{} // request topic index -> refusal
	for i, t := range req.Topics {
		if err := gate.require(ctx, t.Topic); err != nil {
			denied[i] = err
			continue
		}
		ct := consumergroup.CommitTopic{Topic: t.Topic}
		for _, p := range t.Partitions {
			cp := consumergroup.CommitPartition{Partition: p.Partition, Offset: p.Offset, LeaderEpoch: -1}
			if req.Version >= 6 {
				cp.LeaderEpoch = p.LeaderEpoch
			}
			if p.Metadata != nil {
				cp.Metadata = *p.Metadata
			}
			ct.Partitions = append(ct.Partitions, cp)
		}
		cr.Topics = append(cr.Topics, ct)
	}
	var res []consumergroup.TopicErrors
	if len(cr.Topics) > 0 {
		gc, err := l.groupsOf(ctx)
		if err == nil {
			res, err = gc.Commit(ctx, cr)
		}
		if err != nil {
			// The group's answer goes to the authorized topics; the
			// refused ones keep their refusal, as in Kafka.
			code, _ := l.requestError("offset commit", err)
			res = make([]consumergroup.TopicErrors, len(cr.Topics))
			for i, t := range cr.Topics {
				res[i].Topic = t.Topic
				for _, p := range t.Partitions {
					res[i].Partitions = append(res[i].Partitions, consumergroup.PartitionError{Partition: p.Partition, Err: codeError(code)})
				}
			}
		}
	}
	for i, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		var tr consumergroup.TopicErrors
		if _, no := denied[i]; !no {
			tr, res = res[0], res[1:]
		}
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			if err, no := denied[i]; no {
				rp.ErrorCode = apierr.ReasonOf(err).KafkaCode()
			} else {
				rp.ErrorCode = errorCode(tr.Partitions[j].Err)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
