package main

// Tests of the version-2 rows' pure parts (and the two disk references,
// on a few KiB in a temporary directory).

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/sharelog/sharelog/bench/internal/report"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestAckRefRatio(t *testing.T) {
	// A 16-producer commit whose write + fdatasync p99 is 3 ms: the bar is
	// 2 × 3 + 1 = 7 ms.
	if got := ackRefRatio(7, 3); got != 1 {
		t.Fatalf("at the bar: %v, want 1", got)
	}
	bar := report.AtMostBar(1, "")
	if met, _ := bar.Met(ackRefRatio(6.9, 3)); !met {
		t.Fatal("6.9 ms against a 3 ms reference must meet the bar")
	}
	if met, _ := bar.Met(ackRefRatio(7.2, 3)); met {
		t.Fatal("7.2 ms against a 3 ms reference must miss the bar")
	}
	if !math.IsNaN(ackRefRatio(2, math.NaN())) {
		t.Fatal("a missing reference must give no ratio")
	}
}

func TestCommitBytes(t *testing.T) {
	for k, want := range map[int]int{1: 100 << 10, 4: 400 << 10, 16: 1600 << 10} {
		if got := commitBytes(k); got != want {
			t.Errorf("commitBytes(%d) = %d, want %d", k, got, want)
		}
	}
	// Every P2 configuration has a reference of its size.
	for _, c := range p2Configs {
		found := false
		for _, k := range commitRefProducers {
			found = found || k == c.producers
		}
		if !found || c.batch != 100 {
			t.Errorf("P2 config %+v has no group-commit reference", c)
		}
	}
}

