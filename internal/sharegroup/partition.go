package sharegroup

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Share-partition status.
const (
	spUninit  uint8 = iota // no SPSO yet
	spLive                 // initialised
	spDropped              // its topic was deleted or its group removed; the object is dead
)

const never = math.MaxInt64

// sharePartition is the state of one (group, topic_id, partition).
//
// [SPSO, SPEO] is covered by runs, sorted and gap-free; offsets in
// (SPEO, high watermark) are implicitly AVAILABLE with count 0. below holds
// the ACQUIRED records overtaken by a log-start move, the only state
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
	// nextAvail: no AVAILABLE record waits (availAt) past an earlier
	// instant; never if none (docs/queues.md).
	nextAvail int64
	// keys is the index of the keys in flight of an ORDERING_KEY group
	// (keyorder.go); nil when the group does not order by key or the index
	// is to be rebuilt from the window.
	keys    *keyIndex
	timer   *time.Timer
	timerAt int64 // when the armed timer fires; 0 if not armed
	// lastTicket is the ticket of the partition's last share-state entry
	// (written under mu; read atomically by Offline). If that entry was
	// lost, the durable state is unknown until a full entry succeeds.
	lastTicket atomic.Uint64
	// offline is why the share-partition's durable state is known to be
	// lost (found at Open); "" when it is not. Set at load, cleared only by
	// a repair; read under mu.
	offline string
	// movedTo names the instance that owns the partition now, once
	// ReleasePartition dropped this share-partition (owners.go); set with
	// status spDropped, under mu.
	movedTo string
	// dlqCheck: ARCHIVING records may already have their dead-letter copy
	// (recovered ARCHIVING, or an append whose outcome is unknown): the
	// next copy pass looks for them first (deadletter.go). Guarded by mu.
	dlqCheck bool

	// Waiting fetches (waiters.go); wmu is taken after mu, never before.
	wmu      sync.Mutex
	waiters  []*waiter
	baton    *waiter
	restart  bool
	watching bool

	counters spCounters // for metrics (metrics.go)
}

func newSharePartition(g *group, topic, topicID string, part int32) *sharePartition {
	return &sharePartition{g: g, topic: topic, topicID: topicID, part: part, nextDeadline: never, nextAvail: never}
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
	return p.note(p.g.m.state.Write(e))
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

// lost reports whether the partition's last share-state entry failed: its
// durable state is unknown until a full-state entry is written.
func (p *sharePartition) lost() bool {
	return p.g.m.state.Lost(p.lastTicket.Load())
}

// ensureDurable rewrites the partition's full state and waits for it if
// its last entry was lost (a share-state write failure): until that succeeds the
// share-partition answers KAFKA_STORAGE_ERROR. mu is held.
func (p *sharePartition) ensureDurable() (apierr.Reason, string) {
	if p.status != spLive || !p.lost() {
		return apierr.None, ""
	}
	t, err := p.writeFull()
	if err == nil {
		err = p.g.m.state.Wait(t)
	}
	if err != nil {
		return apierr.KafkaStorageError, storageErrMsg(err)
	}
	p.g.m.log.Info("share-partition state rewritten after a state log failure", "group", p.g.id, "topic", p.topic, "partition", p.part)
	return apierr.None, ""
}

// storageErrMsg is the per-partition message of a share-state write failure.
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
	return p.note(p.g.m.state.Write(e))
}

// writeBackground writes a delta nobody waits for (expiry, scans, log-start
// moves: re-derived after a crash). A failure is logged by the store;
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
	if now >= p.nextAvail {
		p.passAvail(now)
	}
}

// passAvail makes the AVAILABLE records whose wait is over acquirable
// (their availAt cleared, the runs merged), wakes waiting fetches, and
// re-arms the timer for the next wait. mu is held.
func (p *sharePartition) passAvail(now int64) {
	next := int64(never)
	freed := false
	for i := range p.runs {
		r := &p.runs[i]
		if r.availAt == 0 {
			continue
		}
		if r.availAt <= now || r.state != stAvailable {
			r.availAt = 0
			freed = true
			continue
		}
		next = min(next, r.availAt)
	}
	p.nextAvail = next
	if freed {
		p.mergeRuns(0, len(p.runs)-1)
		p.signal()
	}
	p.armTimer(now)
}

