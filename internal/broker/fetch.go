package broker

import (
	"context"
	"errors"
	"time"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// ReadPartition holds the fetch bounds of one partition: an offset below
// the log start or above the high watermark is OFFSET_OUT_OF_RANGE; at the
// high watermark the answer is empty; otherwise it has up to maxRecords
// records and about maxBytes bytes (at least one record) from offset on. A
// maxRecords or maxBytes of 0 reads no record: the answer has the bounds
// and the range check only (a Kafka fetch whose byte budget is spent).
//
// The answer carries the bounds whenever they could be read, with
// OFFSET_OUT_OF_RANGE too (Kafka reports them with the error); -1 when not.
func (l *Log) ReadPartition(ctx context.Context, topic string, partition int32, offset int64, maxRecords, maxBytes int) (Fetched, error) {
	return l.readPartition(ctx, topic, partition, offset, maxRecords, func() (int, error) { return maxBytes, nil }, true)
}

// readPartition is ReadPartition whose byte limit is asked of limit when
// there is something to read (so that a fetch at the high watermark
// reserves nothing of the response budget); limit's error is the answer.
//
// Without markers, transaction markers (Record.Control, transactions.go)
// are left out, as offset gaps: a read that finds only markers reads on
// after them, and answers no records only when they reach the high
// watermark. The Kafka listener keeps them (its clients skip control
// batches themselves).
func (l *Log) readPartition(ctx context.Context, topic string, partition int32, offset int64, maxRecords int, limit func() (int, error), markers bool) (Fetched, error) {
	logStart, hw, err := l.store.Bounds(topic, partition)
	if err != nil {
		return Fetched{HighWatermark: -1, LogStartOffset: -1}, partitionErr(err, topic, partition)
	}
	out := Fetched{HighWatermark: hw, LogStartOffset: logStart}
	if offset < logStart || offset > hw {
		return out, outOfRange(offset, logStart, hw)
	}
	if offset == hw || maxRecords <= 0 {
		return out, nil
	}
	maxBytes, err := limit()
	if err != nil {
		return out, err
	}
	if maxBytes <= 0 {
		return out, nil
	}
	recs, err := l.store.Read(ctx, topic, partition, offset, maxRecords, maxBytes)
	for !markers && err == nil && len(recs) > 0 {
		last := recs[len(recs)-1].Offset
		recs = dropMarkers(recs)
		if len(recs) > 0 || last+1 >= hw {
			break
		}
		recs, err = l.store.Read(ctx, topic, partition, last+1, maxRecords, maxBytes)
	}
	if err != nil {
		// A read that raced with a purge: the error carries the
		// current log start offset.
		if errors.Is(err, logstore.ErrOffsetOutOfRange) {
			if logStart, hw, berr := l.store.Bounds(topic, partition); berr == nil {
				out.LogStartOffset, out.HighWatermark = logStart, hw
				return out, outOfRange(offset, logStart, hw)
			}
		}
		return out, partitionErr(err, topic, partition)
	}
	out.Records = recs
	return out, nil
}

// LongPoll is the fetch long-poll, over one partition (the gRPC Fetch) or
// several (a Kafka Fetch waits until any of its partitions has data): it
// calls try until try reports done, and between calls waits, up to wait in
// all, for an append to any of parts. The watches are in place before each
// call of try, so no append between a read and the wait is missed.
//
// The wait holds one [LongPolls] slot. When wait is 0 or every slot is
// taken, try's first answer stands; when wait is over, try has one last
// call. If ctx ends first, LongPoll returns its error (try's last answer
// is whatever it left).
func (l *Log) LongPoll(ctx context.Context, parts []TopicPartition, wait time.Duration, try func() (done bool)) error {
	var deadline <-chan time.Time
	for {
		wake, stop := l.watch(parts)
		if try() || wait <= 0 {
			stop()
			return nil
		}
		if deadline == nil {
			if !l.cfg.LongPolls.TryAcquire(ctx) {
				stop()
				return nil // every long-poll slot (or the client's share) is taken: answer now
			}
			defer l.cfg.LongPolls.Release(ctx)
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
			l.polling.Add(1)
			defer l.polling.Add(-1)
		}
		select {
		case <-wake:
		case <-deadline:
			wait = 0 // one last look, then answer
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
		stop()
	}
}

// Polling is the number of calls waiting in [Log.LongPoll] now.
func (l *Log) Polling() int64 { return l.polling.Load() }

// watch subscribes to every partition of parts; wake receives once any of
// them changes and stop ends the subscriptions. A partition that cannot be
// watched (unknown) is left out: the read answers its error.
func (l *Log) watch(parts []TopicPartition) (wake <-chan struct{}, stop func()) {
	if len(parts) == 1 {
		ch, err := l.store.Watch(parts[0].Topic, parts[0].Partition)
		if err != nil {
			return nil, func() {}
		}
		return ch, func() {}
	}
	w := make(chan struct{}, 1)
	done := make(chan struct{})
	for _, p := range parts {
		ch, err := l.store.Watch(p.Topic, p.Partition)
		if err != nil {
			continue
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
	return w, func() {
		select {
		case <-done:
		default:
			close(done)
		}
	}
}

// dropMarkers removes the transaction markers of recs, in place.
func dropMarkers(recs []Record) []Record {
	out := recs[:0]
	for i := range recs {
		if !recs[i].Control {
			out = append(out, recs[i])
		}
	}
	return out
}
