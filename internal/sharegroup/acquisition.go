package sharegroup

import (
	"context"
	"errors"
	"math"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Acquisition: a share-partition hands records to a fetch. See
// doc.go "State machine" and "Fetch".

// budget is what is left of one response's limits, shared by its partitions.
type budget struct {
	records int
	bytes   int64
	first   bool  // nothing taken yet: the first record is taken even if larger
	stopped bool  // a record did not fit: acquisition for the response stops
	mbytes  int64 // bytes toward min_bytes, a record counting at least 1
}

func (b *budget) exhausted() bool { return b.records <= 0 || b.stopped }

type planKind uint8

const (
	planTake       planKind = iota
	planArchive             // no record at the offset (compaction)
	planLimit               // count at the limit (lowered): archived, or ARCHIVING with a dead-letter topic
	planUnreadable          // the log cannot read these offsets: archived, logged, counted
	planWait                // a record that waits (keyorder.go): AVAILABLE, in the window, not acquired
)

type planItem struct {
	first, last int64
	availAt     int64 // planWait: until when (0: until its key is free)
	count       int16 // planTake, planWait: count before the acquisition
	kind        planKind
}

// keyedOff is a keyed record a scan planned to take or to wait, for the
// key index (keyorder.go).
type keyedOff struct {
	off int64
	key string
}

// partFetch is one session partition's part of a fetch.
type partFetch struct {
	sp       *sharePartition
	code     apierr.Reason
	msg      string
	records  []logstore.Record
	acquired []AcquiredRange
	plan     []planItem
	keyed    []keyedOff
}

func (f *partFetch) fail(code apierr.Reason, msg string) {
	f.code, f.msg = code, msg
	f.records, f.acquired = nil, nil
}

func (f *partFetch) resetResult() {
	f.code, f.msg, f.records, f.acquired = apierr.None, "", f.records[:0], f.acquired[:0]
}

// storeCode maps a log-store error on a partition to its error code.
func storeCode(err error) (apierr.Reason, string) {
	switch {
	case errors.Is(err, logstore.ErrUnknownTopic):
		return apierr.UnknownTopicOrPartition, "topic or partition does not exist"
	case errors.Is(err, logstore.ErrCorrupt):
		return apierr.KafkaStorageError, "log read failed: corrupt record"
	case errors.Is(err, logstore.ErrOffline):
		return apierr.KafkaStorageError, "partition offline: its files failed validation at start (see the server log and docs/operations.md)"
	case errors.Is(err, logstore.ErrClosed):
		return apierr.KafkaStorageError, "log store closed"
	}
	return apierr.KafkaStorageError, "storage error"
}

// acquire takes what the partition can give within bud for session s, or
// with dry only counts it (the long-poll evaluation). Partition
// errors go to out; the returned error is the caller's context ending.
func (p *sharePartition) acquire(ctx context.Context, s *session, bud *budget, dry bool, out *partFetch) error {
	m := p.g.m
	stale := false
	defer func() { // after the unlock below: TopicDeleted takes p.mu
		if stale {
			m.TopicDeleted(p.topicID)
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if p.status == spDropped {
			out.fail(p.droppedResult())
			return nil
		}
		if p.offline != "" {
			out.fail(apierr.KafkaStorageError, p.offline)
			return nil
		}
		if p.topicGone(ctx) {
			stale = true
			out.fail(apierr.UnknownTopicOrPartition, "topic was deleted")
			return nil
		}
		ls, hw, err := m.store.Bounds(p.topic, p.part)
		if err != nil {
			out.fail(storeCode(err))
			return nil
		}
		if code, msg := p.ensureDurable(); code != apierr.None {
			out.fail(code, msg)
			return nil
		}
		if p.status == spUninit {
			if err := p.initialize(ctx, ls, hw); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				m.log.Warn("share-partition initialisation failed", "group", p.g.id, "partition", p.String(), "err", err)
				out.fail(apierr.KafkaStorageError, "initialisation failed")
				return nil
			}
		}
		now := m.now()
		p.prepare(ls, now)
		switch cfg := p.g.config(); {
		case !cfg.orderKey:
			if p.keys != nil {
				p.clearKeyWait()
				p.keys = nil
			}
		case p.keys == nil:
			if err := p.buildKeys(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				out.fail(storeCode(err))
				return nil
			}
		}
		if !dry {
			// Register ownership before acquiring, atomically with the
			// "not ended" check: a session end that follows will find
			// this partition and release what we take.
			s.Mu.Lock()
			ended := s.EndedLocked()
			if !ended {
				s.State.held[p] = struct{}{}
			}
			s.Mu.Unlock()
			if ended {
				return nil
			}
		}
		var aborted []AbortedTxn
		if tx := m.opts.Transactions; tx != nil && p.g.config().readCommitted && hw > p.spso {
			// Read committed: up to the last stable offset, without the
			// aborted transactions' records (docs/kafka.md "Transactions").
			lso, ab, err := tx.ReadCommitted(ctx, p.topic, p.part, p.spso, hw)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				out.fail(apierr.KafkaStorageError, "the partition's transactions cannot be read: "+err.Error())
				return nil
			}
			hw, aborted = min(hw, lso), ab
		}
		save := *bud
		err = p.scan(ctx, hw, now, aborted, bud, dry, out)
		if err == nil {
			if !dry {
				p.commit(s.ID(), now, out)
			}
			return nil
		}
		*bud = save
		out.resetResult()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, logstore.ErrOffsetOutOfRange) && attempt < 3:
			continue // the log start moved under us: apply it and rescan
		}
		out.fail(storeCode(err))
		return nil
	}
}

