package main

// Tests of the harness's pure parts: no server, no network, instant.

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/bench/internal/report"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestKeyLayoutFractions(t *testing.T) {
	const n = 1_000_000
	want := map[string]int64{"0.1%": 1000, "1%": 10_000, "5%": 50_000, "50%": 500_000, "100%": n}
	for _, f := range s2Fractions {
		if got := expectedCount(f.prefix, n); got != want[f.name] {
			t.Errorf("%s: %d records, want %d", f.name, got, want[f.name])
		}
	}
	// expectedCount agrees with counting keys one by one, also for sizes
	// that are not a multiple of 1000, and keys are distinct and prefixed.
	for _, n := range []int64{1, 999, 1000, 12_345} {
		counts := map[byte]int64{}
		seen := map[string]bool{}
		for i := range n {
			k := dataKey(i)
			if seen[string(k)] {
				t.Fatalf("duplicate key %s", k)
			}
			seen[string(k)] = true
			if k[1] != '/' || k[0] != keyGroup(i) {
				t.Fatalf("key %s of record %d", k, i)
			}
			counts[k[0]]++
		}
		for _, f := range s2Fractions[:4] {
			if got := expectedCount(f.prefix, n); got != counts[f.prefix[0]] {
				t.Errorf("n=%d prefix %s: expectedCount %d, counted %d", n, f.prefix, got, counts[f.prefix[0]])
			}
		}
	}
	// Spread evenly: every block of 1000 offsets holds exactly one "a/" key.
	for blk := int64(0); blk < 5; blk++ {
		var a int
		for i := blk * 1000; i < (blk+1)*1000; i++ {
			if keyGroup(i) == 'a' {
				a++
			}
		}
		if a != 1 {
			t.Fatalf("block %d has %d a/ keys", blk, a)
		}
	}
}

func TestPatternIsABA(t *testing.T) {
	got := pattern(3, true)
	want := []bool{true, false, true, false, true}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("pattern(3, peer) = %v", got)
		}
	}
	if p := pattern(2, false); len(p) != 2 || !p[0] || !p[1] {
		t.Fatalf("ours only: %v", p)
	}
}

func TestAggregate(t *testing.T) {
	spec := rowSpec{key: "k", id: "P1", name: "x", unit: "rec/s", dir: report.OursOverPeer, peer: true, bar: report.AtLeastBar(2, "≥ 2×")}
	run := func(v float64) *runOut {
		o := newRunOut()
		m := newMeas(v)
		m.note = "verified"
		o.set("k", m)
		return o
	}
	r := aggregate(spec, []*runOut{run(300), run(500)}, []*runOut{run(200)})
	if r.Status != report.OK || r.Ratio != 2 || r.Verdict() != "met" {
		t.Fatalf("%+v", r)
	}
	if len(r.Notes) != 1 {
		t.Fatalf("identical notes must be merged: %v", r.Notes)
	}

	unavail := newRunOut()
	unavail.part([]string{"k"}, func() error { return classify("X.Y", statusUnimplemented()) })
	r = aggregate(spec, []*runOut{unavail, unavail}, []*runOut{run(200)})
	if r.Status != report.Unavailable || r.Verdict() != "n/a" || !strings.Contains(r.Notes[0], "X.Y answered UNIMPLEMENTED") {
		t.Fatalf("unavailable: %+v", r)
	}

	broken := newRunOut()
	broken.part([]string{"k"}, func() error { return errors.New("exactly-once violated") })
	r = aggregate(spec, []*runOut{run(300), broken}, []*runOut{run(200)})
	if r.Status != report.Failed || !strings.Contains(r.Reason, "exactly-once") {
		t.Fatalf("one failed run fails the row: %+v", r)
	}

	panicky := newRunOut()
	panicky.part([]string{"k"}, func() error { panic("boom") })
	if !strings.Contains(panicky.errs["k"].Error(), "panic: boom") {
		t.Fatalf("panic not captured: %v", panicky.errs)
	}

	r = aggregate(spec, []*runOut{newRunOut()}, nil)
	if r.Status != report.Failed || !strings.Contains(r.Reason, "not measured") {
		t.Fatalf("a silently missing measurement must fail: %+v", r)
	}

	custom := rowSpec{key: "c", dir: report.Custom, selfPeer: true, bar: report.AtMostBar(1.1, "")}
	o1, o2 := newRunOut(), newRunOut()
	for i, o := range []*runOut{o1, o2} {
		m := newMeas(10)
		m.ratio = []float64{1.0, 1.2}[i]
		o.set("c", m)
		o.set("c#peer", newMeas(9))
	}
	r = aggregate(custom, []*runOut{o1, o2}, nil)
	if math.Abs(r.Ratio-1.1) > 1e-9 || !r.Peer.Has() || r.Verdict() != "met" {
		t.Fatalf("custom/self-peer: %+v", r)
	}
	// A part that fails marks its self-peer key too.
	o3 := newRunOut()
	o3.part([]string{"c"}, func() error { return errors.New("x") })
	if o3.errs["c#peer"] == nil {
		t.Fatal("self-peer key not marked")
	}
}

