package broker

// The idempotent producer (docs/produce.md "Idempotent produce"), as
// Kafka's (KIP-98): a producer gets an id from InitProducer and numbers
// the records it sends to each partition 0, 1, 2, …; per partition the
// broker remembers the last batches of each producer, so that
//   - a batch that was appended before (a resend after an unknown outcome)
//     is answered with its original offsets and not appended again;
//   - a batch that does not start at the number after the producer's last
//     is OUT_OF_ORDER_SEQUENCE_NUMBER (a batch in between was lost);
//   - a batch with an older epoch than the partition has seen is
//     INVALID_PRODUCER_EPOCH.
//
// The state is rebuilt from the log, never kept beside it: every record of
// an idempotent batch carries its producer id, epoch and sequence number
// (logstore.Record, stored in the record's frame), and a partition's state
// is read from the log the first time this instance checks a batch of it,
// then brought up to date with whatever was appended since (by this
// instance without a producer, or by another instance that owned the
// partition meanwhile) before each check. So it holds after a SIGKILL
// (the records that are in the log are the batches that were appended)
// and after a failover (the new owner reads what the old one wrote).
//
// Cost: the first idempotent batch of a partition after a start reads the
// partition from its log start (as a new Kafka broker without producer
// snapshots does); idempotent batches of one partition are checked and
// appended one at a time.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// ProducerBatches is how many of a producer's last batches each partition
// remembers, as Kafka (max.in.flight.requests.per.connection <= 5).
const ProducerBatches = 5

// Idempotence is an idempotent produce: the producer's id and epoch
// (InitProducer) and, per partition the call writes to, the sequence
// number of its first record there.
type Idempotence struct {
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  map[int32]int32
}

// seqSpace is the size of the sequence space: sequence numbers wrap from
// math.MaxInt32 to 0, as Kafka's.
const seqSpace = int64(math.MaxInt32) + 1

// seqAdd is s + n in the sequence space.
func seqAdd(s int32, n int64) int32 {
	return int32((int64(s) + n) % seqSpace)
}

// seqDist is how far b is after a in the sequence space, in [0, seqSpace).
func seqDist(a, b int32) int64 {
	return ((int64(b)-int64(a))%seqSpace + seqSpace) % seqSpace
}

// seqRun is records of one producer and epoch with consecutive sequence
// numbers at consecutive offsets: one batch, or batches that followed each
// other in the log (as rebuilt from it, they cannot be told apart and
// need not be: sequence first+i is at offset base+i either way).
type seqRun struct {
	first int32 // sequence of the first record
	base  int64 // offset of the first record
	n     int64 // records
}

// producerEntry is what a partition remembers of one producer.
type producerEntry struct {
	epoch int16
	runs  []seqRun // the last ProducerBatches, oldest first
}

// producerState is one partition's producers. mu serialises the
// idempotent appends of the partition (check, append, record) and guards
// the fields.
type producerState struct {
	mu        sync.Mutex
	scanned   int64 // offsets below this were read into producers
	resync    bool  // an append's outcome is unknown: re-read the store's end first
	producers map[int64]*producerEntry
	// The partition's transactions (transactions.go): txnNext is the
	// offset after the last one applied to them, open the first offset of
	// each producer's open transaction, aborted the aborted transactions
	// in marker order.
	txnNext int64
	open    map[int64]int64
	aborted []AbortedTxn
}

type partitionKey struct {
	topicID string
	part    int32
}

// producerStateOf is the state of one incarnation of a partition.
func (l *Log) producerStateOf(topicID string, part int32) *producerState {
	k := partitionKey{topicID, part}
	if st, ok := l.producers.Load(k); ok {
		return st.(*producerState)
	}
	st, _ := l.producers.LoadOrStore(k, &producerState{producers: map[int64]*producerEntry{}})
	return st.(*producerState)
}

// apply records r (at r.Offset) in the state.
func (st *producerState) apply(r *logstore.Record) {
	if r.ProducerID == 0 {
		return
	}
	st.applyTxn(r)
	e := st.producers[r.ProducerID]
	if r.Control {
		// A marker numbers nothing; a newer epoch's fences the older.
		switch {
		case e == nil:
			st.producers[r.ProducerID] = &producerEntry{epoch: r.ProducerEpoch}
		case r.ProducerEpoch > e.epoch:
			e.epoch, e.runs = r.ProducerEpoch, nil
		}
		return
	}
	switch {
	case e == nil:
		e = &producerEntry{epoch: r.ProducerEpoch}
		st.producers[r.ProducerID] = e
	case r.ProducerEpoch > e.epoch:
		e.epoch, e.runs = r.ProducerEpoch, nil
	case r.ProducerEpoch < e.epoch:
		return // written before the producer was fenced; never refused retroactively
	}
	if k := len(e.runs); k > 0 {
		last := &e.runs[k-1]
		if r.Offset < last.base+last.n {
			return // applied already (read back after this instance appended it)
		}
		if r.Offset == last.base+last.n && r.Sequence == seqAdd(last.first, last.n) {
			last.n++
			return
		}
	}
	e.runs = append(e.runs, seqRun{first: r.Sequence, base: r.Offset, n: 1})
	if len(e.runs) > ProducerBatches {
		e.runs = append(e.runs[:0], e.runs[len(e.runs)-ProducerBatches:]...)
	}
}