// scan plans the acquisition: it walks AVAILABLE runs of [SPSO, SPEO] and
// then the new offsets after SPEO, reading the records to size them. The
// record-lock limit L bounds only the new offsets (up to SPSO + L), as
// Kafka's in-flight limit does: records already in flight stay acquirable
// after L is lowered, so RELEASEd records above the new SPSO + L are
// delivered again rather than stranded. Records that wait (a backoff, a
// deliver-at time) are passed over and widen that bound by their number,
// up to waitingFactor x L; an ORDERING_KEY group charges L with acquired
// records only (takeNewOrdered). mu is held; nothing durable changes yet (wakeKeys
// only clears memory marks).
func (p *sharePartition) scan(ctx context.Context, hw, now int64, aborted []AbortedTxn, bud *budget, dry bool, out *partFetch) error {
	cfg := p.g.config()
	sc := &scanState{now: now, hw: hw, wallMs: p.g.m.wallMs(), ord: p.keys, dry: dry, maxSkip: waitingFactor * cfg.maxLocks, abortedTxns: aborted}
	if sc.ord != nil {
		sc.pending = map[string]int64{}
		sc.ord.prune(p, 2*(cfg.maxLocks+sc.maxSkip)+1024)
		p.wakeKeys()
	}
	out.plan, out.keyed = out.plan[:0], out.keyed[:0]
	start := bud.records
	for i := 0; i < len(p.runs) && !bud.exhausted(); i++ {
		r := p.runs[i]
		if r.first >= hw {
			break
		}
		if r.state != stAvailable {
			continue
		}
		hi := min(r.last, hw-1)
		if r.availAt > now {
			sc.skipped += hi - r.first + 1
			continue
		}
		if r.count >= cfg.limit {
			// Over the limit after it was lowered: archived by
			// this scan, never delivered.
			if !dry {
				out.plan = append(out.plan, planItem{first: r.first, last: hi, count: r.count, kind: planLimit})
			}
			continue
		}
		if sc.ord != nil && r.keyWait {
			// Known to wait for their keys (keyorder.go): passed over unread.
			sc.skipped += hi - r.first + 1
			continue
		}
		if err := p.take(ctx, r.first, hi, r.count, bud, dry, sc, false, out); err != nil {
			return err
		}
	}
	if sc.ord != nil {
		return p.takeNewOrdered(ctx, hw, start, bud, dry, sc, out)
	}
	lim := min(p.spso+cfg.maxLocks+min(sc.skipped, sc.maxSkip), hw)
	if !bud.exhausted() && p.speo+1 < lim {
		return p.take(ctx, p.speo+1, lim-1, 0, bud, dry, sc, true, out)
	}
	return nil
}

// takeNewOrdered takes new offsets (after SPEO) for an ORDERING_KEY
// group, where the record-lock limit L counts only acquired records
// (docs/queues.md "The window"): records waiting for their keys and the
// terminal records past SPSO are not charged, so a key that holds the SPSO
// back does not starve the others. The window still ends (waitingFactor+1)
// x L offsets past SPSO, which bounds the memory a busy key can make the
// share-partition hold. start is the budget's record count before this
// scan. mu is held.
func (p *sharePartition) takeNewOrdered(ctx context.Context, hw int64, start int, bud *budget, dry bool, sc *scanState, out *partFetch) error {
	cfg := p.g.config()
	lim := min(p.spso+(waitingFactor+1)*cfg.maxLocks, hw)
	if bud.exhausted() || p.speo+1 >= lim {
		return nil
	}
	var held int64
	for i := range p.runs {
		if r := &p.runs[i]; r.state == stAcquired {
			held += r.last - r.first + 1
		}
	}
	room := cfg.maxLocks - held - int64(start-bud.records)
	if room <= 0 {
		return nil
	}
	save := bud.records
	bud.records = int(min(int64(save), room))
	clamp := bud.records
	err := p.take(ctx, p.speo+1, lim-1, 0, bud, dry, sc, false, out)
	bud.records = save - (clamp - bud.records)
	return err
}

