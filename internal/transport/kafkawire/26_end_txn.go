package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/txn"
)

// handleEndTxn serves v0-4: the transactional id's transaction commits or
// aborts (txn.Coordinator.EndTxn: decided durably, the markers written on
// every partition of it, then, on commit, its offsets committed). It
// answers once all of that is done, where Kafka answers once the decision
// is durable and writes the markers after. WRITE on the transactional id.
func (l *Listener) handleEndTxn(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	err := l.requireTxnID(ctx, authz.Write, req.TransactionalID)
	var tc *txn.Coordinator
	if err == nil {
		tc, err = l.txnOf(ctx)
	}
	if err == nil {
		err = tc.EndTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
	}
	if err != nil {
		resp.ErrorCode = txnErrorCode(err)
		if resp.ErrorCode == -1 || resp.ErrorCode == 56 {
			l.logger.Error("kafka EndTxn", "transactional_id", req.TransactionalID, "error", err)
		}
	}
	return resp, nil
}
