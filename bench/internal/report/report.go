// Package report turns benchmark measurements into the rows of
// bench/results/latest.md and the chart bench/results/latest.png: ratio and
// bar logic, number formatting and Markdown rendering.
package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/sharelog/sharelog/bench/internal/stats"
)

// Op is how a ratio is compared with its bar.
type Op int

const (
	// NoBar: the row is informational.
	NoBar Op = iota
	// AtLeast: met iff ratio >= threshold.
	AtLeast
	// AtMost: met iff ratio <= threshold.
	AtMost
)

// Bar is the target a row's ratio is judged against.
type Bar struct {
	Op        Op
	Threshold float64
	Text      string // as benchmarks.md words it
}

// AtLeastBar is met when the ratio is >= t.
func AtLeastBar(t float64, text string) Bar { return Bar{Op: AtLeast, Threshold: t, Text: text} }

// AtMostBar is met when the ratio is <= t.
func AtMostBar(t float64, text string) Bar { return Bar{Op: AtMost, Threshold: t, Text: text} }

// Met reports whether ratio meets the bar; ok is false when there is no bar
// or no ratio to judge.
func (b Bar) Met(ratio float64) (met, ok bool) {
	if b.Op == NoBar || math.IsNaN(ratio) || math.IsInf(ratio, 0) {
		return false, false
	}
	if b.Op == AtLeast {
		return ratio >= b.Threshold, true
	}
	return ratio <= b.Threshold, true
}

// Score normalises a ratio against the bar so that 1 is exactly the bar and
// larger is better for either direction (ratio/threshold for AtLeast,
// threshold/ratio for AtMost). NaN when there is nothing to judge.
func (b Bar) Score(ratio float64) float64 {
	if _, ok := b.Met(ratio); !ok {
		return math.NaN()
	}
	if b.Op == AtLeast {
		if b.Threshold == 0 {
			return math.NaN()
		}
		return ratio / b.Threshold
	}
	if ratio == 0 {
		return math.Inf(1)
	}
	return b.Threshold / ratio
}

func (b Bar) String() string {
	if b.Op == NoBar {
		return "—"
	}
	return b.Text
}

// Status of a row.
type Status int

const (
	// OK: measured and verified.
	OK Status = iota
	// Unavailable: the server answered UNIMPLEMENTED (feature not landed).
	Unavailable
	// Failed: a correctness check or an RPC failed; no number is printed.
	Failed
)

// Side is the measurement of one system (ours or the peer) across runs.
type Side struct {
	Values []float64 // the headline value of each run (throughput or latency)
	P50    []float64 // per run, ms (NaN = not measured)
	P99    []float64
	CPU    []float64 // CPU-seconds per 1M records, per run
	RSS    []float64 // peak RSS in MiB, per run
}

// Add appends one run.
func (s *Side) Add(value, p50, p99, cpuPerM, rssMiB float64) {
	s.Values = append(s.Values, value)
	s.P50 = append(s.P50, p50)
	s.P99 = append(s.P99, p99)
	s.CPU = append(s.CPU, cpuPerM)
	s.RSS = append(s.RSS, rssMiB)
}

// Has reports whether the side was measured at all.
func (s *Side) Has() bool { return stats.Summarize(s.Values).N > 0 }

// Median of the headline values.
func (s *Side) Median() float64 { return stats.Summarize(s.Values).Median }

// Direction of the ratio.
type Direction int

const (
	// OursOverPeer for throughput: higher is better.
	OursOverPeer Direction = iota
	// PeerOverOurs for latency and durations: lower is better.
	PeerOverOurs
	// Custom: the caller sets Row.Ratio itself.
	Custom
)

