package changestream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/budget"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// stream is one call's state. It lives on the handler's goroutine and holds
// at most one read batch (or one record and an index cursor in an OSO
// snapshot): never the key set, the backlog or a queue of events.
type stream struct {
	m     *Manager
	ctx   context.Context
	req   Request
	send  Sender
	grant *budget.Grant // the response bytes of the batch being sent
	// sendFailed: the transport refused an event; nothing more is sent.
	sendFailed bool
	prefix     []byte
	hasEnd     bool
	end        int64

	topicID string
	watch   <-chan struct{} // closed at the partition's next change
	ls, hw  int64           // bounds as of the last change seen
	// stable is what may be delivered: the last stable offset as of the
	// last change seen (hw when the partition has no open transaction);
	// aborted is the aborted transactions with markers at or after pos
	// (Config.Transactions), whose records are offset gaps, as markers are.
	stable  int64
	aborted []broker.AbortedTxn

	// Compaction (docs/compaction.md): compacted says the topic's policy includes
	// compact, so P is re-read at each change; purgedBelow is P+1 (0: no
	// tombstone removed), purgedAtStart its value when the call began
	// (the request check covers those). next is the client's committed
	// next offset (its checkpoint, docs/change-streams.md; 0: it holds nothing yet): a tombstone removed
	// during the call at or after it is a deletion the client misses.
	// inOSO pauses the check while an OSO snapshot reads its pinned
	// segment versions.
	compacted     bool
	purgedBelow   int64
	purgedAtStart int64
	next          int64
	inOSO         bool

	pos     int64 // next offset to cover
	memory  bool  // the stream reached the HW once: snapshots are MEMORY
	scanned int64 // [pos, scanned) is known to hold no match (held back)
	heldAt  time.Time
	ev      Event

	// A full backfill in progress, for its duration metric (metrics.go).
	backfillKind string
	backfillAt   time.Time
}

// errEnded stops the loops once stream_end was sent.
var errEnded = errors.New("stream ended")

func (s *stream) run() error {
	ls, hw, err := s.start()
	if err != nil {
		return err
	}
	s.ls, s.hw = ls, hw
	s.pos = max(s.req.StartOffset, ls)
	s.next = s.req.StartOffset
	if err := s.readTxns(); err != nil {
		return s.storeErr(err)
	}
	if s.req.Started != nil {
		s.req.Started()
	}
	cursor, err := s.chooseOSO(ls, hw)
	if err != nil {
		return err
	}
	if cursor != nil {
		err = s.oso(cursor, ls, hw)
		cursor.Close()
	}
	if err == nil {
		err = s.ordered()
	}
	if errors.Is(err, errEnded) {
		return nil
	}
	return err
}

// finish sends stream_end{reason} and flushes; the call then completes
// with status OK.
func (s *stream) finish(reason EndReason) error {
	if err := s.emit(&Event{Kind: EventEnd, Reason: reason}); err != nil {
		return err
	}
	if err := s.flush(); err != nil {
		return err
	}
	return errEnded
}

// flush hands the events the Sender holds to the transport.
func (s *stream) flush() error {
	return s.sendErr(s.send.Flush())
}

func (s *stream) sendErr(err error) error {
	if err == nil {
		return nil
	}
	s.sendFailed = true
	if cerr := s.ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

func (s *stream) emit(ev *Event) error {
	if err := s.sendErr(s.send.Send(ev)); err != nil {
		return err
	}
	if !s.inOSO {
		switch ev.Kind {
		case EventMutation, EventDeletion:
			s.next = ev.Record.Offset + 1
		case EventOffsetAdvanced:
			s.next = ev.Offset + 1
		}
	}
	return nil
}

// interrupted is checked before every event: cancellation, shutdown, and any
// change of the partition (topic deleted or re-created, log start moved).
// It returns errEnded after sending the stream_end the situation calls for.
// next is the offset of the record about to be sent, or -1.
func (s *stream) interrupted(next int64) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	select {
	case <-s.m.stop:
		return s.finish(EndShutdown)
	case <-s.watch:
		if err := s.refresh(); err != nil {
			return err
		}
	default:
	}
	if next >= 0 && next < s.ls {
		return s.finish(EndRollback) // a purge overtook the reader
	}
	if !s.inOSO && s.purgedBelow > s.purgedAtStart && s.next > 0 && s.next < s.purgedBelow {
		// Since the call began, compaction removed a tombstone (at P) at or
		// after the client's next offset: the client would never see that
		// deletion (docs/change-streams.md). Tombstones removed before the call began are
		// covered by the request check, and a client from 0 never held
		// what they deleted.
		return s.finish(EndRollback)
	}
	return nil
}

