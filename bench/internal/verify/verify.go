// Package verify holds the correctness checks every scenario runs, so that a
// broken scenario fails loudly instead of printing a number: exactly-once
// delivery over a dense offset range, and an order-independent fingerprint of
// a key -> offset map (the OSO vs ordered invariant).
package verify

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
)

// Tracker counts deliveries of every offset in [base, base+n). It is safe
// for concurrent use.
type Tracker struct {
	base       int64
	counts     []atomic.Uint32
	outOfRange atomic.Int64
}

// NewTracker tracks offsets [base, base+n).
func NewTracker(base, n int64) *Tracker {
	return &Tracker{base: base, counts: make([]atomic.Uint32, n)}
}

// Deliver records one delivery of off and reports whether it was the first.
func (t *Tracker) Deliver(off int64) bool {
	i := off - t.base
	if i < 0 || i >= int64(len(t.counts)) {
		t.outOfRange.Add(1)
		return false
	}
	return t.counts[i].Add(1) == 1
}

// Count is how often off was delivered.
func (t *Tracker) Count(off int64) uint32 {
	i := off - t.base
	if i < 0 || i >= int64(len(t.counts)) {
		return 0
	}
	return t.counts[i].Load()
}

// Result summarises a Tracker.
type Result struct {
	Expected   int64 // offsets tracked
	Delivered  int64 // distinct offsets delivered at least once
	Missing    int64 // offsets never delivered
	Duplicates int64 // deliveries beyond the first, summed
	OutOfRange int64 // deliveries of offsets outside the range
	FirstMiss  int64 // first missing offset, -1 if none
}

// Result counts missing and duplicate deliveries.
func (t *Tracker) Result() Result {
	r := Result{Expected: int64(len(t.counts)), OutOfRange: t.outOfRange.Load(), FirstMiss: -1}
	for i := range t.counts {
		c := int64(t.counts[i].Load())
		switch {
		case c == 0:
			r.Missing++
			if r.FirstMiss < 0 {
				r.FirstMiss = t.base + int64(i)
			}
		default:
			r.Delivered++
			r.Duplicates += c - 1
		}
	}
	return r
}

// ExactlyOnce is nil iff every offset was delivered exactly once and nothing
// outside the range was.
func (r Result) ExactlyOnce() error {
	if r.Missing == 0 && r.Duplicates == 0 && r.OutOfRange == 0 {
		return nil
	}
	return fmt.Errorf("exactly-once violated: %d of %d offsets missing (first %d), %d duplicate deliveries, %d out of range",
		r.Missing, r.Expected, r.FirstMiss, r.Duplicates, r.OutOfRange)
}

// AtLeastOnce is nil iff every offset was delivered and nothing outside the
// range was; duplicates are allowed (and reported by the caller).
func (r Result) AtLeastOnce() error {
	if r.Missing == 0 && r.OutOfRange == 0 {
		return nil
	}
	return fmt.Errorf("at-least-once violated: %d of %d offsets missing (first %d), %d out of range",
		r.Missing, r.Expected, r.FirstMiss, r.OutOfRange)
}

// MapHash is an order-independent fingerprint of a set of (key, offset)
// pairs: the count and the wrapping sum of a 64-bit hash of each pair. Two
// streams that deliver the same key -> latest-offset map give equal values
// whatever the order. It is safe for concurrent use.
type MapHash struct {
	mu    sync.Mutex
	count int64
	sum   uint64
}

// Add includes one (key, offset) pair.
func (m *MapHash) Add(key []byte, offset int64) {
	h := fnv.New64a()
	h.Write(key)
	var b [9]byte
	b[0] = 0xff // separator: "ab"+1 and "a"+"b1" differ
	binary.BigEndian.PutUint64(b[1:], uint64(offset))
	h.Write(b[:])
	v := h.Sum64()
	m.mu.Lock()
	m.count++
	m.sum += v
	m.mu.Unlock()
}

// Value returns the count and the fingerprint.
func (m *MapHash) Value() (int64, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count, m.sum
}

// Equal compares two fingerprints.
func (m *MapHash) Equal(o *MapHash) bool {
	c1, s1 := m.Value()
	c2, s2 := o.Value()
	return c1 == c2 && s1 == s2
}