// Row is one line of the scenario table.
type Row struct {
	ID         string // scenario id of benchmarks.md, e.g. "P1"
	Name       string // sub-configuration
	Unit       string // unit of the headline values, e.g. "rec/s", "ms"
	PeerName   string // what the peer column holds; "" = JetStream
	Ours, Peer Side
	Dir        Direction
	Ratio      float64 // set by Compute (or by the caller for Custom)
	RatioLabel string  // e.g. "ours/peer"
	RatioAbs   bool    // the ratio is an absolute value in RatioLabel's unit (e.g. ms), not a factor
	Bar        Bar
	Status     Status
	Reason     string   // for Unavailable and Failed
	Notes      []string // shown under the table
}

// Compute fills Ratio from the medians for the OursOverPeer and PeerOverOurs
// directions. A side without values gives NaN.
func (r *Row) Compute() {
	switch r.Dir {
	case OursOverPeer:
		r.Ratio = div(r.Ours.Median(), r.Peer.Median())
		if r.RatioLabel == "" {
			r.RatioLabel = "ours/peer"
		}
	case PeerOverOurs:
		r.Ratio = div(r.Peer.Median(), r.Ours.Median())
		if r.RatioLabel == "" {
			r.RatioLabel = "peer/ours"
		}
	}
}

