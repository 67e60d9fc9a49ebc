package sharegroup

import (
	"context"
	"errors"
	"math"
	"strconv"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Key ordering, redelivery backoff and delayed delivery (docs/queues.md).
//
// A share-partition of an ORDERING_KEY group keeps a keyIndex: for every
// key, the offsets of its records that acquisition has seen and that are
// not terminal yet, ascending. The first is the key's head; a keyed record
// may be acquired only when it is its key's head, so one record per key is
// in flight and a key's records go in offset order. Terminal heads are
// popped lazily, when the key is next looked at (a state lookup of the
// head's offset), so no acknowledgement path needs to know the index; the
// paths that make records terminal only wake waiting fetches.
//
// A record found waiting for its key is marked in its run (keyWait), and
// acquisition passes marked runs over without reading them or looking
// each offset up. The keys with a marked record are the index's waitKeys;
// every scan first looks at the heads of the keys whose records were
// acknowledged since the last scan (or, after expiry, the limit or a log
// start move, of every waiting key) and clears the mark of a head whose
// predecessors went terminal (wakeKeys). So a scan costs the runs of the
// window plus the keys just freed, not the waiting records.
//
// The index is memory only: it is built from the window [SPSO, SPEO] the
// first time a scan needs it (after a restart, a load or a config change
// to ORDERING_KEY), reading the window's non-terminal records in offset
// order, and then follows the scans that see new records. Acquired records
// are not durable, so after a restart every record of the window is
// AVAILABLE and the first of each key is its head again.
//
// Records that wait (a busy key, a backoff, a deliver-at time) are not
// acquired and not charged to the fetch. In an ORDERING_KEY group the
// record-lock limit counts only acquired records, within waitingFactor+1
// times the limit past SPSO (takeNewOrdered); in other groups the limit
// on new offsets grows by the waiting records seen, up to waitingFactor
// times the limit.

// deliverAtHeader is the header that delays a record's delivery to share
// groups: decimal milliseconds since the Unix epoch (docs/queues.md
// "Delayed delivery").
const deliverAtHeader = "sharelog-deliver-at"

// waitingFactor bounds the waiting records a scan looks past, as a
// multiple of the group's record-lock limit.
const waitingFactor = 10

type keyIndex struct {
	byKey map[string][]int64 // a key's seen, non-terminal offsets, ascending
	keyOf map[int64]string   // offset -> key, for the offsets in byKey
	// waitKeys holds every key that may have a keyWait record: each key
	// with two offsets or more when it was last added to or woken.
	waitKeys map[string]struct{}
	// woken: keys whose records an acknowledgement made terminal since the
	// last scan, the only ones the next scan wakes; sweep: some other path
	// made records terminal (expiry, the limit, a log start move), so the
	// next scan wakes every waiting key. Every sweepEvery-th scan sweeps
	// anyway.
	woken []string
	sweep bool
	scans uint32
}

// sweepEvery bounds how many scans may pass between two wakes of every
// waiting key (a safety net: each path that makes records terminal either
// names its keys or asks for a sweep).
const sweepEvery = 32

// terminated notes that [a, b] became terminal by an acknowledgement: the
// next scan wakes their keys (a long range asks for a sweep). mu is held.
func (x *keyIndex) terminated(a, b int64) {
	if b-a >= 256 {
		x.sweep = true
		return
	}
	for off := a; off <= b; off++ {
		if k, ok := x.keyOf[off]; ok {
			x.woken = append(x.woken, k)
		}
	}
}

func newKeyIndex() *keyIndex {
	return &keyIndex{byKey: map[string][]int64{}, keyOf: map[int64]string{}, waitKeys: map[string]struct{}{}}
}

// offTerminal reports whether off is terminal for ordering: below SPSO
// (acknowledged, archived or purged) or ACKNOWLEDGED, ARCHIVED or
// ARCHIVING (never delivered again). mu is held.
func (p *sharePartition) offTerminal(off int64) bool {
	if off < p.spso {
		return true
	}
	if off > p.speo {
		return false
	}
	st := p.runs[findRun(p.runs, off)].state
	return st.terminal() || st == stArchiving
}

// head returns key's first non-terminal offset, popping terminal ones;
// false if the key has none. mu is held.
func (x *keyIndex) head(p *sharePartition, key string) (int64, bool) {
	q := x.byKey[key]
	n := 0
	for n < len(q) && p.offTerminal(q[n]) {
		delete(x.keyOf, q[n])
		n++
	}
	if n == len(q) {
		if len(q) > 0 {
			delete(x.byKey, key)
		}
		return 0, false
	}
	if n > 0 {
		q = q[n:]
		x.byKey[key] = q
	}
	return q[0], true
}

// add appends off to key's offsets (off is past every offset of the key
// the index holds, or already there). mu is held.
func (x *keyIndex) add(key string, off int64) {
	if _, ok := x.keyOf[off]; ok {
		return
	}
	x.keyOf[off] = key
	x.byKey[key] = append(x.byKey[key], off)
}

// prune drops every terminal offset when the index has grown past what
// the window can hold (keys not looked at since their heads went
// terminal). mu is held.
func (x *keyIndex) prune(p *sharePartition, bound int64) {
	if int64(len(x.keyOf)) <= bound {
		return
	}
	for k := range x.byKey {
		x.head(p, k)
	}
}

// buildKeys makes the index from the window's non-terminal keyed records,
// in offset order. mu is held.
func (p *sharePartition) buildKeys(ctx context.Context) error {
	p.clearKeyWait()
	x := newKeyIndex()
	store := p.g.m.store
	for i := 0; i < len(p.runs); i++ {
		r := p.runs[i]
		if r.state.terminal() || r.state == stArchiving {
			continue
		}
		for off := r.first; off <= r.last; {
			recs, err := store.Read(ctx, p.topic, p.part, off, int(min(r.last-off+1, 1000)), math.MaxInt32)
			if errors.Is(err, logstore.ErrCorrupt) {
				off++ // an unreadable record: acquisition archives it
				continue
			}
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				break
			}
			for j := range recs {
				if recs[j].Offset > r.last {
					break
				}
				if recs[j].Key != nil {
					x.add(string(recs[j].Key), recs[j].Offset)
				}
			}
			off = recs[len(recs)-1].Offset + 1
		}
	}
	for k, q := range x.byKey {
		if len(q) > 1 {
			x.waitKeys[k] = struct{}{}
		}
	}
	p.keys = x
	return nil
}

