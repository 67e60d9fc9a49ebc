package report

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBarMetAndScore(t *testing.T) {
	ge := AtLeastBar(2, "≥ 2× JetStream")
	le := AtMostBar(1.5, "≤ 1.5× null")
	cases := []struct {
		b         Bar
		ratio     float64
		met, ok   bool
		wantScore float64
	}{
		{ge, 3, true, true, 1.5},
		{ge, 2, true, true, 1},
		{ge, 1, false, true, 0.5},
		{le, 1.5, true, true, 1},
		{le, 0.75, true, true, 2},
		{le, 3, false, true, 0.5},
		{ge, math.NaN(), false, false, math.NaN()},
		{Bar{}, 5, false, false, math.NaN()},
	}
	for _, c := range cases {
		met, ok := c.b.Met(c.ratio)
		if met != c.met || ok != c.ok {
			t.Errorf("%v.Met(%v) = %v,%v want %v,%v", c.b.Text, c.ratio, met, ok, c.met, c.ok)
		}
		s := c.b.Score(c.ratio)
		if !(math.IsNaN(s) && math.IsNaN(c.wantScore)) && math.Abs(s-c.wantScore) > 1e-9 {
			t.Errorf("%v.Score(%v) = %v want %v", c.b.Text, c.ratio, s, c.wantScore)
		}
	}
	if s := le.Score(0); !math.IsInf(s, 1) {
		t.Errorf("zero latency ratio scores +Inf, got %v", s)
	}
}

func TestRowCompute(t *testing.T) {
	r := Row{Dir: OursOverPeer}
	r.Ours.Add(100, math.NaN(), math.NaN(), 1, 10)
	r.Ours.Add(140, math.NaN(), math.NaN(), 1, 10)
	r.Peer.Add(60, math.NaN(), math.NaN(), 1, 10)
	r.Compute()
	if r.Ratio != 2 || r.RatioLabel != "ours/peer" {
		t.Fatalf("throughput ratio %v %q", r.Ratio, r.RatioLabel)
	}
	l := Row{Dir: PeerOverOurs}
	l.Ours.Add(4, 0, 0, 0, 0)
	l.Peer.Add(2, 0, 0, 0, 0)
	l.Compute()
	if l.Ratio != 0.5 || l.RatioLabel != "peer/ours" {
		t.Fatalf("latency ratio %v %q", l.Ratio, l.RatioLabel)
	}
	n := Row{Dir: OursOverPeer}
	n.Ours.Add(1, 0, 0, 0, 0)
	n.Compute()
	if !math.IsNaN(n.Ratio) {
		t.Fatal("no peer: NaN ratio")
	}
}

func TestVerdict(t *testing.T) {
	r := Row{Ratio: 2.5, Bar: AtLeastBar(2, "≥ 2×")}
	if r.Verdict() != "met" {
		t.Fatal(r.Verdict())
	}
	r.Ratio = 1.2
	if r.Verdict() != "**missed**" {
		t.Fatal(r.Verdict())
	}
	r.Status = Unavailable
	if r.Verdict() != "n/a" {
		t.Fatal(r.Verdict())
	}
	r.Status = Failed
	if r.Verdict() != "**FAILED**" {
		t.Fatal(r.Verdict())
	}
	if (&Row{Ratio: 3}).Verdict() != "—" {
		t.Fatal("no bar")
	}
}

func TestHuman(t *testing.T) {
	cases := map[float64]string{
		1234567: "1.23M", 54321: "54.3k", 5432: "5432", 543.2: "543", 54.32: "54.3", 5.432: "5.43",
		0.5432: "0.543", 0.005432: "0.0054", 0: "0", 2.5e9: "2.50G", 100000: "100k",
	}
	for v, want := range cases {
		if got := Human(v); got != want {
			t.Errorf("Human(%v) = %q want %q", v, got, want)
		}
	}
	if Human(math.NaN()) != "—" {
		t.Fatal("NaN")
	}
	if got := WithSpread([]float64{50000, 54000, 52000}); got != "52.0k (50.0k–54.0k)" {
		t.Fatalf("spread %q", got)
	}
	if got := WithSpread([]float64{7}); got != "7.00" {
		t.Fatalf("single %q", got)
	}
	abs := Row{Ratio: 3.432, RatioAbs: true, RatioLabel: "ms past expiry"}
	if got := abs.RatioText(); got != "3.43 ms past expiry" {
		t.Fatalf("abs ratio %q", got)
	}
	if got := (&Row{Ratio: nan()}).RatioText(); got != "—" {
		t.Fatalf("no ratio %q", got)
	}
	if got := WithSpread(nil); got != "—" {
		t.Fatalf("none %q", got)
	}
}

