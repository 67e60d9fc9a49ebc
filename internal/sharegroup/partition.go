package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/internal/logstore"
	"github.com/sharelog/sharelog/internal/sharestate"
)

// Share-partition status.
const (
	spUninit  uint8 = iota // no SPSO yet (§6.2)
	spLive                 // initialised
	spDropped              // its topic was deleted or its group removed; the object is dead
)

const never = math.MaxInt64

// sharePartition is the state of one (group, topic_id, partition) (§1).
//
// [SPSO, SPEO] is covered by runs, sorted and gap-free; offsets in
// (SPEO, high watermark) are implicitly AVAILABLE with count 0. below holds
// the ACQUIRED records overtaken by a log-start move (§6.1), the only state
// kept under SPSO, until their owner acknowledges them or their lock
// expires. Every operation runs under mu and first applies what time and
// the log have done meanwhile (prepare): a log start past SPSO and expired
// locks — so the deadline is authoritative even when the timer lags.
type sharePartition struct {
	g       *group
	topic   string
	topicID string
	part    int32

	mu           sync.Mutex
	status       uint8
	spso, speo   int64
	runs         []run
	below        []run
	logStart     int64 // highest log start offset applied
	nextDeadline int64 // no ACQUIRED record has an earlier deadline; never if none
	timer        *time.Timer
	timerAt      int64 // when the armed timer fires; 0 if not armed
	// lastTicket is the ticket of the partition's last state-log entry
	// (written under mu; read atomically by Offline). If that entry was
	// lost, the durable state is unknown until a full entry succeeds.
	lastTicket atomic.Uint64
	// offline is why the share-partition's durable state is known to be
	// lost (found at Open); "" when it is not. Set at load, cleared only by
	// a repair; read under mu.
	offline string

	// Waiting fetches (waiters.go); wmu is taken after mu, never before.
	wmu      sync.Mutex
	waiters  []*waiter
	baton    *waiter
	restart  bool
	watching bool
}

func newSharePartition(g *group, topic, topicID string, part int32) *sharePartition {
	return &sharePartition{g: g, topic: topic, topicID: topicID, part: part, nextDeadline: never}
}

func (p *sharePartition) String() string {
	return fmt.Sprintf("%s/%d", p.topic, p.part)
}

// --- durable writes -----------------------------------------------------------

// writeDelta appends the durable state of the changed ranges ds and the
// current SPSO. mu is held, which orders the partition's entries. If the
// partition's last entry was lost, it appends the full state instead: a
// delta presumes the entries before it.
func (p *sharePartition) writeDelta(ds []sharestate.Range) (uint64, error) {
	if p.lost() {
		return p.writeFull()
	}
	e := p.entry(sharestate.KindPartDelta)
	e.SPSO, e.Ranges = p.spso, clipDur(ds, p.spso)
	return p.note(p.g.m.state.Write(&e))
}

// entry returns a share-state entry of kind k about the share-partition.
func (p *sharePartition) entry(k sharestate.Kind) sharestate.Entry {
	return sharestate.Entry{Kind: k, Group: p.g.id, Topic: p.topic, TopicID: p.topicID, Partition: p.part}
}

// note records t as the partition's last entry. mu is held.
func (p *sharePartition) note(t uint64, err error) (uint64, error) {
	if err == nil {
		p.lastTicket.Store(t)
	}
	return t, err
}

// lost reports whether the partition's last state-log entry failed: its
// durable state is unknown until a full-state entry is written.
func (p *sharePartition) lost() bool {
	return p.g.m.state.Lost(p.lastTicket.Load())
}

// ensureDurable rewrites the partition's full state and waits for it if
// its last entry was lost (a state-log failure): until that succeeds the
// share-partition answers KAFKA_STORAGE_ERROR. mu is held.
func (p *sharePartition) ensureDurable() (ErrorCode, string) {
	if p.status != spLive || !p.lost() {
		return CodeNone, ""
	}
	t, err := p.writeFull()
	if err == nil {
		err = p.g.m.state.Wait(t)
	}
	if err != nil {
		return CodeKafkaStorageError, storageErrMsg(err)
	}
	p.g.m.log.Info("share-partition state rewritten after a state log failure", "group", p.g.id, "topic", p.topic, "partition", p.part)
	return CodeNone, ""
}

