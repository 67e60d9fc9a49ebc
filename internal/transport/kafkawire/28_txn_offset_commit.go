package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/txn"
)

// handleTxnOffsetCommit serves v0-4: offsets the transaction commits for
// the group when it commits (txn.Coordinator.TxnOffsetCommit); until then
// OffsetFetch does not answer them, and one that requires stable offsets
// answers UNSTABLE_OFFSET_COMMIT for their partitions. v3+ names the
// member, checked as OffsetCommit's (consumergroup.Coordinator.CheckMember).
// As Kafka it needs WRITE on the transactional id, READ on the group and
// READ on each topic.
func (l *Listener) handleTxnOffsetCommit(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.TxnOffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	codes := make([][]int16, len(req.Topics))
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
	}
	all := func(code int16) {
		for i := range codes {
			for j := range codes[i] {
				codes[i][j] = code
			}
		}
	}
	err := l.requireTxnID(ctx, authz.Write, req.TransactionalID)
	if err == nil {
		err = l.require(ctx, authz.Read, authz.Group, req.Group)
	}
	var tc *txn.Coordinator
	if err == nil {
		tc, err = l.txnOf(ctx)
	}
	if gc, gerr := l.groupsOf(ctx); err == nil && gerr == nil && req.GetVersion() >= 3 {
		err = gc.CheckMember(ctx, req.Group, req.MemberID, req.InstanceID, req.Generation)
	}
	if err != nil {
		all(groupErrorCode(err))
	} else {
		readable := l.gate(authz.Read)
		var offs []txn.Offset
		for i, t := range req.Topics {
			terr := internalRefusal(t.Topic)
			if terr == nil {
				terr = readable.require(ctx, t.Topic)
			}
			for j, p := range t.Partitions {
				perr := terr
				if perr == nil {
					perr = l.partitionExists(ctx, t.Topic, p.Partition)
				}
				if perr != nil {
					codes[i][j] = errorCode(perr)
					continue
				}
				o := txn.Offset{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset, LeaderEpoch: p.LeaderEpoch}
				if req.GetVersion() < 2 {
					o.LeaderEpoch = -1
				}
				if p.Metadata != nil {
					o.Metadata = *p.Metadata
				}
				offs = append(offs, o)
			}
		}
		if len(offs) > 0 {
			if err := tc.TxnOffsetCommit(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group, offs); err != nil {
				code := txnErrorCode(err)
				for i := range codes {
					for j := range codes[i] {
						if codes[i][j] == 0 {
							codes[i][j] = code
						}
					}
				}
			}
		}
	}
	for i, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, codes[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