// check judges a batch of n records from producer pid at epoch, starting
// at sequence first: dup is true with the original base offset when it
// was appended before; an error is the batch's refusal.
func (st *producerState) check(pid int64, epoch int16, first int32, n int64) (base int64, dup bool, err error) {
	e := st.producers[pid]
	switch {
	case e == nil:
		// Nothing of this producer is in the partition (or it was purged):
		// any sequence starts it, as in Kafka.
		return 0, false, nil
	case epoch < e.epoch:
		return 0, false, apierr.New(apierr.InvalidProducerEpoch,
			"producer %d epoch %d is older than epoch %d this partition has seen", pid, epoch, e.epoch)
	case epoch > e.epoch:
		if first != 0 {
			return 0, false, apierr.New(apierr.OutOfOrderSequenceNumber,
				"producer %d: a new epoch %d must start at sequence 0, got %d", pid, epoch, first)
		}
		return 0, false, nil
	}
	for _, r := range e.runs {
		if d := seqDist(r.first, first); d < r.n {
			if d+n > r.n {
				return 0, false, apierr.New(apierr.OutOfOrderSequenceNumber,
					"producer %d: sequences %d..%d overlap an appended batch but go beyond it (it ends at %d)",
					pid, first, seqAdd(first, n-1), seqAdd(r.first, r.n-1))
			}
			return r.base + d, true, nil
		}
	}
	if len(e.runs) == 0 {
		// Only a marker of this epoch is here (the coordinator's fence):
		// the producer's first batch of the epoch may start anywhere.
		return 0, false, nil
	}
	last := e.runs[len(e.runs)-1]
	if want := seqAdd(last.first, last.n); first != want {
		return 0, false, apierr.New(apierr.OutOfOrderSequenceNumber,
			"producer %d: expected sequence %d on this partition, got %d (a batch is missing, or a resend is older than the last %d batches)",
			pid, want, first, ProducerBatches)
	}
	return 0, false, nil
}

// catchUp reads into st what the partition holds from st.scanned to its
// high watermark. Damaged records are stepped over: they cannot be
// duplicates of anything a client can still resend.
func (l *Log) catchUp(ctx context.Context, st *producerState, topic string, part int32) error {
	if st.resync && l.cfg.Resync != nil {
		if err := l.cfg.Resync(ctx, topic, part); err != nil {
			return err
		}
	}
	st.resync = false
	logStart, hw, err := l.store.Bounds(topic, part)
	if err != nil {
		return err
	}
	next := max(st.scanned, logStart)
	for next < hw {
		recs, err := l.store.Read(ctx, topic, part, next, MaxFetchRecords, 4<<20)
		for i := range recs {
			st.apply(&recs[i])
			next = recs[i].Offset + 1
		}
		var ce *logstore.CorruptError
		switch {
		case errors.As(err, &ce):
			next = max(next, ce.To+1)
		case errors.Is(err, logstore.ErrOffsetOutOfRange):
			// Purged meanwhile: go on from the new log start.
			if logStart, _, err = l.store.Bounds(topic, part); err != nil {
				return err
			}
			next = max(next, logStart)
		case err != nil:
			return err
		case len(recs) == 0:
			return fmt.Errorf("topic %q partition %d: no records at offset %d below the high watermark %d: %w", topic, part, next, hw, logstore.ErrStorage)
		}
	}
	st.scanned = max(st.scanned, next)
	return nil
}

// appendIdempotent appends one partition's idempotent batch here, under
// the partition's hold: every record carries the same producer id and
// epoch and consecutive sequence numbers. A resend of an appended batch
// answers its original base offset.
func (l *Log) appendIdempotent(ctx context.Context, topic string, part int32, recs []logstore.Record) (int64, error) {
	info, err := l.store.TopicInfo(ctx, topic)
	if err != nil {
		return 0, err
	}
	pid, epoch, first := recs[0].ProducerID, recs[0].ProducerEpoch, recs[0].Sequence
	for i := range recs {
		r := &recs[i]
		if r.ProducerID != pid || r.ProducerEpoch != epoch || r.Sequence != seqAdd(first, int64(i)) {
			return 0, apierr.Invalid("records[%d] of an idempotent batch: producer %d epoch %d sequence %d; the batch is producer %d epoch %d from sequence %d",
				i, r.ProducerID, r.ProducerEpoch, r.Sequence, pid, epoch, first)
		}
	}
	st := l.producerStateOf(info.ID, part)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := l.catchUp(ctx, st, topic, part); err != nil {
		return 0, err
	}
	if base, dup, err := st.check(pid, epoch, first, int64(len(recs))); err != nil || dup {
		return base, err
	}
	base, err := l.store.Append(ctx, topic, part, recs)
	if err != nil {
		// The records may be in the log (a replicated store that lost the
		// answer): the next check re-reads the store's end first.
		st.resync = true
		return 0, err
	}
	if base == st.scanned {
		for i := range recs {
			r := recs[i]
			r.Offset = base + int64(i)
			st.apply(&r)
		}
		st.scanned = base + int64(len(recs))
	}
	// Otherwise records this state has not read lie before the batch: the
	// next catch-up reads them and the batch in log order.
	return base, nil
}

// forgetProducers drops the producer state of a deleted topic.
func (l *Log) forgetProducers(topicID string) {
	l.producers.Range(func(k, _ any) bool {
		if k.(partitionKey).topicID == topicID {
			l.producers.Delete(k)
		}
		return true
	})
}
