package kafkawire

import (
	"context"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// handleFetch serves sessionless full fetches: each partition's records
// from its fetch offset as uncompressed batches (one per idempotent
// producer's run, with its producer id, epoch and base sequence, and one
// per run without a producer; appendBatch; on a LogAppendTime topic one
// per append time, marked so), the high watermark, the
// last stable offset and the log start. With isolation_level
// READ_COMMITTED (1) the records stop at the last stable offset (the
// first offset of the oldest open transaction) and the answer lists the
// aborted transactions among them (broker.Log.ReadCommittedView), whose
// records the client drops; transaction markers go out as control
// batches either way, as Kafka's (docs/kafka.md "Transactions"). Read
// uncommitted answers the high watermark as the last stable offset.
// The bounds are the broker's (broker.Log.ReadPartition: outside [log
// start, high watermark] is OFFSET_OUT_OF_RANGE). The first partition with
// records returns at least one record even over MaxBytes (KIP-74). With
// fewer than MinBytes it waits up to MaxWaitMillis (at most broker.MaxWait)
// for an append to any requested partition (broker.Log.LongPoll). In
// cluster mode a partition led elsewhere, or named with another leader
// epoch, answers at once with its error (Listener.leads) and the current
// leader, and is not passed on.
func (l *Listener) handleFetch(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	if req.SessionID != 0 || (req.SessionEpoch != 0 && req.SessionEpoch != -1) {
		// No fetch session is ever handed out (the response's SessionID is
		// 0), so a client naming one has none here.
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp, nil
	}
	wait := time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond
	wait = min(wait, broker.MaxWait)
	// READ on each topic, before any lookup: a denied topic's partitions
	// answer TOPIC_AUTHORIZATION_FAILED and are neither read nor waited on.
	readable := l.gate(authz.Read)
	denied := map[string]error{}
	var parts []broker.TopicPartition
	led := map[broker.TopicPartition]leadership{}
	for _, t := range req.Topics {
		if err := internalRefusal(t.Topic); err != nil {
			denied[t.Topic] = err
			continue
		}
		if err := readable.require(ctx, t.Topic); err != nil {
			denied[t.Topic] = err
			continue
		}
		for _, p := range t.Partitions {
			tp := broker.TopicPartition{Topic: t.Topic, Partition: p.Partition}
			ld, err := l.leads(ctx, t.Topic, p.Partition, p.CurrentLeaderEpoch)
			led[tp] = leadership{ld, err}
			if err != nil {
				continue
			}
			parts = append(parts, tp)
		}
	}
	maxBytes := int(req.MaxBytes)
	if req.GetVersion() < 3 || maxBytes <= 0 {
		maxBytes = 50 << 20
	}
	maxBytes = l.cfg.Budget.CapFetch(maxBytes)
	// A cancelled wait (the client went away) answers what was read last.
	_ = l.logOf(ctx).LongPoll(ctx, parts, wait, func() bool {
		resp.Topics = resp.Topics[:0]
		// Each look reserves its bytes of the response budget and keeps
		// what the response carries until it is written; a client at its
		// share waits for its other responses, then is answered without
		// records (the bounds only), as a fetch over its byte limit.
		g, err := l.cfg.Budget.Reserve(ctx, maxBytes, max(wait, broker.BudgetWait))
		if err != nil {
			return true
		}
		n, failed := l.fillFetch(ctx, req, resp, g.Data, denied, led)
		g.Settle(n, 0) // n counts the batches' framing too
		return n >= int(req.MinBytes) || failed || g.Data == 0
	})
	return resp, nil
}

// fillFetch builds the response topics with up to budget bytes of record
// batches (the first partition with records gets at least one record, unless
// budget is 0) and returns the record bytes in it and whether any partition
// has an error (answered at once, as Kafka).
func (l *Listener) fillFetch(ctx context.Context, req *kmsg.FetchRequest, resp *kmsg.FetchResponse, budget int, denied map[string]error, led map[broker.TopicPartition]leadership) (int, bool) {
	failed := false
	starved := budget <= 0
	total := 0
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		logAppend := false // the topic stamps its records' append time
		if denied[t.Topic] == nil {
			if info, err := l.logOf(ctx).TopicInfo(ctx, t.Topic); err == nil {
				logAppend = broker.LogAppendTime(info.Config)
			}
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			// Empty, not null: librdkafka cannot parse a null record set.
			rp.RecordBatches = []byte{}
			if derr := denied[t.Topic]; derr != nil {
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				rp.ErrorCode = errorCode(derr)
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			ld := led[broker.TopicPartition{Topic: t.Topic, Partition: p.Partition}]
			if ld.err != nil {
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				rp.ErrorCode = errorCode(ld.err)
				rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = ld.leader.Node, ld.leader.Epoch
				rt.Partitions = append(rt.Partitions, rp)
				failed = true
				continue
			}
			limit := 0 // the byte budget is spent: the bounds only
			if budget > 0 || (total == 0 && !starved) {
				// Never past the response's budget: the store returns the
				// first record even if larger (KIP-74).
				limit = int(p.PartitionMaxBytes)
				if limit <= 0 || limit > budget {
					limit = max(budget, 1)
				}
			}
			// Read committed: the last stable offset first, then the
			// records below it, with the aborted transactions among them.
			committed := req.IsolationLevel == 1 && l.readsCommitted()
			var view broker.TxnView
			var verr error
			if committed {
				view, verr = l.logOf(ctx).ReadCommittedView(ctx, t.Topic, p.Partition, p.FetchOffset, math.MaxInt64)
			}
			res, err := l.logOf(ctx).ReadPartition(ctx, t.Topic, p.Partition, p.FetchOffset, broker.MaxFetchRecords, limit)
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = res.HighWatermark, res.HighWatermark, res.LogStartOffset
			if err == nil && committed {
				err = verr
			}
			if err == nil && committed {
				rp.LastStableOffset = view.LastStable
				n := 0
				for n < len(res.Records) && res.Records[n].Offset < view.LastStable {
					n++
				}
				res.Records = res.Records[:n]
				if n > 0 {
					last := res.Records[n-1].Offset
					for _, a := range view.Aborted {
						if a.FirstOffset <= last {
							at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
							at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
							rp.AbortedTransactions = append(rp.AbortedTransactions, at)
						}
					}
				}
			}
			if err != nil {
				rp.ErrorCode = errorCode(err)
			} else if len(res.Records) > 0 {
				rp.RecordBatches = appendTopicBatches(rp.RecordBatches, res.Records, ld.leader.Epoch, logAppend)
				total += len(rp.RecordBatches)
				budget -= len(rp.RecordBatches)
			}
			failed = failed || rp.ErrorCode != 0
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return total, failed
}

// leadership is a fetched partition's leader and, when this broker does not
// serve the request for it, why (Listener.leads).
type leadership struct {
	leader Leader
	err    error
}