// take plans the acquisition of AVAILABLE offsets [a, b] of count c. An
// offset without a record (compaction) is planned for archiving, and so is
// an offset the log cannot read (a corrupt record): it is archived, logged
// and counted rather than failing every acquisition of the group forever.
// A record that waits (keyorder.go) is planned as waiting; with grow (the
// new offsets) each one moves b one further, within hw and sc.maxSkip.
func (p *sharePartition) take(ctx context.Context, a, b int64, c int16, bud *budget, dry bool, sc *scanState, grow bool, out *partFetch) error {
	store := p.g.m.store
	off := a
	end := b // reads stop here: before an unreadable range seen ahead
	for off <= b && !bud.exhausted() {
		maxBytes := bud.bytes
		if bud.first {
			maxBytes = max(maxBytes, 1)
		}
		if maxBytes <= 0 {
			bud.stopped = true
			return nil
		}
		n := min(end-off+1, int64(bud.records))
		recs, err := store.Read(ctx, p.topic, p.part, off, int(n), int(min(maxBytes, math.MaxInt32)))
		if err != nil {
			if !errors.Is(err, logstore.ErrCorrupt) {
				return err
			}
			from, to, ok := corruptRange(err)
			if ok && from > off && from <= end {
				end = from - 1 // take what precedes the damage first
				continue
			}
			if !ok && end > off {
				end = off // no range: find out whether off itself is unreadable
				continue
			}
			if !ok || from > off || to < off {
				from, to = off, off // no usable range: just this offset
			}
			last := min(to, b)
			if !dry {
				out.plan = appendPlan(out.plan, planItem{first: off, last: last, kind: planUnreadable})
			}
			off, end = last+1, b
			continue
		}
		taken, pastEnd := 0, len(recs) == 0
		for i := range recs {
			rec := &recs[i]
			if rec.Offset > end {
				pastEnd = true
				break
			}
			if rec.Offset > off {
				if !dry {
					out.plan = appendPlan(out.plan, planItem{first: off, last: rec.Offset - 1, kind: planArchive})
				}
				off = rec.Offset
			}
			if rec.Control || sc.aborted(rec) {
				// A transaction marker is never a record to deliver, nor,
				// read committed, an aborted transaction's record: archived
				// as an offset without a record is (docs/kafka.md
				// "Transactions").
				if !dry {
					out.plan = appendPlan(out.plan, planItem{first: off, last: off, kind: planArchive})
				}
				off++
				continue
			}
			if wait, at := p.wait(rec, sc); wait {
				sc.skipped++
				p.noteKey(rec, sc, dry, out)
				if !dry {
					out.plan = append(out.plan, planItem{first: off, last: off, count: c, availAt: at, kind: planWait})
				}
				if grow && sc.skipped <= sc.maxSkip && b < sc.hw-1 {
					b++ // a waiting record does not count toward the limit
				}
				off++
				continue
			}
			sz := int64(rec.Size())
			if !bud.first && sz > bud.bytes {
				bud.stopped = true
				break
			}
			bud.first = false
			bud.records--
			bud.bytes -= sz
			bud.mbytes += max(sz, 1)
			p.noteKey(rec, sc, dry, out)
			if !dry {
				out.plan = appendPlan(out.plan, planItem{first: off, last: off, count: c, kind: planTake})
				if taken != i {
					recs[taken] = *rec // records waiting in between are left out
				}
			}
			taken++
			off++
			if bud.exhausted() {
				break
			}
		}
		if !dry && taken > 0 {
			if len(out.records) == 0 {
				out.records = recs[:taken:taken]
			} else {
				out.records = append(out.records, recs[:taken]...)
			}
		}
		if bud.exhausted() {
			return nil
		}
		if off > end {
			end = b // read up to the damage: go on from it
			continue
		}
		if pastEnd {
			if off <= end && !dry {
				out.plan = appendPlan(out.plan, planItem{first: off, last: end, kind: planArchive})
			}
			if end == b {
				return nil
			}
			off, end = end+1, b // on to the unreadable range
		}
	}
	return nil
}

