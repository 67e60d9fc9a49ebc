package kafkawire

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
)

// txnStates are the state names of ListTransactions' filter, Kafka's.
var txnStates = []string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

// handleListTransactions serves v0-1: the transactional ids the caller
// may DESCRIBE (others are left out, as Kafka), filtered by state,
// producer id and (v1) the least time open. An unknown state name is
// listed in UnknownStateFilters. In cluster mode each broker lists the ids
// it coordinates (a standby none).
func (l *Listener) handleListTransactions(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	for _, s := range req.StateFilters {
		if !slices.Contains(txnStates, s) {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, s)
		}
	}
	tc, err := l.txnOf(ctx)
	if err != nil {
		// A broker that coordinates no ids lists none (Kafka's clients
		// ask every broker and merge the answers).
		return resp, nil
	}
	now := time.Now().UnixMilli()
	for _, d := range tc.List(req.StateFilters, req.ProducerIDFilters) {
		if req.DurationFilterMillis > 0 && (d.StartMs < 0 || now-d.StartMs < req.DurationFilterMillis) {
			continue
		}
		if !l.allowed(ctx, authz.Describe, authz.TransactionalID, d.ID) {
			continue
		}
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = d.ID, d.ProducerID, d.State
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp, nil
}