// storageErrMsg is the per-partition message of a state-log failure.
func storageErrMsg(err error) string {
	return fmt.Sprintf("share state write failed (%v); retried on the next request", err)
}

// fullState is the partition's durable state as ranges (AVAILABLE with
// count 0 omitted). mu is held.
func (p *sharePartition) fullState() []sharestate.Range {
	var ds []sharestate.Range
	for i := range p.runs {
		d := p.runs[i].durable()
		if d.State == sharestate.Available && d.Count == 0 {
			continue
		}
		ds = appendDur(ds, d)
	}
	return ds
}

// writeFull appends the partition's whole durable state. mu is held.
func (p *sharePartition) writeFull() (uint64, error) {
	e := p.entry(sharestate.KindPartFull)
	e.SPSO, e.Ranges = p.spso, p.fullState()
	return p.note(p.g.m.state.Write(&e))
}

// writeBackground writes a delta nobody waits for (expiry, scans, log-start
// moves: re-derived after a crash). A failure is logged by the state log;
// the in-memory transition stands and the partition's next write is a
// full-state entry.
func (p *sharePartition) writeBackground(ds []sharestate.Range) {
	_, _ = p.writeDelta(ds)
}

// --- time and the log ---------------------------------------------------------

// prepare applies, before any operation, what happened since the last one:
// the log start passing SPSO and expired locks. mu is held.
func (p *sharePartition) prepare(ls, now int64) {
	if ls > p.logStart {
		p.logStart = ls
	}
	if p.status == spLive && ls > p.spso {
		p.moveLogStart(ls)
	}
	if now >= p.nextDeadline {
		p.expire(now)
	}
}

// moveLogStart is §6.1: SPSO := log start; AVAILABLE and terminal records
// below it are dropped (ARCHIVED), ACQUIRED ones move to below, still owned.
func (p *sharePartition) moveLogStart(ls int64) {
	k := 0
	for k < len(p.runs) && p.runs[k].first < ls {
		r := p.runs[k]
		if r.state == stAcquired {
			piece := r
			piece.last = min(piece.last, ls-1)
			p.below = append(p.below, piece)
		}
		if r.last >= ls {
			p.runs[k].first = ls
			break
		}
		k++
	}
	p.runs = p.runs[k:]
	p.spso = ls
	p.speo = max(p.speo, ls-1)
	p.advance()
	p.writeBackground(nil)
	p.signal()
}

// expire applies lock expiry (§5.1) to every ACQUIRED record whose deadline
// has passed, and re-arms the timer. mu is held.
func (p *sharePartition) expire(now int64) {
	cfg := p.g.config()
	next := int64(never)
	var ds []sharestate.Range
	changed, freed := false, false
	for i := range p.runs {
		r := &p.runs[i]
		if r.state != stAcquired {
			continue
		}
		if r.deadline > now {
			next = min(next, r.deadline)
			continue
		}
		if r.count >= cfg.limit {
			*r = terminalRun(r.first, r.last, stArchived)
		} else {
			*r = availableRun(r.first, r.last, r.count)
			freed = true
		}
		ds = appendDur(ds, r.durable())
		changed = true
	}
	// Overtaken records expire to ARCHIVED: they are below SPSO.
	w := 0
	for _, r := range p.below {
		if r.deadline > now {
			next = min(next, r.deadline)
			p.below[w] = r
			w++
		}
	}
	p.below = p.below[:w]
	p.nextDeadline = next
	if changed {
		p.mergeRuns(0, len(p.runs)-1)
		if p.advance() {
			freed = true
		}
		p.writeBackground(ds)
	}
	if freed {
		p.signal()
	}
	p.armTimer(now)
}

// armTimer makes the timer fire at nextDeadline (or earlier). mu is held.
func (p *sharePartition) armTimer(now int64) {
	at := p.nextDeadline
	if at == never || (p.timerAt != 0 && p.timerAt <= at) {
		return
	}
	d := time.Duration(at - now)
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.onTimer)
	} else {
		p.timer.Reset(d)
	}
	p.timerAt = at
}

// onTimer expires locks at their deadline, so expired records become
// acquirable and waiting fetches wake even if nobody touches the partition.
func (p *sharePartition) onTimer() {
	m := p.g.m
	if !m.enter() {
		return
	}
	defer m.leave()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timerAt = 0
	if p.status != spLive {
		return
	}
	now := m.now()
	if now >= p.nextDeadline {
		p.expire(now)
	} else {
		p.armTimer(now)
	}
}

