package broker

// The partition side of Kafka transactions (docs/kafka.md "Transactions"):
// a transactional producer's records are written as an idempotent
// producer's, marked Transactional; the transaction coordinator ends the
// producer's transaction on each partition it wrote to with a marker
// (WriteTxnMarker), a Control record of the producer that occupies one
// offset, as Kafka's control batch. Like the idempotent producer's state,
// what a partition knows of its transactions is rebuilt from the log
// (producerState, idempotence.go): the open transactions (a producer's
// first transactional offset after its last marker), hence the last
// stable offset (the first offset of the oldest open transaction, else
// the high watermark), and the aborted transactions (producer, first
// offset, marker offset) a read-committed Kafka consumer needs to drop
// their records.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// AbortedTxn is an aborted transaction of a partition: its producer, the
// offset of its first record there and the offset of its abort marker.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
	LastOffset  int64
}

// Marker value layout: the Kafka control record's key (i16 version 0, i16
// type: 0 abort, 1 commit) then its value (i16 version 0, i32 coordinator
// epoch). The Kafka listener sends these bytes as the control record's key
// and value.
const markerLen = 4 + 6

// MarkerValue is the stored value of a marker (commit or abort).
func MarkerValue(commit bool, coordinatorEpoch int32) []byte {
	b := make([]byte, markerLen)
	if commit {
		b[3] = 1
	}
	binary.BigEndian.PutUint32(b[6:], uint32(coordinatorEpoch))
	return b
}

// MarkerKeyValue splits a marker's stored value into the Kafka control
// record's key and value; ok is false for a value that is no marker's.
func MarkerKeyValue(v []byte) (key, value []byte, ok bool) {
	if len(v) != markerLen {
		return nil, nil, false
	}
	return v[:4], v[4:], true
}

// markerCommits reports whether a marker's value is a commit.
func markerCommits(v []byte) bool { return len(v) == markerLen && v[3] == 1 }

// applyTxn records r's transaction fields in the state (the record's
// producer fields are applied by apply). Each offset is applied once.
func (st *producerState) applyTxn(r *logstore.Record) {
	if r.Offset < st.txnNext {
		return
	}
	st.txnNext = r.Offset + 1
	if !r.Transactional {
		return
	}
	if st.open == nil {
		st.open = map[int64]int64{}
	}
	first, open := st.open[r.ProducerID]
	if !r.Control {
		if !open {
			st.open[r.ProducerID] = r.Offset
		}
		return
	}
	if !open {
		return
	}
	delete(st.open, r.ProducerID)
	if !markerCommits(r.Value) {
		st.aborted = append(st.aborted, AbortedTxn{ProducerID: r.ProducerID, FirstOffset: first, LastOffset: r.Offset})
	}
}

// lso is the partition's last stable offset with its state caught up to
// hw.
func (st *producerState) lso(hw int64) int64 {
	lso := hw
	for _, first := range st.open {
		lso = min(lso, first)
	}
	return lso
}

// prune forgets the aborted transactions whose markers are below the log
// start: no fetch can reach them.
func (st *producerState) prune(logStart int64) {
	i := sort.Search(len(st.aborted), func(i int) bool { return st.aborted[i].LastOffset >= logStart })
	if i > 0 {
		st.aborted = append(st.aborted[:0], st.aborted[i:]...)
	}
}

// TxnView is what a read-committed reader of a partition needs: its last
// stable offset and high watermark, and the aborted transactions whose
// markers are at or after from and whose first records are before to.
type TxnView struct {
	LastStable    int64
	HighWatermark int64
	LogStart      int64
	Aborted       []AbortedTxn
}

// ReadCommittedView reads the partition's transaction state (catching it
// up with the log) and returns its last stable offset and the aborted
// transactions that overlap [from, to). The partition must be served
// here.
func (l *Log) ReadCommittedView(ctx context.Context, topic string, part int32, from, to int64) (TxnView, error) {
	info, err := l.store.TopicInfo(ctx, topic)
	if err != nil {
		return TxnView{}, partitionErr(err, topic, part)
	}
	if err := checkPartition(info, part); err != nil {
		return TxnView{}, err
	}
	st := l.producerStateOf(info.ID, part)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := l.catchUp(ctx, st, topic, part); err != nil {
		return TxnView{}, partitionErr(err, topic, part)
	}
	logStart, _, err := l.store.Bounds(topic, part)
	if err != nil {
		return TxnView{}, partitionErr(err, topic, part)
	}
	st.prune(logStart)
	v := TxnView{LastStable: st.lso(st.scanned), HighWatermark: st.scanned, LogStart: logStart}
	for _, a := range st.aborted {
		if a.LastOffset >= from && a.FirstOffset < to {
			v.Aborted = append(v.Aborted, a)
		}
	}
	return v, nil
}

// LastStableOffset is the partition's last stable offset: the first
// offset of its oldest open transaction, else its high watermark.
func (l *Log) LastStableOffset(ctx context.Context, topic string, part int32) (int64, error) {
	v, err := l.ReadCommittedView(ctx, topic, part, 0, 0)
	return v.LastStable, err
}

