// Package keyhistory checks the delivery history of a key-ordered share
// group (docs/queues.md "Key-ordered share groups") as its consumers saw
// it: for every key of a share-partition, no two records were ever locked
// at the same time, the ACCEPTed offsets increase, and every produced
// record ended ACCEPTed, REJECTed or archived. It is what the tests of
// client/shareconsumer and of the Kafka listener (franz-go's share
// consumer) and interop/librdkafka's checker share; standard library
// only, so the interop tool can use it without the server.
//
// # What a consumer can know
//
// The server's lock of a record starts before the client returns the
// record (Got) and, when the acknowledgement is applied, ends after the
// client handed it over (Let). So [Got, Let] of a delivery whose
// acknowledgement was applied lies inside the server's lock, and two such
// intervals of one key that overlap prove two locks that overlapped. A
// delivery whose acknowledgement was refused or whose outcome is unknown
// proves less: its lock ended at some point the client did not see. Only
// a server restart ends locks here unless the consumer says otherwise
// (Lost: the lock expired; the tests acknowledge every record at once, so
// a lock outlives its hold), so such a delivery counts as held from Got until the first restart after it (the
// moment the old server began to stop) or Let, whichever is first; one
// got after the last restart began proves nothing (it may be a lock of the
// old server, void already, delivered late; or the lock of a consumer that
// was killed) and is left out, and counted (Report.Unproven).
//
// # No loss
//
// Every produced record must end with an applied ACCEPT or REJECT, or
// have been delivered limit times (archived at the limit). A record whose
// only settling acknowledgement has an unknown outcome (its consumer was
// killed before it learnt it) is counted apart (Report.Uncertain); the
// callers also require the server's share-partition start offsets to reach
// the end of the log, so such a record was settled by someone.
//
// # ACCEPT order
//
// The applied ACCEPTs of one key, in the order of their Let, must have
// strictly increasing offsets (which also rules out accepting a record
// twice). With the key's locks one at a time, Let order is apply order.
package keyhistory

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Ack is the acknowledgement a consumer gave a delivery.
type Ack int

const (
	NoAck Ack = iota
	Accept
	Release
	Reject
)

// Outcome is what became of an acknowledgement.
type Outcome int

const (
	Pending Outcome = iota // no outcome reported (yet)
	Applied                // the server applied it
	Refused                // the server refused it, or the client dropped it
	Unknown                // sent, its response lost: perhaps applied
	// Lost: the lock ended before the acknowledgement by something other
	// than a restart (it expired): when is not known, so the delivery
	// proves nothing.
	Lost
)

// Delivery is one delivery of a record to a consumer.
type Delivery struct {
	Partition string // topic and partition, e.g. "orders/3"
	Key       string
	Offset    int64
	Count     int       // the delivery count the server gave
	Got       time.Time // when the client returned the record
	Let       time.Time // when the acknowledgement was handed to the client; zero if none
	Ack       Ack
	Outcome   Outcome
}

// History collects deliveries and restarts; safe for concurrent use.
type History struct {
	mu         sync.Mutex
	deliveries []Delivery
	restarts   []time.Time // when each server stop began
}

// Got records a delivery of partition's offset with key and delivery count
// count, returned by the client now, and returns its id.
func (h *History) Got(partition, key string, offset int64, count int) int {
	return h.GotAt(partition, key, offset, count, time.Now())
}

// GotAt is Got at a given instant (for histories read from a log).
func (h *History) GotAt(partition, key string, offset int64, count int, at time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliveries = append(h.deliveries, Delivery{Partition: partition, Key: key, Offset: offset, Count: count, Got: at})
	return len(h.deliveries) - 1
}

// Let records that delivery id's acknowledgement a is handed to the client
// now: from here on the server may let go of the record.
func (h *History) Let(id int, a Ack) { h.LetAt(id, a, time.Now()) }

// LetAt is Let at a given instant.
func (h *History) LetAt(id int, a Ack, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliveries[id].Let, h.deliveries[id].Ack = at, a
}

// Outcome records what became of delivery id's acknowledgement.
func (h *History) Outcome(id int, o Outcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliveries[id].Outcome = o
}

// Stopping records that the server begins to stop now: every lock it
// holds ends by the time it has stopped.
func (h *History) Stopping() { h.StoppingAt(time.Now()) }

// StoppingAt is Stopping at a given instant.
func (h *History) StoppingAt(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.restarts = append(h.restarts, at)
}

// Report is the result of Check.
type Report struct {
	Deliveries int // deliveries recorded
	Checked    int // deliveries whose lock interval entered the overlap check
	Voided     int // of those, cut at a restart (acknowledgement not applied)
	Unproven   int // acknowledgement not applied, no restart after the delivery: not checked
	Accepted   int // applied ACCEPTs
	Rejected   int // applied REJECTs
	Archived   int // records neither accepted nor rejected, delivered limit times
	Uncertain  int // records settled, if at all, by an ACCEPT or REJECT of unknown outcome
	Violations []string
}