// refresh re-subscribes and re-reads the bounds after a change, ending the
// stream if the topic is gone or is not the one the call started on.
func (s *stream) refresh() error {
	st, req := s.m.store, &s.req
	w, err := st.Watch(req.Topic, req.Partition)
	if err == nil {
		s.watch = w
		s.ls, s.hw, err = st.Bounds(req.Topic, req.Partition)
	}
	if err == nil {
		err = s.readTxns()
	}
	if err == nil && s.compacted {
		if s.m.idx != nil {
			s.purgedBelow, err = s.m.idx.PurgedTombstonesBelow(req.Topic, req.Partition)
		} else {
			var parts []logstore.PartitionInfo
			if _, parts, err = st.Topic(s.ctx, req.Topic); err == nil && int(req.Partition) < len(parts) {
				s.purgedBelow = parts[req.Partition].PurgedTombstonesBelow
			}
		}
	}
	if err == nil && s.m.idx != nil {
		var id string
		if id, err = s.m.idx.TopicID(req.Topic); err == nil && id != s.topicID {
			err = logstore.ErrUnknownTopic // deleted, and the name re-created
		}
	}
	return s.storeErr(err)
}

// readTxns reads how far the partition's records are committed and its
// aborted transactions from pos on, after s.hw was read. Without
// transactions everything up to s.hw is.
func (s *stream) readTxns() error {
	s.stable, s.aborted = s.hw, nil
	if s.m.cfg.Transactions == nil {
		return nil
	}
	v, err := s.m.cfg.Transactions.ReadCommittedView(s.ctx, s.req.Topic, s.req.Partition, s.pos, math.MaxInt64)
	if err != nil {
		return err
	}
	s.stable, s.aborted = min(s.hw, v.LastStable), v.Aborted
	return nil
}

// abortedIn reports whether an aborted transaction has records in [from, to).
func (s *stream) abortedIn(from, to int64) bool {
	for _, a := range s.aborted {
		if a.FirstOffset < to && a.LastOffset > from {
			return true
		}
	}
	return false
}

// visible reports whether r is a record of the stream: not a transaction
// marker, not a record of an aborted transaction.
func (s *stream) visible(r *logstore.Record) bool {
	if r.Control {
		return false
	}
	if !r.Transactional {
		return true
	}
	for _, a := range s.aborted {
		if a.ProducerID == r.ProducerID && a.FirstOffset <= r.Offset && r.Offset < a.LastOffset {
			return false
		}
	}
	return true
}

// storeErr turns the store errors that end a stream into its stream_end.
func (s *stream) storeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, logstore.ErrUnknownTopic):
		return s.finish(EndTopicDeleted)
	case errors.Is(err, logstore.ErrClosed):
		return s.finish(EndShutdown)
	case errors.Is(err, logstore.ErrOffsetOutOfRange):
		return s.finish(EndRollback)
	}
	return err
}

func (s *stream) matches(key []byte) bool {
	return len(key) > 0 && bytes.HasPrefix(key, s.prefix)
}

// sendRecord sends r as a mutation or a deletion.
func (s *stream) sendRecord(r *logstore.Record) error {
	if err := s.interrupted(r.Offset); err != nil {
		return err
	}
	s.ev = Event{Kind: EventMutation, Record: r}
	if r.Value == nil {
		s.ev.Kind = EventDeletion
	}
	return s.emit(&s.ev)
}