// WriteTxnMarker ends producer pid's open transaction on the partition
// with a commit or abort marker at epoch (the coordinator's current epoch
// of the producer, which fences older epochs on the partition as a batch
// of that epoch would). A partition with no open transaction of pid gets
// no marker (nothing to end: the transaction wrote nothing there, or a
// marker was written before a crash), so the coordinator may write its
// markers again after a crash. The partition must be served here (single
// node, or this instance's own partitions).
func (l *Log) WriteTxnMarker(ctx context.Context, topic string, part int32, pid int64, epoch int16, commit bool, coordinatorEpoch int32) error {
	if err := validProducer(pid, epoch); err != nil {
		return err
	}
	info, err := l.store.TopicInfo(ctx, topic)
	if err != nil {
		if errors.Is(err, logstore.ErrUnknownTopic) {
			return nil // deleted with its open transaction: nothing left to end
		}
		return partitionErr(err, topic, part)
	}
	if part < 0 || part >= info.Partitions {
		return nil
	}
	hold, _, err := l.owner(ctx, topic, part)
	if err != nil {
		return err
	}
	if hold == nil {
		return apierr.New(apierr.NotOwner, "transaction markers of %s-%d are written at its owner", topic, part)
	}
	st := l.producerStateOf(info.ID, part)
	st.mu.Lock()
	err = l.writeMarker(ctx, st, topic, part, pid, epoch, commit, coordinatorEpoch)
	st.mu.Unlock()
	hold.Release(err)
	return err
}

func (l *Log) writeMarker(ctx context.Context, st *producerState, topic string, part int32, pid int64, epoch int16, commit bool, coordinatorEpoch int32) error {
	if err := l.catchUp(ctx, st, topic, part); err != nil {
		return err
	}
	if _, open := st.open[pid]; !open {
		if e := st.producers[pid]; e != nil && epoch > e.epoch {
			// Still fence the older epoch here: its zombie must not start
			// a transaction on this partition after the coordinator moved on.
			e.epoch, e.runs = epoch, nil
		}
		return nil
	}
	rec := []logstore.Record{{
		Timestamp: time.Now().UnixMilli(), Value: MarkerValue(commit, coordinatorEpoch),
		ProducerID: pid, ProducerEpoch: epoch, Sequence: -1, Transactional: true, Control: true,
	}}
	base, err := l.store.Append(ctx, topic, part, rec)
	if err != nil {
		st.resync = true
		return fmt.Errorf("write the transaction marker of producer %d on %s-%d: %w", pid, topic, part, err)
	}
	if base == st.scanned {
		rec[0].Offset = base
		st.apply(&rec[0])
		st.scanned = base + 1
	}
	return nil
}

// readCommitted is readPartition for a read-committed reader (Fetch with
// ReadCommitted): the records of [offset, last stable offset) without
// markers and without the records of aborted transactions, which are
// offset gaps as markers are. A read that finds only those reads on after
// them and answers no records only when it reaches the last stable offset.
func (l *Log) readCommitted(ctx context.Context, topic string, part int32, offset int64, maxRecords int, limit func() (int, error)) (Fetched, error) {
	v, err := l.ReadCommittedView(ctx, topic, part, offset, math.MaxInt64)
	if err != nil {
		return Fetched{HighWatermark: -1, LogStartOffset: -1}, err
	}
	out := Fetched{HighWatermark: v.HighWatermark, LogStartOffset: v.LogStart, LastStableOffset: v.LastStable}
	if offset < v.LogStart || offset > v.HighWatermark {
		return out, outOfRange(offset, v.LogStart, v.HighWatermark)
	}
	if offset >= v.LastStable || maxRecords <= 0 {
		return out, nil
	}
	maxBytes, err := limit()
	if err != nil || maxBytes <= 0 {
		return out, err
	}
	for from := offset; from < v.LastStable; {
		n := int(min(int64(maxRecords), v.LastStable-from))
		recs, err := l.store.Read(ctx, topic, part, from, n, maxBytes)
		if err != nil {
			if errors.Is(err, logstore.ErrOffsetOutOfRange) {
				if logStart, hw, berr := l.store.Bounds(topic, part); berr == nil {
					out.LogStartOffset, out.HighWatermark = logStart, hw
					return out, outOfRange(offset, logStart, hw)
				}
			}
			return out, partitionErr(err, topic, part)
		}
		if len(recs) == 0 {
			break // compaction removed every record from here on
		}
		from = recs[len(recs)-1].Offset + 1
		kept := recs[:0]
		for i := range recs {
			if r := &recs[i]; r.Offset < v.LastStable && !r.Control && !abortedRecord(v.Aborted, r) {
				kept = append(kept, *r)
			}
		}
		if len(kept) > 0 {
			out.Records = kept
			break
		}
	}
	return out, nil
}

// abortedRecord reports whether r is a record of one of the aborted
// transactions (ReadCommittedView's list).
func abortedRecord(aborted []AbortedTxn, r *logstore.Record) bool {
	if !r.Transactional {
		return false
	}
	for _, a := range aborted {
		if a.ProducerID == r.ProducerID && a.FirstOffset <= r.Offset && r.Offset < a.LastOffset {
			return true
		}
	}
	return false
}