func TestBandwidthRows(t *testing.T) {
	if got := payloadMiBps(1024, 1024); got != 1 {
		t.Fatalf("1024 rec/s of 1 KiB = %v MiB/s, want 1", got)
	}
	got := map[string]p1Config{}
	for _, c := range p1Configs {
		if k := bandwidthRow("p1", c); k != "" {
			got[k] = c
		}
	}
	for _, c := range p2Configs {
		if k := bandwidthRow("p2", c); k != "" {
			got[k] = c
		}
	}
	if len(got) != 2 || got["p1b"] != (p1Config{1000, 4}) || got["p2b"] != (p1Config{100, 16}) {
		t.Fatalf("bandwidth rows %v, want p1b = batch 1000 × 4, p2b = batch 100 × 16", got)
	}
	// Each key is declared as a row of its group, so the value is reported.
	for key, g := range map[string]group{"p1b": p1Group(), "p2b": p2Group()} {
		n := 0
		for _, r := range g.rows {
			if r.key == key && r.bar.Op == report.AtLeast {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d judged rows in its group, want 1", key, n)
		}
	}
}

func TestCPURows(t *testing.T) {
	specs := []rowSpec{{key: "a", cpu: true}, {key: "lat"}, {key: "b", cpu: true}, {key: "c", cpu: true}}
	rows := make([]report.Row, 4)
	rows[0] = report.Row{ID: "P1", Name: "batch 100"}
	rows[0].Ours.Add(1, nan, nan, 2, nan)
	rows[0].Ours.Add(1, nan, nan, 3, nan)
	rows[0].Peer.Add(1, nan, nan, 8, nan)
	rows[1] = report.Row{ID: "P2", Name: "latency"}
	rows[2] = report.Row{ID: "C1", Name: "4 consumers"}
	rows[2].Ours.Add(1, nan, nan, 5, nan)
	rows[2].Peer.Add(1, nan, nan, 8, nan)
	rows[3] = report.Row{ID: "S1", Name: "broken", Status: report.Failed, Reason: "order"}
	got := cpuRows(specs, rows)
	if len(got) != 3 {
		t.Fatalf("%d CPU rows, want 3 (the latency row has none)", len(got))
	}
	if got[0].ID != "CPU" || got[0].Name != "P1 batch 100" || got[0].Ratio != 2.5/8 || got[0].Verdict() != "met" {
		t.Fatalf("P1: %+v (%s)", got[0], got[0].Verdict())
	}
	if got[1].Ratio != 5.0/8 || got[1].Verdict() != "**missed**" {
		t.Fatalf("C1: ratio %v %s, want 0.625 missed", got[1].Ratio, got[1].Verdict())
	}
	if got[2].Status != report.Failed || got[2].Verdict() != "**FAILED**" {
		t.Fatalf("a failed source row must give a failed CPU row: %+v", got[2])
	}
	// The groups mark exactly the throughput rows of P, C and S with a
	// JetStream peer.
	e := &env{sz: quickSizes}
	for _, g := range groups(e) {
		for _, r := range g.rows {
			if r.cpu && (!r.peer || r.selfPeer || (r.id[0] != 'P' && r.id[0] != 'C' && r.id[0] != 'S')) {
				t.Errorf("%s %s: CPU judged without a JetStream peer", r.id, r.key)
			}
		}
	}
}

func TestAggregateSkipsDeliberatelyUnmeasuredRuns(t *testing.T) {
	spec := rowSpec{key: "s", dir: report.Custom, selfPeer: true, bar: report.AtLeastBar(10, "")}
	first := newRunOut()
	m := newMeas(5)
	m.ratio = 12
	first.set("s", m)
	first.set("s#peer", newMeas(60))
	later := newRunOut()
	later.skip([]string{"s"})
	r := aggregate(spec, []*runOut{first, later}, nil)
	if r.Status != report.OK || r.Ratio != 12 || len(r.Ours.Values) != 1 || len(r.Peer.Values) != 1 || r.Verdict() != "met" {
		t.Fatalf("skipped run must be left out: %+v", r)
	}
	// Without skip the same missing key is a harness bug.
	r = aggregate(spec, []*runOut{first, newRunOut()}, nil)
	if r.Status != report.Failed {
		t.Fatalf("an unmarked missing run must fail the row: %+v", r)
	}
}

func TestS2QuickShape(t *testing.T) {
	if quickSizes.s2Records < 1_000_000 {
		t.Fatalf("quick S2 partition %d records, want at least 1M", quickSizes.s2Records)
	}
	q := &env{sz: quickSizes}
	f := &env{sz: fullSizes}
	if q.s2Records() != quickSizes.s2Records || f.s2Records() != fullSizes.prefill {
		t.Fatalf("s2Records: quick %d, full %d", q.s2Records(), f.s2Records())
	}
	const n = 1_000_000
	on, off := sharelogv1.OsoMode_OSO_MODE_ON, sharelogv1.OsoMode_OSO_MODE_OFF
	for _, c := range []struct {
		want        int64
		mode        sharelogv1.OsoMode
		orderedOnce bool
		reps        int
	}{
		{10_000, on, true, 3}, {10_000, off, true, 1}, {10_000, off, false, 3},
		{500_000, on, false, 1}, {n, off, false, 1}, {1000, on, true, 3},
	} {
		if got := s2Reps(c.want, n, c.mode, c.orderedOnce); got != c.reps {
			t.Errorf("s2Reps(%d, %v, orderedOnce %v) = %d, want %d", c.want, c.mode, c.orderedOnce, got, c.reps)
		}
	}
}

func TestDiskReferences(t *testing.T) {
	dir := t.TempDir()
	lat, err := writeSyncLatency(dir, 4096, 3)
	if err != nil {
		t.Fatal(err)
	}
	if lat.Len() != 3 || lat.PercentileMs(99) <= 0 {
		t.Fatalf("%d samples, p99 %v ms", lat.Len(), lat.PercentileMs(99))
	}
	mibps, err := seqWrite(dir, 2)
	if err != nil || mibps <= 0 {
		t.Fatalf("seqWrite: %v MiB/s, %v", mibps, err)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("files left behind: %v %v", left, err)
	}
	if _, err := writeSyncLatency(filepath.Join(dir, "missing"), 4096, 1); err == nil {
		t.Fatal("a missing directory must be an error")
	}
}