func sampleReport() *Report {
	ok := Row{ID: "P1", Name: "batch 100, 1 producer", Unit: "rec/s", Dir: OursOverPeer, Bar: AtLeastBar(2, "≥ 2× JetStream")}
	ok.Ours.Add(200000, 0.4, 1.2, 3.5, 40)
	ok.Ours.Add(220000, 0.5, 1.4, 3.7, 41)
	ok.Peer.Add(50000, 8, 18, 9, 60)
	ok.Notes = []string{"HW verified"}
	ok.Compute()
	miss := Row{ID: "C2", Name: "ack of 1", Unit: "ms", Dir: Custom, Ratio: 2.0, RatioLabel: "ours/null", Bar: AtMostBar(1.5, "p50 ≤ 1.5× null")}
	miss.Ours.Add(0.3, 0.3, 0.9, math.NaN(), math.NaN())
	na := Row{ID: "C1", Name: "1 consumer", Unit: "rec/s", Bar: AtLeastBar(1.5, "≥ 1.5×"), Status: Unavailable, Reason: "UNIMPLEMENTED"}
	bad := Row{ID: "S1", Name: "ordered", Unit: "rec/s", Bar: AtLeastBar(2, "≥ 2×"), Status: Failed, Reason: "exactly-once violated: 3 missing"}
	lim := Row{Name: "null gRPC unary", Unit: "calls/s"}
	lim.Ours.Add(6500, 0.12, 0.6, math.NaN(), math.NaN())
	return &Report{Title: "t", Meta: [][2]string{{"mode", "quick"}}, Limits: []Row{lim}, Rows: []Row{ok, miss, na, bad},
		Methods: []string{"CPU from /proc"}}
}

func TestMarkdown(t *testing.T) {
	md := sampleReport().Markdown()
	for _, want := range []string{
		"| P1 | batch 100, 1 producer | rec/s | 210k (200k–220k) | 50.0k | 4.20× ours/peer |",
		"| 0.450 / 1.30 | 8.00 / 18.0 | 3.60 · 9.00 | 40.5 · 60.0 | ≥ 2× JetStream | met |",
		"| C2 | ack of 1 | ms | 0.300 |",
		"2.00× ours/null",
		"**missed**",
		"not available (UNIMPLEMENTED)",
		"| n/a |",
		"FAILED: exactly-once violated: 3 missing",
		"## Failed",
		"## Not available",
		"- P1 batch 100, 1 producer: HW verified",
		"| null gRPC unary | 6500 | calls/s | 0.120 / 0.600 |",
		"- CPU from /proc",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q\n%s", want, md)
		}
	}
	// Every table line has the same number of cells as the header.
	var header int
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| id |") {
			header = strings.Count(line, "|")
			continue
		}
		if header > 0 && strings.HasPrefix(line, "| ") {
			if got := strings.Count(strings.ReplaceAll(line, "\\|", ""), "|"); got != header {
				t.Errorf("row has %d separators, header %d: %s", got, header, line)
			}
		}
		if header > 0 && line == "" {
			header = 0
		}
	}
	met, missed, noBar, na, failed := sampleReport().Summary()
	if met != 1 || missed != 1 || noBar != 0 || na != 1 || failed != 1 {
		t.Fatalf("summary %d %d %d %d %d", met, missed, noBar, na, failed)
	}
}

func TestChart(t *testing.T) {
	rep := sampleReport()
	pts := ChartPoints(rep.Rows)
	if len(pts) != 4 {
		t.Fatalf("points %d", len(pts))
	}
	if !pts[0].Met || math.Abs(pts[0].Score-2.1) > 1e-9 || !strings.Contains(pts[0].Text, "4.20× ours/peer (bar ≥ 2)") {
		t.Fatalf("first point %+v", pts[0])
	}
	if pts[1].Met || math.Abs(pts[1].Score-0.75) > 1e-9 {
		t.Fatalf("second point %+v", pts[1])
	}
	if !math.IsNaN(pts[2].Score) || !strings.Contains(pts[2].Text, "UNIMPLEMENTED") {
		t.Fatalf("unavailable point %+v", pts[2])
	}
	file := filepath.Join(t.TempDir(), "c.png")
	if err := Chart("test", pts, file); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("not a PNG: %v", err)
	}
	if err := Chart("empty", nil, filepath.Join(t.TempDir(), "e.png")); err != nil {
		t.Fatal(err)
	}
	if clampLog(1e9) != 2 || clampLog(1e-9) != -2 || clampLog(math.NaN()) != 0 || clampLog(math.Inf(1)) != 2 {
		t.Fatal("clampLog")
	}
}

func nan() float64 { return math.NaN() }