func statusUnimplemented() error { return status.Error(codes.Unimplemented, "not yet") }

func TestClaimer(t *testing.T) {
	c := &claimer{total: 250}
	var got int
	for {
		_, n := c.claim(100)
		if n == 0 {
			break
		}
		got += n
	}
	if got != 250 {
		t.Fatalf("claimed %d", got)
	}
}

func TestAckBatches(t *testing.T) {
	acq := []acquired{{partition: 0, first: 10, last: 19}, {partition: 0, first: 20, last: 24}, {partition: 1, first: 5, last: 6}}
	acc := acceptAll(acq)
	if len(acc[0]) != 1 || acc[0][0].FirstOffset != 10 || acc[0][0].LastOffset != 24 || len(acc[1]) != 1 {
		t.Fatalf("adjacent ranges merge per partition: %v", acc)
	}
	types := make([]sharelogv1.AcknowledgeType, 17)
	for i := range types {
		types[i] = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT
	}
	types[12] = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE // offset 22
	b := perOffsetBatches(acq, types)
	if len(b[0]) != 2 || len(b[0][0].AcknowledgeTypes) != 1 || len(b[0][1].AcknowledgeTypes) != 5 ||
		b[0][1].AcknowledgeTypes[2] != sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE {
		t.Fatalf("one type per offset only where they differ: %v", b)
	}
	if offPart(acq, 0) != 0 || offPart(acq, 15) != 1 || offPart(acq, 17) != -1 {
		t.Fatal("offPart")
	}
}

func TestC4DecideDistribution(t *testing.T) {
	var rel, rej int
	for off := range int64(100_000) {
		switch c4Decide(off, 1) {
		case fateRelease:
			rel++
		case fateReject:
			rej++
		}
	}
	if rel < 9_500 || rel > 10_500 || rej < 800 || rej > 1_200 {
		t.Fatalf("release %d, reject %d of 100000", rel, rej)
	}
	if first, again := c4Decide(42, 3), c4Decide(42, 3); first != again {
		t.Fatal("not deterministic")
	}
}

func TestC4Ledger(t *testing.T) {
	now := time.Now()
	l := newC4Ledger(3)
	for off := int64(0); off < 3; off++ {
		l.deliver(off, 1, now, true) // the dying consumer holds everything
	}
	// Its records come back with count 2 (a c4Dead of 3 for this test).
	for off := int64(0); off < 3; off++ {
		l.deliver(off, 2, now.Add(time.Second+time.Duration(off)*time.Millisecond), false)
	}
	l.settle(0, 2, fateAccept)
	l.settle(1, 2, fateReject)
	l.settle(2, 2, fateRelease) // released: still open
	if l.remaining() != 1 {
		t.Fatalf("remaining %d", l.remaining())
	}
	for c := int32(3); c <= c4Limit; c++ {
		l.deliver(2, c, now, false)
		l.settle(2, c, fateRelease) // the last one is at the limit: archived
	}
	if l.remaining() != 0 || l.archived != 1 {
		t.Fatalf("remaining %d archived %d", l.remaining(), l.archived)
	}
	if _, err := l.check(now, time.Second); err == nil || !strings.Contains(err.Error(), "held 3 records") {
		t.Fatalf("the dead consumer must hold %d: %v", c4Dead, err)
	}
	// Violations: a wrong delivery count, a delivery after final.
	l2 := newC4Ledger(2)
	l2.deliver(0, 2, now, false)
	l2.settle(0, 2, fateAccept)
	l2.deliver(0, 3, now, false)
	if _, err := l2.check(now, time.Second); err == nil || !strings.Contains(err.Error(), "delivery count 2, observed deliveries 1") ||
		!strings.Contains(err.Error(), "after it was final") {
		t.Fatalf("violations not reported: %v", err)
	}
}

func TestTailTimes(t *testing.T) {
	tt := newTailTimes(10)
	for off := int64(0); off < 3; off++ {
		tt.acked(off)
		tt.received(off)
	}
	lat, err := tt.result(3)
	if err != nil || lat.Len() != 3 {
		t.Fatalf("%v %v", lat, err)
	}
	tt.received(1)
	if _, err := tt.result(3); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("duplicate not reported: %v", err)
	}
	t2 := newTailTimes(10)
	t2.acked(0)
	if _, err := t2.result(1); err == nil || !strings.Contains(err.Error(), "never delivered") {
		t.Fatalf("lost record not reported: %v", err)
	}
	if err := t2.waitFor(1, 10*time.Millisecond); err == nil {
		t.Fatal("waitFor must time out")
	}
}

func TestWindow(t *testing.T) {
	t0 := time.Now()
	var s []sample
	for i := range 10 {
		s = append(s, sample{at: t0.Add(time.Duration(i) * time.Second), lat: time.Duration(i) * time.Millisecond})
	}
	w := window(s, t0.Add(2*time.Second), t0.Add(5*time.Second))
	if w.Len() != 3 || w.PercentileMs(100) != 4 {
		t.Fatalf("window: %d samples, max %v", w.Len(), w.PercentileMs(100))
	}
}