// --- initialisation (§6.2) ------------------------------------------------------

// initialize sets SPSO from the group's auto_offset_reset and makes it
// durable before returning (mu is held throughout: nobody may use a SPSO
// that a crash could re-evaluate).
func (p *sharePartition) initialize(ctx context.Context, ls, hw int64) error {
	ticket, err := p.initStart(ctx, ls, hw)
	if err == nil {
		err = p.g.m.state.Wait(ticket)
	}
	if err != nil {
		p.status = spUninit
		return err
	}
	return nil
}

// initStart is initialize without the durability wait: it sets SPSO and
// appends the full state, returning its ticket. The caller keeps mu until
// the ticket is durable and sets status back to spUninit if it fails (the
// assignor initialises several share-partitions under one fsync).
func (p *sharePartition) initStart(ctx context.Context, ls, hw int64) (uint64, error) {
	m := p.g.m
	cfg := p.g.config()
	spso := hw
	switch cfg.reset.kind {
	case resetEarliest:
		spso = ls
	case resetByDuration:
		ts := time.Now().Add(-cfg.reset.dur).UnixMilli()
		off, _, err := m.store.OffsetForTimestamp(ctx, p.topic, p.part, ts)
		if err != nil {
			return 0, err
		}
		if off >= 0 {
			spso = max(off, ls)
		}
	}
	p.status, p.spso, p.speo, p.runs, p.below = spLive, spso, spso-1, nil, nil
	p.logStart = max(p.logStart, ls)
	return p.writeFull()
}

// --- acquisition (§3.3) ---------------------------------------------------------

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
	planArchive             // count at the limit, or no record at the offset
	planUnreadable          // the log cannot read these offsets: archived, logged, counted
)

type planItem struct {
	first, last int64
	count       int16 // planTake: count before the acquisition
	kind        planKind
}

// partFetch is one session partition's part of a fetch.
type partFetch struct {
	sp       *sharePartition
	code     ErrorCode
	msg      string
	records  []logstore.Record
	acquired []AcquiredRange
	plan     []planItem
}

func (f *partFetch) fail(code ErrorCode, msg string) {
	f.code, f.msg = code, msg
	f.records, f.acquired = nil, nil
}

func (f *partFetch) resetResult() {
	f.code, f.msg, f.records, f.acquired = CodeNone, "", f.records[:0], f.acquired[:0]
}

// storeCode maps a log-store error on a partition to its error code.
func storeCode(err error) (ErrorCode, string) {
	switch {
	case errors.Is(err, logstore.ErrUnknownTopic):
		return CodeUnknownTopicOrPartition, "topic or partition does not exist"
	case errors.Is(err, logstore.ErrCorrupt):
		return CodeKafkaStorageError, "log read failed: corrupt record"
	case errors.Is(err, logstore.ErrClosed):
		return CodeKafkaStorageError, "log store closed"
	}
	return CodeKafkaStorageError, "storage error"
}

