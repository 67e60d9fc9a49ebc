package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/txn"
)

// handleAddOffsetsToTxn serves v0-4: the group joins the transactional
// id's transaction, so that its TxnOffsetCommit offsets are committed
// with it (txn.Coordinator.AddOffsets). As Kafka it needs WRITE on the
// transactional id and READ on the group.
func (l *Listener) handleAddOffsetsToTxn(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	err := l.requireTxnID(ctx, authz.Write, req.TransactionalID)
	if err == nil {
		err = l.require(ctx, authz.Read, authz.Group, req.Group)
	}
	var tc *txn.Coordinator
	if err == nil {
		tc, err = l.txnOf(ctx)
	}
	if err == nil {
		err = tc.AddOffsets(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group)
	}
	resp.ErrorCode = txnErrorCode(err)
	return resp, nil
}