func div(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

// RatioText formats the ratio column: "2.31× ours/peer", or for an
// absolute value "3.43 ms past expiry".
func (r *Row) RatioText() string {
	if math.IsNaN(r.Ratio) {
		return "—"
	}
	if r.RatioAbs {
		return Human(r.Ratio) + " " + r.RatioLabel
	}
	return trim(r.Ratio, 3) + "× " + r.RatioLabel
}

// Verdict is the "met" column.
func (r *Row) Verdict() string {
	switch r.Status {
	case Unavailable:
		return "n/a"
	case Failed:
		return "**FAILED**"
	}
	met, ok := r.Bar.Met(r.Ratio)
	switch {
	case !ok && r.Bar.Op == NoBar:
		return "—"
	case !ok:
		return "?"
	case met:
		return "met"
	default:
		return "**missed**"
	}
}

// Human formats v compactly: 1234567 -> "1.23M", 5432 -> "5.43k",
// 0.0123 -> "0.0123".
func Human(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	if math.IsInf(v, 0) {
		return "∞"
	}
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trim(v/1e9, 3) + "G"
	case a >= 1e6:
		return trim(v/1e6, 3) + "M"
	case a >= 1e4:
		return trim(v/1e3, 3) + "k"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a == 0:
		return "0"
	case a >= 0.01:
		return fmt.Sprintf("%.3f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

// trim formats with sig significant digits.
func trim(v float64, sig int) string {
	d := sig - 1 - int(math.Floor(math.Log10(math.Abs(v))))
	if d < 0 {
		d = 0
	}
	return fmt.Sprintf("%.*f", d, v)
}

// WithSpread formats the median of xs and, for more than one run, the
// min–max range: "52.1k (49.8k–54.0k)".
func WithSpread(xs []float64) string {
	s := stats.Summarize(xs)
	if s.N == 0 {
		return "—"
	}
	if s.N == 1 || s.Min == s.Max {
		return Human(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", Human(s.Median), Human(s.Min), Human(s.Max))
}

// medianOf is the median of xs or NaN.
func medianOf(xs []float64) float64 { return stats.Summarize(xs).Median }

// pair formats "ours · peer" for secondary columns.
func pair(ours, peer []float64, unit string) string {
	o, p := medianOf(ours), medianOf(peer)
	if math.IsNaN(o) && math.IsNaN(p) {
		return "—"
	}
	return Human(o) + " · " + Human(p) + unit
}

func latency(s *Side) string {
	p50, p99 := medianOf(s.P50), medianOf(s.P99)
	if math.IsNaN(p50) && math.IsNaN(p99) {
		return "—"
	}
	return Human(p50) + " / " + Human(p99)
}

// Report is the whole result file.
type Report struct {
	Title   string
	Meta    [][2]string // key, value lines under the title
	Limits  []Row       // machine limits (no peer, no bar)
	Rows    []Row
	Methods []string // how things were measured
}

func esc(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// Markdown renders the report.
func (rep *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", rep.Title)
	for _, kv := range rep.Meta {
		fmt.Fprintf(&b, "- **%s:** %s\n", kv[0], kv[1])
	}
	b.WriteString("\n## Machine limits (same run)\n\n")
	b.WriteString("| limit | value | unit | p50 / p99 ms | notes |\n|---|---|---|---|---|\n")
	for i := range rep.Limits {
		r := &rep.Limits[i]
		val := WithSpread(r.Ours.Values)
		if r.Status != OK {
			val = statusText(r)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", esc(r.Name), val, r.Unit, latency(&r.Ours), esc(strings.Join(r.Notes, "; ")))
	}
	b.WriteString("\n## Scenarios\n\n")
	b.WriteString("Ours = sharelog, peer = NATS JetStream unless the peer column says otherwise. " +
		"Values are medians over the runs with the min–max spread in parentheses; " +
		"p50/p99 and CPU/RSS columns are medians, ours · peer.\n\n")
	b.WriteString("| id | scenario | unit | ours | peer | ratio | p50 / p99 ms (ours) | p50 / p99 ms (peer) | CPU-s per 1M rec (ours · peer) | peak RSS MiB (ours · peer) | bar | met |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if r.Status != OK {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | | | | | | | %s | %s |\n",
				r.ID, esc(r.Name), r.Unit, esc(statusText(r)), esc(r.Bar.String()), r.Verdict())
			continue
		}
		peer := WithSpread(r.Peer.Values)
		if r.PeerName != "" && r.Peer.Has() {
			peer += " " + r.PeerName
		}
		ratio := r.RatioText()
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.ID, esc(r.Name), r.Unit, WithSpread(r.Ours.Values), esc(peer), esc(ratio),
			latency(&r.Ours), latency(&r.Peer), pair(r.Ours.CPU, r.Peer.CPU, ""), pair(r.Ours.RSS, r.Peer.RSS, ""),
			esc(r.Bar.String()), r.Verdict())
	}
	var unavailable, failed, notes []string
	for i := range rep.Rows {
		r := &rep.Rows[i]
		switch r.Status {
		case Unavailable:
			unavailable = append(unavailable, fmt.Sprintf("- %s %s: %s", r.ID, r.Name, r.Reason))
		case Failed:
			failed = append(failed, fmt.Sprintf("- %s %s: %s", r.ID, r.Name, r.Reason))
		}
		for _, n := range r.Notes {
			notes = append(notes, fmt.Sprintf("- %s %s: %s", r.ID, r.Name, n))
		}
	}
	if len(failed) > 0 {
		b.WriteString("\n## Failed (correctness check or RPC error — no number printed)\n\n")
		b.WriteString(strings.Join(failed, "\n") + "\n")
	}
	if len(unavailable) > 0 {
		b.WriteString("\n## Not available\n\n")
		b.WriteString(strings.Join(unavailable, "\n") + "\n")
	}
	if len(notes) > 0 {
		b.WriteString("\n## Per-scenario notes (verification, spread, details)\n\n")
		b.WriteString(strings.Join(notes, "\n") + "\n")
	}
	if len(rep.Methods) > 0 {
		b.WriteString("\n## Method\n\n")
		for _, m := range rep.Methods {
			b.WriteString("- " + m + "\n")
		}
	}
	return b.String()
}

func statusText(r *Row) string {
	switch r.Status {
	case Unavailable:
		return "not available (" + r.Reason + ")"
	case Failed:
		return "FAILED: " + r.Reason
	}
	return ""
}

// Summary counts rows by verdict.
func (rep *Report) Summary() (met, missed, noBar, unavailable, failed int) {
	for i := range rep.Rows {
		switch v := rep.Rows[i].Verdict(); v {
		case "met":
			met++
		case "**missed**":
			missed++
		case "n/a":
			unavailable++
		case "**FAILED**":
			failed++
		default:
			noBar++
		}
	}
	for i := range rep.Limits {
		if rep.Limits[i].Status == Failed {
			failed++
		}
	}
	return
}
