package sharegroup

import (
	"slices"

	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// recState is a record's state. The durable ones
// have the values of sharestate.RecState.
type recState uint8

const (
	stAvailable    = recState(sharestate.Available)
	stAcquired     = recState(1) // never durable
	stAcknowledged = recState(sharestate.Acknowledged)
	stArchived     = recState(sharestate.Archived)
	// stArchiving: archived, its dead-letter copy still to be made
	// (deadletter.go). Not terminal: SPSO does not pass it.
	stArchiving = recState(sharestate.Archiving)
)

func (s recState) terminal() bool { return s == stAcknowledged || s == stArchived }

func (s recState) String() string {
	switch s {
	case stAvailable:
		return "AVAILABLE"
	case stAcquired:
		return "ACQUIRED"
	case stAcknowledged:
		return "ACKNOWLEDGED"
	case stArchived:
		return "ARCHIVED"
	case stArchiving:
		return "ARCHIVING"
	}
	return "?"
}

// run is a maximal-or-not sequence of consecutive offsets in one uniform
// state: same state, delivery count, owner and deadline. A share-partition
// keeps [SPSO, SPEO] as a sorted, gap-free list of runs, so a uniform range
// of any length costs one run. Neighbours that become equal
// are merged after every change.
type run struct {
	first, last int64
	deadline    int64  // ACQUIRED: lock deadline on the manager's monotonic clock (ns)
	owner       uint64 // ACQUIRED: owning session's ID; 0 otherwise
	// availAt: AVAILABLE, not acquirable before this instant on the
	// manager's clock (ns): a redelivery backoff or a record's
	// sharelog-deliver-at (docs/queues.md); 0 = at once. Not durable.
	availAt int64
	count   int16 // delivery count; 0 for terminal states
	state   recState
	// keyWait: AVAILABLE records of an ORDERING_KEY group known to wait
	// behind an earlier record of their key (keyorder.go), passed over by
	// acquisition unread until wakeKeys clears the flag. Not durable.
	keyWait bool
}

func (r *run) same(o *run) bool {
	return r.state == o.state && r.count == o.count && r.owner == o.owner && r.deadline == o.deadline && r.availAt == o.availAt && r.keyWait == o.keyWait
}

// durable is the run's durable image: ACQUIRED is not persisted, so an
// ACQUIRED record is durably AVAILABLE without the acquisition's +1.
func (r *run) durable() sharestate.Range {
	switch r.state {
	case stAcquired:
		return sharestate.Range{First: r.first, Last: r.last, State: sharestate.Available, Count: r.count - 1}
	case stAvailable:
		return sharestate.Range{First: r.first, Last: r.last, State: sharestate.Available, Count: r.count}
	case stArchiving:
		return sharestate.Range{First: r.first, Last: r.last, State: sharestate.Archiving, Count: r.count}
	}
	return sharestate.Range{First: r.first, Last: r.last, State: sharestate.RecState(r.state)}
}

func availableRun(first, last int64, count int16) run {
	return run{first: first, last: last, count: count, state: stAvailable}
}

// releasedRun is what RELEASE, a lock's expiry or its session's end make
// of [first, last] with delivery count n: AVAILABLE, after the group's
// redelivery backoff for n when it has one (docs/queues.md). The caller
// keeps nextAvail (the timer) up to date.
func releasedRun(first, last int64, n int16, now int64, cfg *effConfig) run {
	r := availableRun(first, last, n)
	if d := cfg.backoff(n); d > 0 {
		r.availAt = now + d
	}
	return r
}

func terminalRun(first, last int64, st recState) run {
	return run{first: first, last: last, state: st}
}

// archivedRun is what the delivery-count limit or a REJECT makes of
// [first, last] delivered count times: ARCHIVED, or ARCHIVING (its copy to
// the dead-letter topic pending) when the group has a dead-letter topic.
func archivedRun(first, last int64, count int16, cfg *effConfig) run {
	if cfg.deadLetter != "" {
		return run{first: first, last: last, count: count, state: stArchiving}
	}
	return terminalRun(first, last, stArchived)
}

// findRun returns the index of the run containing off, or len(rs) if off is
// past the last run. rs is sorted and gap-free.
func findRun(rs []run, off int64) int {
	lo, hi := 0, len(rs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if rs[mid].last < off {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// splitAt makes off the first offset of a run and returns that run's index
// (len(p.runs) if off is past SPEO). off must be >= the first run's first.
func (p *sharePartition) splitAt(off int64) int {
	i := findRun(p.runs, off)
	if i == len(p.runs) || p.runs[i].first == off {
		return i
	}
	right := p.runs[i]
	right.first = off
	p.runs[i].last = off - 1
	p.runs = slices.Insert(p.runs, i+1, right)
	return i + 1
}

// mergeRuns merges equal neighbours among runs[lo..hi] (clamped).
func (p *sharePartition) mergeRuns(lo, hi int) {
	lo, hi = max(lo, 0), min(hi, len(p.runs)-1)
	if lo >= hi {
		return
	}
	w := lo
	for i := lo + 1; i <= hi; i++ {
		if p.runs[w].same(&p.runs[i]) {
			p.runs[w].last = p.runs[i].last
		} else {
			w++
			p.runs[w] = p.runs[i]
		}
	}
	if w < hi {
		p.runs = slices.Delete(p.runs, w+1, hi+1)
	}
}

// setRange gives [a, b] the value v (its first/last are ignored). a lies
// in [runs[0].first, SPEO+1]; b may pass SPEO, extending the in-flight
// window (SPEO becomes b).
func (p *sharePartition) setRange(a, b int64, v run) {
	v.first, v.last = a, b
	if a > p.speo {
		p.runs = append(p.runs, v)
		p.speo = b
		p.mergeRuns(len(p.runs)-2, len(p.runs)-1)
		return
	}
	i := p.splitAt(a)
	j := p.splitAt(b + 1)
	p.runs = slices.Replace(p.runs, i, j, v)
	p.speo = max(p.speo, b)
	p.mergeRuns(i-1, i+1)
}

// advance moves SPSO past leading terminal runs and drops them; it
// reports whether SPSO moved.
func (p *sharePartition) advance() bool {
	i := 0
	for i < len(p.runs) && p.runs[i].state.terminal() {
		i++
	}
	if i == 0 {
		return false
	}
	if i == len(p.runs) {
		p.spso = p.speo + 1
		p.runs = p.runs[:0]
	} else {
		p.spso = p.runs[i].first
		// Reslice rather than move: the array is reclaimed by the next
		// growth, so steady consumption costs O(1) amortised per advance.
		p.runs = p.runs[i:]
	}
	return true
}

// appendDur appends r to a delta, merging it into the last range if adjacent
// and equal.
func appendDur(ds []sharestate.Range, r sharestate.Range) []sharestate.Range {
	if n := len(ds); n > 0 {
		l := &ds[n-1]
		if l.Last+1 == r.First && l.State == r.State && l.Count == r.Count {
			l.Last = r.Last
			return ds
		}
	}
	return append(ds, r)
}

// clipDur drops the parts of ds below off (ds ascends).
func clipDur(ds []sharestate.Range, off int64) []sharestate.Range {
	i := 0
	for i < len(ds) && ds[i].Last < off {
		i++
	}
	ds = ds[i:]
	if len(ds) > 0 && ds[0].First < off {
		ds[0].First = off
	}
	return ds
}
