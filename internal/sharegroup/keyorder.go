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
// The index is memory only: it is built from the window [SPSO, SPEO] the
// first time a scan needs it (after a restart, a load or a config change
// to ORDERING_KEY), reading the window's non-terminal records in offset
// order, and then follows the scans that see new records. Acquired records
// are not durable, so after a restart every record of the window is
// AVAILABLE and the first of each key is its head again.
//
// Records that wait (a busy key, a backoff, a deliver-at time) are not
// acquired and not charged to the fetch; they do not count toward the
// window's record-lock limit either: the limit on new offsets grows by the
// waiting records seen, up to waitingFactor times the limit.

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
}

func newKeyIndex() *keyIndex {
	return &keyIndex{byKey: map[string][]int64{}, keyOf: map[int64]string{}}
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
	p.keys = x
	return nil
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

// waitingKnown reports whether off is a record the index knows to wait
// for its key (not its key's head), without reading it. mu is held.
func (sc *scanState) waitingKnown(p *sharePartition, off int64) bool {
	if sc.ord == nil {
		return false
	}
	key, ok := sc.ord.keyOf[off]
	if !ok {
		return false
	}
	h, ok := sc.ord.head(p, key)
	return ok && h != off
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