// oso sends the OSO snapshot of [l0, e): each matching key's latest
// record once, in key order, from the index cursor.
func (s *stream) oso(c logstore.KeyCursor, l0, e int64) error {
	req := &s.req
	if err := s.interrupted(-1); err != nil {
		return err
	}
	// A purge between the bounds read and the cursor may have dropped
	// index runs the snapshot needed: such a stream needs records below the
	// log start, so it is overtaken.
	if s.ls > l0 {
		return s.finish(EndRollback)
	}
	if err := s.emit(&Event{Kind: EventOSOStart}); err != nil {
		return err
	}
	s.inOSO = true
	maxSent := int64(-1)
	for c.Next() {
		ent := c.Entry()
		if ent.Offset < l0 {
			continue // every record of the key is below the snapshot's range
		}
		if err := s.interrupted(ent.Offset); err != nil {
			return err
		}
		rec, err := s.readEntry(ent)
		if err != nil {
			return s.storeErr(err)
		}
		if rec.Offset != ent.Offset || !bytes.Equal(rec.Key, ent.Key) {
			return fmt.Errorf("key index of topic %q partition %d points key %q at offset %d, which holds another record",
				req.Topic, req.Partition, ent.Key, ent.Offset)
		}
		if err := s.sendRecord(&rec); err != nil {
			return err
		}
		maxSent = max(maxSent, ent.Offset)
	}
	if err := c.Err(); err != nil {
		return err
	}
	if req.OSO == OSOWithOffsetAdvanced && maxSent < e-1 {
		if err := s.interrupted(-1); err != nil {
			return err
		}
		if err := s.emit(&Event{Kind: EventOffsetAdvanced, Offset: e - 1}); err != nil {
			return err
		}
	}
	if err := s.interrupted(-1); err != nil {
		return err
	}
	if err := s.emit(&Event{Kind: EventOSOEnd}); err != nil {
		return err
	}
	s.inOSO = false
	s.pos, s.next = e, e
	return nil
}

// readEntry reads the record an index entry points at through the key
// index (one pread at the indexed position in the file store).
func (s *stream) readEntry(ent logstore.KeyEntry) (logstore.Record, error) {
	return s.m.idx.ReadEntry(s.ctx, s.req.Topic, s.req.Partition, ent)
}

// ordered sends consecutive ordered snapshots from s.pos, tailing at
// the HW, until end_offset, a stream_end or an error.
func (s *stream) ordered() error {
	for {
		if s.hasEnd && s.pos >= s.end {
			s.caughtUp()
			return s.finish(EndOK)
		}
		if s.pos >= s.stable {
			s.memory = true // what comes next was appended (or committed) after the stream reached the HW
			s.caughtUp()
		}
		if err := s.interrupted(-1); err != nil {
			return err
		}
		if s.pos < s.ls {
			return s.finish(EndRollback)
		}
		if s.pos < s.stable {
			held, err := s.snapshot()
			if err != nil {
				return err
			}
			if !held {
				continue
			}
		}
		if err := s.wait(); err != nil {
			return err
		}
	}
}

// wait blocks until the partition changes, the held-back snapshot is due,
// the server shuts down or the call is cancelled.
func (s *stream) wait() error {
	if err := s.flush(); err != nil {
		return err
	}
	var due <-chan time.Time
	if !s.heldAt.IsZero() {
		t := time.NewTimer(time.Until(s.heldAt.Add(s.m.cfg.HoldBack)))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-s.ctx.Done():
		return s.ctx.Err()
	case <-s.m.stop:
		return s.finish(EndShutdown)
	case <-s.watch:
		return s.refresh()
	case <-due:
		return nil
	}
}

// snapshot sends one ordered snapshot [pos, e]: e is the HW - 1 (the last
// stable offset - 1 while a transaction is open), capped at
// end_offset - 1 and, for DISK, at the end of pos's segment. A live-tail
// range where nothing matches may be held back (held = true) and merged
// with the next one, for at most HoldBack.
func (s *stream) snapshot() (held bool, err error) {
	req := &s.req
	e := s.stable - 1
	if s.hasEnd {
		e = min(e, s.end-1)
	}
	src := SourceMemory
	if !s.memory {
		src = SourceDisk
		segEnd := s.pos + fallbackDiskSpan
		if s.m.idx != nil {
			if segEnd, err = s.m.idx.SegmentEnd(req.Topic, req.Partition, s.pos); err != nil {
				return false, s.storeErr(err)
			}
		}
		e = min(e, max(segEnd, s.pos+1)-1)
	}

	// Find the first match before sending the marker, so that a range with
	// none can be held back (never a matching record).
	from := max(s.pos, s.scanned)
	batch, err := s.findMatch(from, e)
	if err != nil {
		return false, err
	}
	if batch == nil {
		s.scanned = e + 1
		if src == SourceMemory && s.m.cfg.HoldBack > 0 && !(s.hasEnd && e == s.end-1) {
			now := time.Now()
			if s.heldAt.IsZero() {
				s.heldAt = now
			}
			if now.Sub(s.heldAt) < s.m.cfg.HoldBack {
				return true, nil
			}
		}
	}
	if err := s.interrupted(-1); err != nil {
		return false, err
	}
	if err := s.emit(&Event{Kind: EventMarker, Start: s.pos, End: e, Source: src}); err != nil {
		return false, err
	}
	last := int64(-1)
	for batch != nil {
		for i := range batch {
			r := &batch[i]
			if r.Offset > e {
				break
			}
			if s.matches(r.Key) {
				if err := s.sendRecord(r); err != nil {
					return false, err
				}
				last = r.Offset
			}
		}
		next := batch[len(batch)-1].Offset + 1
		batch = nil
		if next <= e {
			if batch, err = s.read(next, e); err != nil {
				return false, err
			}
		}
	}
	if last != e {
		if err := s.interrupted(-1); err != nil {
			return false, err
		}
		if err := s.emit(&Event{Kind: EventOffsetAdvanced, Offset: e}); err != nil {
			return false, err
		}
	}
	s.pos, s.scanned, s.heldAt = e+1, e+1, time.Time{}
	return false, nil
}

