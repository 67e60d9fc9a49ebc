package kafkawire

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

const (
	maxFetchWait    = 60 * time.Second
	maxFetchRecords = 10000
)

// handleFetch serves sessionless full fetches: each partition's records
// from its fetch offset as one uncompressed batch, the high watermark, the
// last stable offset (= high watermark: no transactions) and the log start.
// An offset outside [log start, high watermark] is OFFSET_OUT_OF_RANGE. The
// first partition with records returns at least one record even over
// MaxBytes (KIP-74). With fewer than MinBytes it waits up to MaxWaitMillis
// for an append to any requested partition.
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
	wait = min(wait, maxFetchWait)
	var timer *time.Timer
	for {
		wake, stop := l.watchFetch(req)
		n, failed := l.fillFetch(ctx, req, resp)
		if n >= int(req.MinBytes) || failed || wait == 0 || ctx.Err() != nil {
			stop()
			return resp, nil
		}
		if timer == nil {
			if l.cfg.LongPolls != nil && !l.cfg.LongPolls.TryAcquire() {
				stop()
				return resp, nil // every long-poll slot is taken: answer now
			}
			if l.cfg.LongPolls != nil {
				defer l.cfg.LongPolls.Release()
			}
			timer = time.NewTimer(wait)
			defer timer.Stop()
			l.waitingFetches.Add(1)
			defer l.waitingFetches.Add(-1)
		}
		select {
		case <-wake:
		case <-timer.C:
			wait = 0 // one last look, then answer
		case <-ctx.Done():
		}
		stop()
		resp.Topics = resp.Topics[:0]
	}
}

// watchFetch subscribes to every requested partition; wake receives once
// any of them changes. stop ends the subscriptions.
func (l *Listener) watchFetch(req *kmsg.FetchRequest) (wake <-chan struct{}, stop func()) {
	w := make(chan struct{}, 1)
	done := make(chan struct{})
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			ch, err := l.store.Watch(t.Topic, p.Partition)
			if err != nil {
				continue // answered with an error by fillFetch
			}
			go func() {
				select {
				case <-ch:
					select {
					case w <- struct{}{}:
					default:
					}
				case <-done:
				}
			}()
		}
	}
	return w, func() {
		select {
		case <-done:
		default:
			close(done)
		}
	}
}

// fillFetch builds the response topics and returns the record bytes in it
// and whether any partition has an error (answered at once, as Kafka).
func (l *Listener) fillFetch(ctx context.Context, req *kmsg.FetchRequest, resp *kmsg.FetchResponse) (int, bool) {
	failed := false
	budget := int(req.MaxBytes)
	if req.GetVersion() < 3 || budget <= 0 {
		budget = 50 << 20
	}
	total := 0
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			// Empty, not null: librdkafka cannot parse a null record set.
			rp.RecordBatches = []byte{}
			rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			logStart, hw, err := l.store.Bounds(t.Topic, p.Partition)
			switch {
			case err != nil:
				rp.ErrorCode = errorCode(err)
			case p.FetchOffset < logStart || p.FetchOffset > hw:
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			}
			if err == nil {
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = hw, hw, logStart
			}
			if rp.ErrorCode == 0 && p.FetchOffset < hw && (budget > 0 || total == 0) {
				limit := int(p.PartitionMaxBytes)
				if limit <= 0 || (total > 0 && limit > budget) {
					limit = max(budget, 1)
				}
				recs, err := l.store.Read(ctx, t.Topic, p.Partition, p.FetchOffset, maxFetchRecords, limit)
				switch {
				case errors.Is(err, logstore.ErrOffsetOutOfRange):
					rp.ErrorCode = kerr.OffsetOutOfRange.Code // raced with a purge
				case err != nil:
					rp.ErrorCode = errorCode(err)
				default:
					rp.RecordBatches = appendBatch(rp.RecordBatches, recs)
					total += len(rp.RecordBatches)
					budget -= len(rp.RecordBatches)
				}
			}
			failed = failed || rp.ErrorCode != 0
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return total, failed
}