// Check checks the history against the produced records (partition ->
// offset -> key) with the group's delivery-count limit.
func (h *History) Check(produced map[string]map[int64]string, limit int) Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Report{Deliveries: len(h.deliveries)}
	type pk struct{ part, key string }
	type interval struct {
		from, to time.Time
		d        *Delivery
	}
	locks := map[pk][]interval{}
	accepts := map[pk][]*Delivery{}
	type rec struct {
		part string
		off  int64
	}
	accepted, rejected, uncertain := map[rec]int{}, map[rec]bool{}, map[rec]bool{}
	maxCount := map[rec]int{}
	for i := range h.deliveries {
		d := &h.deliveries[i]
		k := pk{d.Partition, d.Key}
		rk := rec{d.Partition, d.Offset}
		if want, ok := produced[d.Partition][d.Offset]; !ok {
			r.Violations = append(r.Violations, fmt.Sprintf("%s offset %d: delivered, never produced", d.Partition, d.Offset))
		} else if want != d.Key {
			r.Violations = append(r.Violations, fmt.Sprintf("%s offset %d: key %q, produced %q", d.Partition, d.Offset, d.Key, want))
		}
		maxCount[rk] = max(maxCount[rk], d.Count)
		if (d.Outcome == Unknown || d.Outcome == Pending) && (d.Ack == Accept || d.Ack == Reject) {
			uncertain[rk] = true // perhaps applied: a consumer killed after sending it, say
		}
		if d.Outcome == Applied && !d.Let.IsZero() {
			locks[k] = append(locks[k], interval{d.Got, d.Let, d})
			r.Checked++
			switch d.Ack {
			case Accept:
				accepts[k] = append(accepts[k], d)
				accepted[rk]++
				r.Accepted++
			case Reject:
				rejected[rk] = true
				r.Rejected++
			}
			continue
		}
		stop, ok := h.stopAfter(d.Got)
		if !ok || d.Outcome == Lost {
			r.Unproven++
			continue
		}
		to := stop
		if !d.Let.IsZero() && d.Let.Before(to) {
			to = d.Let
		}
		locks[k] = append(locks[k], interval{d.Got, to, d})
		r.Checked++
		r.Voided++
	}
	for k, ivs := range locks {
		slices.SortFunc(ivs, func(a, b interval) int { return a.from.Compare(b.from) })
		var last *interval
		for i := range ivs {
			iv := &ivs[i]
			if last != nil && iv.from.Before(last.to) {
				r.Violations = append(r.Violations, fmt.Sprintf("%s key %s: offset %d locked (got at +%v) while offset %d was (+%v to +%v)",
					k.part, k.key, iv.d.Offset, h.rel(iv.from), last.d.Offset, h.rel(last.from), h.rel(last.to)))
			}
			if last == nil || iv.to.After(last.to) {
				last = iv
			}
		}
	}
	for k, ds := range accepts {
		slices.SortFunc(ds, func(a, b *Delivery) int { return a.Let.Compare(b.Let) })
		for i := 1; i < len(ds); i++ {
			if ds[i].Offset <= ds[i-1].Offset {
				r.Violations = append(r.Violations, fmt.Sprintf("%s key %s: accepted %d after %d", k.part, k.key, ds[i].Offset, ds[i-1].Offset))
			}
		}
	}
	parts := make([]string, 0, len(produced))
	for p := range produced {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		offs := make([]int64, 0, len(produced[p]))
		for o := range produced[p] {
			offs = append(offs, o)
		}
		slices.SortFunc(offs, cmp.Compare)
		for _, o := range offs {
			rk := rec{p, o}
			switch {
			case accepted[rk] > 0 || rejected[rk]:
			case maxCount[rk] >= limit:
				r.Archived++
			case uncertain[rk]:
				r.Uncertain++
			case maxCount[rk] == 0:
				r.Violations = append(r.Violations, fmt.Sprintf("%s offset %d: never delivered", p, o))
			default:
				r.Violations = append(r.Violations, fmt.Sprintf("%s offset %d: delivered %d times, never accepted or rejected", p, o, maxCount[rk]))
			}
		}
	}
	return r
}

// stopAfter is the first restart that began after t. Caller holds mu.
func (h *History) stopAfter(t time.Time) (time.Time, bool) {
	for _, s := range h.restarts {
		if s.After(t) {
			return s, true
		}
	}
	return time.Time{}, false
}

// rel is t relative to the first delivery, for messages. Caller holds mu.
func (h *History) rel(t time.Time) time.Duration {
	if len(h.deliveries) == 0 {
		return 0
	}
	return t.Sub(h.deliveries[0].Got).Round(time.Microsecond)
}

// String is the report's figures in one line.
func (r Report) String() string {
	return fmt.Sprintf("%d deliveries: %d accepted, %d rejected, %d archived, %d settled by an acknowledgement of unknown outcome; "+
		"%d lock intervals checked (%d cut at a restart), %d unproven; %d violations",
		r.Deliveries, r.Accepted, r.Rejected, r.Archived, r.Uncertain, r.Checked, r.Voided, r.Unproven, len(r.Violations))
}