// read returns the next batch of [from, e] (at most BatchRecords records
// and about BatchBytes): records from offset from on, which on a compacted
// partition may start later (offsets of removed records are passed over),
// and nil when none is left below the HW.
//
// Each batch draws its bytes from the response budget (internal/budget),
// given back when the next batch is read (the previous one has been handed
// to the transport) or the stream ends; a client at its share waits for
// them, so its stream slows down and no other client's does.
func (s *stream) read(from, e int64) ([]logstore.Record, error) {
	req := &s.req
	s.grant.Release()
	s.grant = nil
	g, err := s.m.cfg.Budget.Reserve(s.ctx, s.m.cfg.BatchBytes, broker.BudgetWait)
	for err == nil && g.Data == 0 {
		select {
		case <-s.m.stop:
			return nil, &apierr.Error{Reason: apierr.Unavailable, Message: "the server is shutting down"}
		default:
		}
		g, err = s.m.cfg.Budget.Reserve(s.ctx, s.m.cfg.BatchBytes, broker.BudgetWait)
	}
	if err != nil {
		return nil, err // the call's context ended
	}
	recs, err := s.m.store.Read(s.ctx, req.Topic, req.Partition, from,
		int(min(int64(s.m.cfg.BatchRecords), e-from+1)), g.Data)
	// Transaction markers (Record.Control; docs/kafka.md "Transactions")
	// and the records of aborted transactions are no records of a stream:
	// offset gaps, read past.
	for err == nil && len(recs) > 0 {
		last := recs[len(recs)-1].Offset
		kept := recs[:0]
		for i := range recs {
			if s.visible(&recs[i]) {
				kept = append(kept, recs[i])
			}
		}
		recs = kept
		if len(recs) > 0 || last >= e {
			break
		}
		recs, err = s.m.store.Read(s.ctx, req.Topic, req.Partition, last+1,
			int(min(int64(s.m.cfg.BatchRecords), e-last)), g.Data)
	}
	if err != nil {
		g.Release()
		return nil, s.storeErr(err)
	}
	n := 0
	for i := range recs {
		n += recs[i].Size()
	}
	g.Settle(n, len(recs))
	s.grant = g
	if len(recs) == 0 {
		return nil, nil // compaction removed every record from here to the HW
	}
	return recs, nil
}

// findMatch reads [from, e] until a matching record and returns the batch
// from it on, or nil if nothing matches.
func (s *stream) findMatch(from, e int64) ([]logstore.Record, error) {
	// The scan may read far before it sends again: what is held goes now.
	if err := s.flush(); err != nil {
		return nil, err
	}
	for from <= e {
		if err := s.interrupted(-1); err != nil { // a long scan still notices a shutdown or deletion
			return nil, err
		}
		batch, err := s.read(from, e)
		if err != nil || batch == nil {
			return nil, err
		}
		for i := range batch {
			if batch[i].Offset > e {
				return nil, nil
			}
			if s.matches(batch[i].Key) {
				return batch[i:], nil
			}
		}
		from = batch[len(batch)-1].Offset + 1
	}
	return nil, nil
}
