package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/txn"
)

// handleDescribeTransactions serves v0: each transactional id's state,
// producer, timeout, start and partitions (txn.Coordinator.Describe);
// DESCRIBE on the id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise),
// TRANSACTIONAL_ID_NOT_FOUND for an unknown one.
func (l *Listener) handleDescribeTransactions(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		st.ProducerID, st.ProducerEpoch, st.StartTimestamp = -1, -1, -1
		if err := l.requireTxnID(ctx, authz.Describe, id); err != nil {
			st.ErrorCode = errorCode(err)
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		tc, err := l.txnOf(ctx)
		var d txn.Description
		if err == nil {
			d, err = tc.Describe(id)
		}
		if err != nil {
			st.ErrorCode = txnErrorCode(err)
			resp.TransactionStates = append(resp.TransactionStates, st)
			continue
		}
		st.State, st.TimeoutMillis, st.StartTimestamp = d.State, d.TimeoutMs, d.StartMs
		st.ProducerID, st.ProducerEpoch = d.ProducerID, d.Epoch
		idx := map[string]int{}
		for _, p := range d.Partitions {
			i, ok := idx[p.Topic]
			if !ok {
				i = len(st.Topics)
				idx[p.Topic] = i
				t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				t.Topic = p.Topic
				st.Topics = append(st.Topics, t)
			}
			st.Topics[i].Partitions = append(st.Topics[i].Partitions, p.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp, nil
}