// noteKey records, in an ORDERING_KEY group, that the scan saw rec's key
// at rec's offset (taken or waiting): the first of a key in this scan is
// pending, and the commit adds every one to the index. mu is held.
func (p *sharePartition) noteKey(rec *logstore.Record, sc *scanState, dry bool, out *partFetch) {
	if sc.ord == nil || rec.Key == nil {
		return
	}
	if _, known := sc.ord.keyOf[rec.Offset]; known {
		return
	}
	key := string(rec.Key)
	if _, ok := sc.pending[key]; !ok {
		if _, busy := sc.ord.head(p, key); !busy {
			sc.pending[key] = rec.Offset
		}
	}
	if !dry {
		out.keyed = append(out.keyed, keyedOff{off: rec.Offset, key: key})
	}
}

// appendPlan appends it, extending the previous item when it continues it.
func appendPlan(plan []planItem, it planItem) []planItem {
	if n := len(plan); n > 0 {
		l := &plan[n-1]
		if l.kind == it.kind && l.count == it.count && l.last+1 == it.first {
			l.last = it.last
			return plan
		}
	}
	return append(plan, it)
}

// commit applies a plan: archivals, then the acquisitions (count +1, owner,
// deadline), and builds acquired_records. mu is held.
func (p *sharePartition) commit(sid uint64, now int64, out *partFetch) {
	cfg := p.g.config()
	deadline := now + cfg.lockDur
	var archived []sharestate.Range
	took, deadLetter, waits := false, false, false
	if x := p.keys; x != nil {
		for _, k := range out.keyed {
			x.add(k.key, k.off)
			if len(x.byKey[k.key]) > 1 {
				x.waitKeys[k.key] = struct{}{}
			}
		}
	}
	for _, it := range out.plan {
		switch it.kind {
		case planLimit:
			v := archivedRun(it.first, it.last, it.count, cfg)
			p.setRange(it.first, it.last, v)
			archived = append(archived, v.durable())
			deadLetter = deadLetter || v.state == stArchiving
		case planArchive, planUnreadable:
			p.setRange(it.first, it.last, run{state: stArchived})
			archived = append(archived, sharestate.Range{First: it.first, Last: it.last, State: sharestate.Archived})
			if it.kind == planUnreadable {
				m := p.g.m
				m.unreadable.Add(uint64(it.last - it.first + 1))
				m.log.Error("share group archived records the log cannot read (corrupt); they are never delivered",
					"group", p.g.id, "topic", p.topic, "partition", p.part, "first_offset", it.first, "last_offset", it.last,
					"offsets", unreadableMsg(it.first, it.last))
			}
		case planWait:
			v := availableRun(it.first, it.last, it.count)
			v.availAt = it.availAt
			v.keyWait = it.availAt == 0 && p.keys != nil // waits for its key
			p.setRange(it.first, it.last, v)
			if it.availAt != 0 {
				p.nextAvail = min(p.nextAvail, it.availAt)
				waits = true
			}
		case planTake:
			p.setRange(it.first, it.last, run{state: stAcquired, count: it.count + 1, owner: sid, deadline: deadline})
			took = true
			n := it.count + 1
			if k := len(out.acquired); k > 0 && out.acquired[k-1].LastOffset+1 == it.first && out.acquired[k-1].DeliveryCount == int32(n) {
				out.acquired[k-1].LastOffset = it.last
			} else {
				out.acquired = append(out.acquired, AcquiredRange{FirstOffset: it.first, LastOffset: it.last, DeliveryCount: int32(n)})
			}
		}
	}
	if len(archived) > 0 {
		p.keysSweep() // an archived record may have been its key's head
		if p.advance() {
			p.signal()
		}
		p.writeBackground(archived)
	}
	if deadLetter {
		p.g.m.dlq.add(p)
	}
	if took && deadline < p.nextDeadline {
		p.nextDeadline = deadline
		p.armTimer(now)
	}
	if waits {
		p.armTimer(now)
	}
}

// topicGone reports whether p's topic name now names no topic or another
// topic (deleted, maybe re-created): the store is read by name, so a
// share-partition of the old topic must never read the new one's records
// (a share-partition created just after TopicDeleted ran for its topic,
// by a heartbeat or fetch that resolved the name before the delete).
// Other store errors are left to the caller's own store calls.
func (p *sharePartition) topicGone(ctx context.Context) bool {
	info, err := p.g.m.store.TopicInfo(ctx, p.topic)
	if errors.Is(err, logstore.ErrUnknownTopic) {
		return true
	}
	return err == nil && info.ID != p.topicID
}