// moveLogStart follows a log start move past SPSO: SPSO := log start; AVAILABLE and terminal records
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
	p.keysSweep() // heads below the new log start are terminal
	p.spso = ls
	p.speo = max(p.speo, ls-1)
	p.advance()
	p.writeBackground(nil)
	p.signal()
}

// expire applies lock expiry to every ACQUIRED record whose deadline
// has passed, and re-arms the timer. mu is held.
func (p *sharePartition) expire(now int64) {
	cfg := p.g.config()
	next := int64(never)
	var ds []sharestate.Range
	changed, freed, deadLetter := false, false, false
	for i := range p.runs {
		r := &p.runs[i]
		if r.state != stAcquired {
			continue
		}
		if r.deadline > now {
			next = min(next, r.deadline)
			continue
		}
		p.counters.expired.Add(r.last - r.first + 1)
		if r.count >= cfg.limit {
			p.counters.limitArch.Add(r.last - r.first + 1)
			*r = archivedRun(r.first, r.last, r.count, cfg)
			deadLetter = deadLetter || r.state == stArchiving
		} else {
			*r = releasedRun(r.first, r.last, r.count, now, cfg)
			if r.availAt != 0 {
				p.nextAvail = min(p.nextAvail, r.availAt)
			}
			freed = true
		}
		if p.keys != nil && r.state != stAvailable {
			freed = true // a key's record went terminal: its next may be acquirable
			p.keysSweep()
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
		} else {
			p.counters.expired.Add(r.last - r.first + 1)
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
	if deadLetter {
		p.g.m.dlq.add(p)
	}
	p.armTimer(now)
}

// armTimer makes the timer fire at nextDeadline or nextAvail, whichever
// comes first (or earlier). mu is held.
func (p *sharePartition) armTimer(now int64) {
	at := min(p.nextDeadline, p.nextAvail)
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
	}
	if now >= p.nextAvail {
		p.passAvail(now)
	}
	p.armTimer(now)
}

// --- initialisation ------------------------------------------------------

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
	p.keys, p.nextAvail = nil, never
	p.logStart = max(p.logStart, ls)
	ticket, err := p.writeFull()
	if err == nil && cfg.reset.kind == resetLatest && hw > ls && p.g.latestHinted.CompareAndSwap(false, true) {
		// The first-hour trap: a new group at "latest" skips what is already there, and a
		// consumer then waits with nothing to show. Say it once per group.
		m.log.Info("share group starts at the latest offset: the records already in the partition are not delivered to it; "+
			"set its auto_offset_reset to earliest before its first consumer joins to read them (sharelogctl consume --from-beginning)",
			"group", p.g.id, "topic", p.topic, "partition", p.part, "skipped_records", hw-ls)
	}
	return ticket, err
}

// --- session end ---------------------------------------------------------

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
	cfg, now := p.g.config(), m.now()
	for i := range p.runs {
		r := &p.runs[i]
		if r.state == stAcquired && r.owner == sid {
			*r = releasedRun(r.first, r.last, r.count-1, now, cfg)
			if r.availAt != 0 {
				p.nextAvail = min(p.nextAvail, r.availAt)
			}
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
		p.armTimer(now)
		p.signal()
	}
}

// drop kills the share-partition (its topic was deleted, its group removed):
// waiting fetches wake and see it gone. mu is held.
func (p *sharePartition) dropLocked() {
	p.status = spDropped
	p.runs, p.below, p.keys = nil, nil, nil
	p.nextDeadline, p.nextAvail = never, never
	if p.timer != nil {
		p.timer.Stop()
	}
	p.signal()
}
