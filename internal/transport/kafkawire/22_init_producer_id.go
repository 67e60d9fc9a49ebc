package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/txn"
)

// handleInitProducerID serves v0–5 for idempotent producers (a null
// transactional id; docs/kafka.md "Idempotent producers"): a new producer
// id from broker.Log.InitProducer, epoch 0, the same durable ids the gRPC
// InitProducer hands out, never answered twice.
//
// As Kafka's coordinator, a producer id and epoch in the request (v3+,
// KIP-360) change nothing without a transactional id: the answer is a new
// id. An idempotent producer bumps its epoch itself (the partitions accept
// a higher epoch that starts at sequence 0), or asks for a new id, which
// is what franz-go does after OUT_OF_ORDER_SEQUENCE_NUMBER.
//
// It needs WRITE on at least one topic, as Kafka 3.0+ (IDEMPOTENT_WRITE on
// the cluster, Kafka's other way, is not an operation here):
// CLUSTER_AUTHORIZATION_FAILED otherwise, as the gRPC InitProducer's
// PERMISSION_DENIED.
//
// A transactional id is the transaction coordinator's
// (txn.Coordinator.InitProducer: the id's producer id with a new epoch,
// fencing older instances, its open transaction aborted), with WRITE on
// the transactional id, as Kafka; in cluster mode at the instance that
// coordinates the id, NOT_COORDINATOR elsewhere (the client finds the
// coordinator again). Where transactions are not served (no Config.Txn,
// or a cluster that does not serve them) it answers INVALID_REQUEST,
// which clients report as a request their broker does not understand.
func (l *Listener) handleInitProducerID(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil && l.servesTxn() {
		id := *req.TransactionalID
		err := l.requireTxnID(ctx, authz.Write, id)
		var tc *txn.Coordinator
		if err == nil {
			tc, err = l.txnOf(ctx)
		}
		if err == nil {
			resp.ProducerID, resp.ProducerEpoch, err = tc.InitProducer(ctx, id, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch)
		}
		if err != nil {
			resp.ProducerID, resp.ProducerEpoch = -1, -1
			resp.ErrorCode = txnErrorCode(err)
			if r := broker.ReasonOf(err); r == apierr.Internal || r == apierr.None || r == apierr.KafkaStorageError {
				l.logger.Error("kafka InitProducerID", "transactional_id", id, "error", err)
			}
		}
		return resp, nil
	}
	if req.TransactionalID != nil {
		l.logger.Info("kafka InitProducerID with a transactional id refused: transactions are not supported",
			"transactional_id", *req.TransactionalID)
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	if err := l.cfg.Guard.RequireOnAny(ctx, authz.Write, authz.Topic); err != nil {
		resp.ErrorCode = errorCode(err)
		return resp, nil
	}
	id, epoch, err := l.logOf(ctx).InitProducer(ctx)
	if err != nil {
		resp.ErrorCode = groupErrorCode(err)
		if r := broker.ReasonOf(err); r == apierr.Internal || r == apierr.None || r == apierr.KafkaStorageError {
			l.logger.Error("kafka InitProducerID", "error", err)
		}
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, epoch
	return resp, nil
}
