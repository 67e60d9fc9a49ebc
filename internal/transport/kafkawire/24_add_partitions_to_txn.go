package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/txn"
)

// handleAddPartitionsToTxn serves v0-5: the partitions join the
// transactional id's transaction (txn.Coordinator.AddPartitions). As
// Kafka it needs WRITE on the transactional id and on each topic; a
// partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION and makes
// the others OPERATION_NOT_ATTEMPTED. v4+ carries a batch of
// transactions (franz-go sends its one transaction so); one marked
// verify-only adds nothing and answers, per partition, whether it is in
// the transaction (INVALID_TXN_STATE otherwise). Kafka reserves v4+ for
// brokers (CLUSTER_ACTION); here a client may send it, with the same
// checks as v3.
func (l *Listener) handleAddPartitionsToTxn(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if req.GetVersion() < 4 {
		t := kmsg.NewAddPartitionsToTxnRequestTransaction()
		t.TransactionalID, t.ProducerID, t.ProducerEpoch = req.TransactionalID, req.ProducerID, req.ProducerEpoch
		for _, rt := range req.Topics {
			tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
			tt.Topic, tt.Partitions = rt.Topic, rt.Partitions
			t.Topics = append(t.Topics, tt)
		}
		res := l.addPartitions(ctx, &t)
		for _, rt := range res.Topics {
			ot := kmsg.NewAddPartitionsToTxnResponseTopic()
			ot.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				op := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				op.Partition, op.ErrorCode = rp.Partition, rp.ErrorCode
				ot.Partitions = append(ot.Partitions, op)
			}
			resp.Topics = append(resp.Topics, ot)
		}
		return resp, nil
	}
	for i := range req.Transactions {
		resp.Transactions = append(resp.Transactions, l.addPartitions(ctx, &req.Transactions[i]))
	}
	return resp, nil
}

// addPartitions serves one transaction of the request.
func (l *Listener) addPartitions(ctx context.Context, t *kmsg.AddPartitionsToTxnRequestTransaction) kmsg.AddPartitionsToTxnResponseTransaction {
	out := kmsg.NewAddPartitionsToTxnResponseTransaction()
	out.TransactionalID = t.TransactionalID
	codes := make([][]int16, len(t.Topics))
	all := func(code int16) {
		for i := range codes {
			codes[i] = make([]int16, len(t.Topics[i].Partitions))
			for j := range codes[i] {
				codes[i][j] = code
			}
		}
	}
	all(0)
	var parts []txn.Partition
	failed := false
	if err := l.requireTxnID(ctx, authz.Write, t.TransactionalID); err != nil {
		all(errorCode(err))
		failed = true
	}
	writable := l.gate(authz.Write)
	for i, rt := range t.Topics {
		if failed {
			break
		}
		terr := internalRefusal(rt.Topic)
		if terr == nil {
			terr = writable.require(ctx, rt.Topic)
		}
		for j, p := range rt.Partitions {
			err := terr
			if err == nil {
				err = l.partitionExists(ctx, rt.Topic, p)
			}
			if err != nil {
				codes[i][j] = errorCode(err)
				continue
			}
			parts = append(parts, txn.Partition{Topic: rt.Topic, Partition: p})
		}
	}
	if !failed && len(parts) < countPartitions(t) {
		// One refused partition: none is added, as Kafka.
		for i := range codes {
			for j := range codes[i] {
				if codes[i][j] == 0 {
					codes[i][j] = kerr.OperationNotAttempted.Code
				}
			}
		}
		failed = true
	}
	if !failed {
		tc, err := l.txnOf(ctx)
		switch {
		case err != nil:
			all(txnErrorCode(err))
		case t.VerifyOnly:
			for i, rt := range t.Topics {
				for j, p := range rt.Partitions {
					codes[i][j] = txnErrorCode(tc.InTransaction(t.TransactionalID, t.ProducerID, t.ProducerEpoch, rt.Topic, p))
				}
			}
		default:
			if err := tc.AddPartitions(ctx, t.TransactionalID, t.ProducerID, t.ProducerEpoch, parts); err != nil {
				all(txnErrorCode(err))
			}
		}
	}
	for i, rt := range t.Topics {
		ot := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
		ot.Topic = rt.Topic
		for j, p := range rt.Partitions {
			op := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
			op.Partition, op.ErrorCode = p, codes[i][j]
			ot.Partitions = append(ot.Partitions, op)
		}
		out.Topics = append(out.Topics, ot)
	}
	return out
}

func countPartitions(t *kmsg.AddPartitionsToTxnRequestTransaction) int {
	n := 0
	for _, rt := range t.Topics {
		n += len(rt.Partitions)
	}
	return n
}