// acquire takes what the partition can give within bud for session s, or
// with dry only counts it (the long-poll evaluation, §3.4). Partition
// errors go to out; the returned error is the caller's context ending.
func (p *sharePartition) acquire(ctx context.Context, s *session, bud *budget, dry bool, out *partFetch) error {
	m := p.g.m
	p.mu.Lock()
	defer p.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if p.status == spDropped {
			out.fail(CodeUnknownTopicOrPartition, "topic was deleted")
			return nil
		}
		if p.offline != "" {
			out.fail(CodeKafkaStorageError, p.offline)
			return nil
		}
		ls, hw, err := m.store.Bounds(p.topic, p.part)
		if err != nil {
			out.fail(storeCode(err))
			return nil
		}
		if code, msg := p.ensureDurable(); code != CodeNone {
			out.fail(code, msg)
			return nil
		}
		if p.status == spUninit {
			if err := p.initialize(ctx, ls, hw); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				m.log.Warn("share-partition initialisation failed", "group", p.g.id, "partition", p.String(), "err", err)
				out.fail(CodeKafkaStorageError, "initialisation failed")
				return nil
			}
		}
		now := m.now()
		p.prepare(ls, now)
		if !dry {
			// Register ownership before acquiring, atomically with the
			// "not ended" check: a session end that follows will find
			// this partition and release what we take (§11).
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
		save := *bud
		err = p.scan(ctx, hw, bud, dry, out)
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

// scan plans the acquisition: it walks AVAILABLE runs from SPSO and then
// the new offsets after SPEO, up to SPSO + L and the high watermark, reading
// the records to size them. mu is held; nothing changes yet.
func (p *sharePartition) scan(ctx context.Context, hw int64, bud *budget, dry bool, out *partFetch) error {
	cfg := p.g.config()
	lim := min(p.spso+cfg.maxLocks, hw)
	out.plan = out.plan[:0]
	for i := 0; i < len(p.runs) && !bud.exhausted(); i++ {
		r := p.runs[i]
		if r.first >= lim {
			break
		}
		if r.state != stAvailable {
			continue
		}
		hi := min(r.last, lim-1)
		if r.count >= cfg.limit {
			// Over the limit after it was lowered (§5.2): archived by
			// this scan, never delivered.
			if !dry {
				out.plan = append(out.plan, planItem{first: r.first, last: hi, kind: planArchive})
			}
			continue
		}
		if err := p.take(ctx, r.first, hi, r.count, bud, dry, out); err != nil {
			return err
		}
	}
	if !bud.exhausted() && p.speo+1 < lim {
		return p.take(ctx, p.speo+1, lim-1, 0, bud, dry, out)
	}
	return nil
}

// take plans the acquisition of AVAILABLE offsets [a, b] of count c. An
// offset without a record (compaction) is planned for archiving, and so is
// an offset the log cannot read (a corrupt record): it is archived, logged
// and counted rather than failing every acquisition of the group forever.
func (p *sharePartition) take(ctx context.Context, a, b int64, c int16, bud *budget, dry bool, out *partFetch) error {
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
			sz := int64(rec.Size())
			if !bud.first && sz > bud.bytes {
				bud.stopped = true
				break
			}
			bud.first = false
			bud.records--
			bud.bytes -= sz
			bud.mbytes += max(sz, 1)
			if !dry {
				out.plan = appendPlan(out.plan, planItem{first: off, last: off, count: c, kind: planTake})
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
	took := false
	for _, it := range out.plan {
		switch it.kind {
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
		if p.advance() {
			p.signal()
		}
		p.writeBackground(archived)
	}
	if took && deadline < p.nextDeadline {
		p.nextDeadline = deadline
		p.armTimer(now)
	}
}

// --- acknowledgement (§4) -------------------------------------------------------

// undoRec is a run as it was before an ack changed it (pre) and as the ack
// left it (post), to roll back when the state write fails.
type undoRec struct {
	pre, post run
}

// ackResult is what an ack left to finish: the durability wait and, if it
// fails, the rollback.
type ackResult struct {
	code   ErrorCode
	msg    string
	sp     *sharePartition
	ticket uint64 // 0: nothing to wait for
	undo   []undoRec
}

// ack applies one partition entry's batches atomically (§4.2): every
// targeted offset is checked before anything changes. Validated statically
// already (§4.1).
func (p *sharePartition) ack(s *session, batches []AckBatch) ackResult {
	m := p.g.m
	p.mu.Lock()
	defer p.mu.Unlock()
	res := ackResult{sp: p}
	if p.status == spDropped {
		res.code, res.msg = CodeUnknownTopicOrPartition, "topic was deleted"
		return res
	}
	if p.offline != "" {
		res.code, res.msg = CodeKafkaStorageError, p.offline
		return res
	}
	ls, hw, err := m.store.Bounds(p.topic, p.part)
	if err != nil {
		res.code, res.msg = storeCode(err)
		return res
	}
	if res.code, res.msg = p.ensureDurable(); res.code != CodeNone {
		return res
	}
	if p.status == spUninit {
		off := batches[0].FirstOffset
		if off >= hw {
			res.code, res.msg = CodeInvalidRequest, fmt.Sprintf("offset %d is at or beyond the high watermark %d", off, hw)
		} else {
			res.code, res.msg = CodeInvalidRecordState, fmt.Sprintf("offset %d is not acquired", off)
		}
		return res
	}
	now := m.now()
	p.prepare(ls, now)
	sid := s.ID()
	if res.code, res.msg = p.checkAck(batches, sid, hw); res.code != CodeNone {
		return res
	}
	cfg := p.g.config()
	var st ackState
	for bi := range batches {
		b := &batches[bi]
		if len(b.Types) == 1 {
			p.applyAck(b.FirstOffset, b.LastOffset, b.Types[0], sid, now, cfg, &st)
			continue
		}
		// One type per offset: apply each stretch of equal types as a range.
		start := 0
		for i := 1; i <= len(b.Types); i++ {
			if i == len(b.Types) || b.Types[i] != b.Types[start] {
				p.applyAck(b.FirstOffset+int64(start), b.FirstOffset+int64(i-1), b.Types[start], sid, now, cfg, &st)
				start = i
			}
		}
	}
	if p.advance() {
		st.freed = true
	}
	res.undo = st.undo
	if len(st.delta) > 0 {
		ticket, err := p.writeDelta(st.delta)
		if err != nil {
			p.rollbackLocked(st.undo, s.Ended(), now)
			res.code, res.msg, res.undo = CodeKafkaStorageError, storageErrMsg(err), nil
			return res
		}
		res.ticket = ticket
	}
	if st.freed {
		p.signal()
	}
	return res
}

type ackState struct {
	undo  []undoRec
	delta []sharestate.Range
	freed bool // records became AVAILABLE or SPSO moved
}

// checkAck finds the first offset, in request order, that may not be
// acknowledged: below SPSO anything goes; from SPSO on every offset must be
// ACQUIRED by this session (expired locks were already released by prepare).
func (p *sharePartition) checkAck(batches []AckBatch, sid uint64, hw int64) (ErrorCode, string) {
	for bi := range batches {
		b := &batches[bi]
		off := max(b.FirstOffset, p.spso)
		for off <= b.LastOffset {
			if off > p.speo {
				if off >= hw {
					return CodeInvalidRequest, fmt.Sprintf("offset %d is at or beyond the high watermark %d", off, hw)
				}
				return CodeInvalidRecordState, fmt.Sprintf("offset %d is not acquired", off)
			}
			r := &p.runs[findRun(p.runs, off)]
			if r.state != stAcquired {
				return CodeInvalidRecordState, fmt.Sprintf("offset %d is %s, not acquired", off, r.state)
			}
			if r.owner != sid {
				return CodeInvalidRecordState, fmt.Sprintf("offset %d is acquired by another share session", off)
			}
			off = r.last + 1
		}
	}
	return CodeNone, ""
}

// applyAck applies one type to [a, z] (validated). mu is held.
func (p *sharePartition) applyAck(a, z int64, t AckType, sid uint64, now int64, cfg *effConfig, st *ackState) {
	if a < p.spso {
		if t != AckRenew {
			p.ackBelow(a, min(z, p.spso-1), sid, st)
		}
		a = p.spso
	}
	if a > z {
		return
	}
	p.splitAt(a)
	j := p.splitAt(z + 1)
	i := findRun(p.runs, a)
	for x := i; x < j; x++ {
		r := &p.runs[x]
		pre := *r
		switch t {
		case AckAccept:
			*r = terminalRun(r.first, r.last, stAcknowledged)
		case AckReject, AckGap:
			*r = terminalRun(r.first, r.last, stArchived)
		case AckRelease:
			if r.count >= cfg.limit {
				*r = terminalRun(r.first, r.last, stArchived)
			} else {
				*r = availableRun(r.first, r.last, r.count)
				st.freed = true
			}
		case AckRenew:
			r.deadline = now + cfg.lockDur
		}
		st.undo = append(st.undo, undoRec{pre: pre, post: *r})
		if t != AckRenew {
			st.delta = appendDur(st.delta, r.durable())
		}
	}
	p.mergeRuns(i-1, j)
}

// ackBelow archives this session's overtaken records in [a, z] (§6.1).
func (p *sharePartition) ackBelow(a, z int64, sid uint64, st *ackState) {
	if len(p.below) == 0 {
		return
	}
	kept := p.below[:0:0]
	for _, r := range p.below {
		if r.owner != sid || r.last < a || r.first > z {
			kept = append(kept, r)
			continue
		}
		if r.first < a {
			left := r
			left.last = a - 1
			kept = append(kept, left)
		}
		if r.last > z {
			right := r
			right.first = z + 1
			kept = append(kept, right)
		}
		mid := r
		mid.first, mid.last = max(r.first, a), min(r.last, z)
		st.undo = append(st.undo, undoRec{pre: mid, post: terminalRun(mid.first, mid.last, stArchived)})
	}
	p.below = kept
}

// rollback undoes an ack whose state write failed (§4.4): each record the
// ack changed and nobody changed since returns to ACQUIRED by the session,
// or to what expiry or the session's end would have made of it.
func (p *sharePartition) rollback(undo []undoRec, s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != spLive {
		return
	}
	p.rollbackLocked(undo, s.Ended(), p.g.m.now())
}

func (p *sharePartition) rollbackLocked(undo []undoRec, ended bool, now int64) {
	cfg := p.g.config()
	restore := func(pre run) run {
		switch {
		case pre.state != stAcquired:
		case ended:
			pre = availableRun(pre.first, pre.last, pre.count-1)
		case pre.deadline <= now:
			if pre.count >= cfg.limit {
				pre = terminalRun(pre.first, pre.last, stArchived)
			} else {
				pre = availableRun(pre.first, pre.last, pre.count)
			}
		}
		return pre
	}
	// Records the ack made terminal may have been dropped by an SPSO
	// advance: lower SPSO back over them (not below the log start). The
	// offsets in between were terminal too; whichever terminal state they
	// had is indistinguishable once restored rollbacks are applied.
	lo := p.spso
	for _, u := range undo {
		if f := max(u.pre.first, p.logStart); f < lo && f <= u.pre.last {
			lo = f
		}
	}
	if lo < p.spso {
		p.runs = slices.Insert(p.runs, 0, terminalRun(lo, p.spso-1, stArchived))
		p.spso = lo
	}
	freed := false
	for _, u := range undo {
		pre := u.pre
		if pre.first < p.logStart {
			below := pre
			below.last = min(below.last, p.logStart-1)
			if below.state == stAcquired && below.deadline > now && !ended {
				p.below = append(p.below, below)
				p.nextDeadline = min(p.nextDeadline, below.deadline)
			}
			pre.first = p.logStart
			if pre.first > pre.last {
				continue
			}
		}
		p.splitAt(pre.first)
		j := p.splitAt(pre.last + 1)
		for x := findRun(p.runs, pre.first); x < j; x++ {
			r := &p.runs[x]
			if !r.same(&u.post) && !(u.post.state.terminal() && r.state.terminal()) {
				continue // changed since by someone else: leave it
			}
			v := pre
			v.first, v.last = r.first, r.last
			v = restore(v)
			*r = v
			if v.state == stAvailable {
				freed = true
			}
			if v.state == stAcquired {
				p.nextDeadline = min(p.nextDeadline, v.deadline)
			}
		}
	}
	p.mergeRuns(0, len(p.runs)-1)
	p.advance()
	p.armTimer(now)
	if freed {
		p.signal()
	}
}

// --- session end (§2.5) ---------------------------------------------------------

// releaseSession makes every record still ACQUIRED by session sid AVAILABLE
// with its count decreased by one — the durable state already says so, so
// nothing is written. Expired locks expire first (their count stays).
func (p *sharePartition) releaseSession(sid uint64) {
	m := p.g.m
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != spLive {
		return
	}
	if ls, _, err := m.store.Bounds(p.topic, p.part); err == nil {
		p.prepare(ls, m.now())
	} else if now := m.now(); now >= p.nextDeadline {
		p.expire(now)
	}
	freed := false
	for i := range p.runs {
		r := &p.runs[i]
		if r.state == stAcquired && r.owner == sid {
			*r = availableRun(r.first, r.last, r.count-1)
			freed = true
		}
	}
	w := 0
	for _, r := range p.below {
		if r.owner != sid {
			p.below[w] = r
			w++
		}
	}
	p.below = p.below[:w]
	if freed {
		p.mergeRuns(0, len(p.runs)-1)
		p.signal()
	}
}

// drop kills the share-partition (its topic was deleted, its group removed):
// waiting fetches wake and see it gone. mu is held.
func (p *sharePartition) dropLocked() {
	p.status = spDropped
	p.runs, p.below = nil, nil
	p.nextDeadline = never
	if p.timer != nil {
		p.timer.Stop()
	}
	p.signal()
}