// clearKeyWait drops every keyWait mark: the index they belong to is
// being rebuilt or dropped. mu is held.
func (p *sharePartition) clearKeyWait() {
	marked := false
	for i := range p.runs {
		if p.runs[i].keyWait {
			p.runs[i].keyWait, marked = false, true
		}
	}
	if marked {
		p.mergeRuns(0, len(p.runs)-1)
	}
}

// wakeKeys clears the keyWait mark of every waiting key's head: a record
// marked while an earlier one of its key was in flight becomes acquirable
// once that one is terminal. Keys left with one offset or none leave
// waitKeys. mu is held.
func (p *sharePartition) wakeKeys() {
	x := p.keys
	x.scans++
	if x.sweep || x.scans%sweepEvery == 0 {
		x.sweep, x.woken = false, x.woken[:0]
		for k := range x.waitKeys {
			p.wakeKey(k)
		}
		return
	}
	for _, k := range x.woken {
		if _, ok := x.waitKeys[k]; ok {
			p.wakeKey(k)
		}
	}
	x.woken = x.woken[:0]
}

// wakeKey clears the keyWait mark of k's head, and drops k from waitKeys
// when it has one offset or none. mu is held.
func (p *sharePartition) wakeKey(k string) {
	x := p.keys
	h, ok := x.head(p, k)
	if !ok {
		delete(x.waitKeys, k)
		return
	}
	if i := findRun(p.runs, h); i < len(p.runs) && p.runs[i].keyWait {
		v := p.runs[i]
		v.keyWait = false
		p.setRange(h, h, v)
	}
	if len(x.byKey[k]) < 2 {
		delete(x.waitKeys, k)
	}
}

// keysSweep asks the next scan of an ORDERING_KEY partition to wake every
// waiting key: records became terminal on a path that does not name them.
// mu is held.
func (p *sharePartition) keysSweep() {
	if p.keys != nil {
		p.keys.sweep = true
	}
}

// deliverAt returns the record's sharelog-deliver-at time (ms since the
// epoch); ok false when it has none, and malformed when its value is not
// a non-negative decimal number (delivered at once, counted by the caller).
func deliverAt(rec *logstore.Record) (at int64, ok, malformed bool) {
	for i := range rec.Headers {
		h := &rec.Headers[i]
		if h.Key != deliverAtHeader {
			continue
		}
		v, err := strconv.ParseInt(string(h.Value), 10, 64)
		if err != nil || v < 0 {
			return 0, false, true
		}
		return v, true, false
	}
	return 0, false, false
}

// scanState is what one scan knows besides the budget: the clock, the
// group's ordering and the keys this scan saw first (pending), so that a
// second new record of a key waits behind the first even before the
// index holds either.
type scanState struct {
	now, hw, wallMs int64
	dry             bool
	ord             *keyIndex
	pending         map[string]int64
	skipped         int64 // waiting records looked past
	maxSkip         int64
	// abortedTxns: read committed, the aborted transactions of the scanned
	// offsets (their records are archived, never delivered).
	abortedTxns []AbortedTxn
}

// aborted reports whether rec belongs to an aborted transaction, for a
// read-committed group.
func (sc *scanState) aborted(rec *logstore.Record) bool {
	if !rec.Transactional || len(sc.abortedTxns) == 0 {
		return false
	}
	for _, a := range sc.abortedTxns {
		if a.ProducerID == rec.ProducerID && a.FirstOffset <= rec.Offset && rec.Offset < a.MarkerOffset {
			return true
		}
	}
	return false
}

// wait reports whether rec must wait rather than be acquired, and until
// when (0: until its key is free). mu is held.
func (p *sharePartition) wait(rec *logstore.Record, sc *scanState) (bool, int64) {
	at, ok, malformed := deliverAt(rec)
	if malformed && !sc.dry {
		p.g.m.badDeliverAt.Add(1)
	}
	if ok && at > sc.wallMs {
		return true, sc.now + (at-sc.wallMs)*1e6
	}
	if sc.ord == nil || rec.Key == nil {
		return false, 0
	}
	key := string(rec.Key)
	if h, ok := sc.ord.head(p, key); ok {
		return h != rec.Offset, 0
	}
	if first, ok := sc.pending[key]; ok {
		return first != rec.Offset, 0
	}
	return false, 0
}

// keyWaiting counts the records the index knows to wait behind an earlier
// record of their key, and returns the lowest (-1 if none). mu is held.
func (p *sharePartition) keyWaiting() (n, oldest int64) {
	oldest = -1
	if p.keys == nil {
		return 0, -1
	}
	for k := range p.keys.byKey {
		if _, ok := p.keys.head(p, k); !ok {
			continue
		}
		q := p.keys.byKey[k]
		n += int64(len(q) - 1)
		if len(q) > 1 && (oldest < 0 || q[1] < oldest) {
			oldest = q[1]
		}
	}
	return n, oldest
}
