package sharegroup

import (
	"fmt"
	"slices"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Acknowledgement: a share-partition applies one partition entry's
// acknowledgement batches atomically, and rolls them back if their state
// write fails. See doc.go "State machine".

// undoRec is a run as it was before an ack changed it (pre) and as the ack
// left it (post), to roll back when the state write fails.
type undoRec struct {
	pre, post run
}

// ackResult is what an ack left to finish: the durability wait and, if it
// fails, the rollback.
type ackResult struct {
	code   apierr.Reason
	msg    string
	sp     *sharePartition
	ticket uint64 // 0: nothing to wait for
	undo   []undoRec
}

// ack applies one partition entry's batches atomically: every
// targeted offset is checked before anything changes. Validated statically
// already.
func (p *sharePartition) ack(s *session, batches []AckBatch) ackResult {
	m := p.g.m
	p.mu.Lock()
	defer p.mu.Unlock()
	res := ackResult{sp: p}
	if p.status == spDropped {
		res.code, res.msg = p.droppedResult()
		return res
	}
	if p.offline != "" {
		res.code, res.msg = apierr.KafkaStorageError, p.offline
		return res
	}
	ls, hw, err := m.store.Bounds(p.topic, p.part)
	if err != nil {
		res.code, res.msg = storeCode(err)
		return res
	}
	if res.code, res.msg = p.ensureDurable(); res.code != apierr.None {
		return res
	}
	if p.status == spUninit {
		off := batches[0].FirstOffset
		if off >= hw {
			res.code, res.msg = apierr.InvalidRequest, fmt.Sprintf("offset %d is at or beyond the high watermark %d", off, hw)
		} else {
			res.code, res.msg = apierr.InvalidRecordState, fmt.Sprintf("offset %d is not acquired", off)
		}
		return res
	}
	now := m.now()
	p.prepare(ls, now)
	sid := s.ID()
	if res.code, res.msg = p.checkAck(batches, sid, hw); res.code != apierr.None {
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
			res.code, res.msg, res.undo = apierr.KafkaStorageError, storageErrMsg(err), nil
			return res
		}
		res.ticket = ticket
	}
	if st.waits {
		p.armTimer(now)
	}
	if st.freed {
		p.signal()
	}
	if st.deadLetter {
		m.dlq.add(p)
	}
	return res
}

type ackState struct {
	undo  []undoRec
	delta []sharestate.Range
	freed bool // records became AVAILABLE or SPSO moved
	// deadLetter: records became ARCHIVING (their dead-letter copy is due
	// once the entry is durable).
	deadLetter bool
	// waits: released records wait for their backoff (the timer is armed).
	waits bool
}

// checkAck finds the first offset, in request order, that may not be
// acknowledged: below SPSO anything goes; from SPSO on every offset must be
// ACQUIRED by this session (expired locks were already released by prepare).
func (p *sharePartition) checkAck(batches []AckBatch, sid uint64, hw int64) (apierr.Reason, string) {
	for bi := range batches {
		b := &batches[bi]
		off := max(b.FirstOffset, p.spso)
		for off <= b.LastOffset {
			if off > p.speo {
				if off >= hw {
					return apierr.InvalidRequest, fmt.Sprintf("offset %d is at or beyond the high watermark %d", off, hw)
				}
				return apierr.InvalidRecordState, fmt.Sprintf("offset %d is not acquired", off)
			}
			r := &p.runs[findRun(p.runs, off)]
			if r.state != stAcquired {
				return apierr.InvalidRecordState, fmt.Sprintf("offset %d is %s, not acquired", off, r.state)
			}
			if r.owner != sid {
				return apierr.InvalidRecordState, fmt.Sprintf("offset %d is acquired by another share session", off)
			}
			off = r.last + 1
		}
	}
	return apierr.None, ""
}

// applyAck applies one type to [a, z] (validated). mu is held.
func (p *sharePartition) applyAck(a, z int64, t AckType, sid uint64, now int64, cfg *effConfig, st *ackState) {
	p.counters.countAck(t, z-a+1)
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
		case AckReject:
			*r = archivedRun(r.first, r.last, r.count, cfg)
			st.deadLetter = st.deadLetter || r.state == stArchiving
		case AckGap:
			*r = terminalRun(r.first, r.last, stArchived)
		case AckRelease:
			if r.count >= cfg.limit {
				p.counters.limitArch.Add(r.last - r.first + 1)
				*r = archivedRun(r.first, r.last, r.count, cfg)
				st.deadLetter = st.deadLetter || r.state == stArchiving
			} else {
				*r = releasedRun(r.first, r.last, r.count, now, cfg)
				if r.availAt != 0 {
					p.nextAvail = min(p.nextAvail, r.availAt)
					st.waits = true
				}
				st.freed = true
			}
		case AckRenew:
			r.deadline = now + cfg.lockDur
		}
		st.undo = append(st.undo, undoRec{pre: pre, post: *r})
		if p.keys != nil && t != AckRenew {
			st.freed = true // the next record of a key may be acquirable now (keyorder.go)
			if r.state != stAvailable {
				p.keys.terminated(r.first, r.last)
			}
		}
		if t != AckRenew {
			st.delta = appendDur(st.delta, r.durable())
		}
	}
	p.mergeRuns(i-1, j)
}

// ackBelow archives this session's overtaken records in [a, z].
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

// rollback undoes an ack whose state write failed: each record the
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
	p.keysSweep() // what is restored may archive records (keyorder.go)
	deadLetter := false
	restore := func(pre run) run {
		switch {
		case pre.state != stAcquired:
		case ended:
			pre = releasedRun(pre.first, pre.last, pre.count-1, now, cfg)
		case pre.deadline <= now:
			if pre.count >= cfg.limit {
				pre = archivedRun(pre.first, pre.last, pre.count, cfg)
				deadLetter = deadLetter || pre.state == stArchiving
			} else {
				pre = releasedRun(pre.first, pre.last, pre.count, now, cfg)
			}
		}
		if pre.availAt != 0 {
			p.nextAvail = min(p.nextAvail, pre.availAt)
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
	if deadLetter {
		p.g.m.dlq.add(p)
	}
}
