// Command bench runs sharelog's benchmark suite (bench/README.md)
// against NATS JetStream on loopback and writes results/latest.md and
// results/latest.png.
//
//	go run ./cmd/bench -quick      # reduced sizes, a few minutes on 2 cores
//	go run ./cmd/bench             # full sizes
//	go run ./cmd/bench -only P1,C1 # a subset
//	go run ./cmd/bench -quick -only P1,C1 -acl-bindings 100 # with authorization
//
// Both servers run as child processes: sharelog built from ../cmd/server,
// nats-server built from the module pinned in go.mod. CPU time and peak RSS
// of each server are read from /proc/<pid>/stat and /proc/<pid>/status.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
)

// sizes are the knobs that differ between -quick and the full run.
type sizes struct {
	reps int // runs of ours; the peer runs reps-1 times, interleaved A/B/A

	p1Single, p1Batched  int64 // records per P1 configuration (batch 1 / batch >= 100)
	p1Cap                time.Duration
	p2Records            int64
	p2Cap                time.Duration
	g1Calls1, g1Calls100 int

	prefill int64 // records of the C1/C2/S1/S2 partition
	// S2 on a partition of its own of this many records (0 = S2 uses the
	// prefill partition), measured in the first run of ours only when
	// s2FirstRunOnly, with one ordered scan per prefix when s2OrderedOnce.
	s2Records      int64
	s2FirstRunOnly bool
	s2OrderedOnce  bool
	c1Cap          time.Duration
	c2Acks         int
	c3Dur          time.Duration
	c4Recs         int64
	c4Lock         time.Duration
	c6Recs         int64 // C6: records per part (backoff, deliver-at)
	d1Total        int64
	d1Purge        int64
	d1Base         time.Duration
	s3Dur          time.Duration
	k1Calls        int   // K1: Produce calls of 100 records each way
	k2Recs         int64 // K2: records each share consumer group drains
	k3Calls        int   // K3: batches of 100 per producer each way
	k4Recs         int64 // K4: records consumed each way
	s4Recs         int64 // S4: records of the partition backfilled each way

	// Cluster mode (X1–X3): records per side of X1 and X2 and their cap;
	// --lease-ttl; X3's load before the SIGKILL and after the first write
	// through a standby.
	xRecords  int64
	xCap      time.Duration
	xLeaseTTL time.Duration
	xBefore   time.Duration
	xAfter    time.Duration
	// X4: records per instance count (1, 2, 3) and run, spread evenly over
	// its partitions; its cap is xCap.
	x4Records int64

	unaryDur    time.Duration
	seqWriteMiB int
	fsyncN      int
	commitRefN  int // write + fdatasync calls per P2 reference size
}

var quickSizes = sizes{
	reps: 2, p1Single: 8000, p1Batched: 200_000, p1Cap: 5 * time.Second, p2Records: 60_000, p2Cap: 4 * time.Second,
	g1Calls1: 1500, g1Calls100: 300,
	prefill: 100_000, s2Records: 1_000_000, s2FirstRunOnly: true, s2OrderedOnce: true, c1Cap: 40 * time.Second, c2Acks: 300, c3Dur: 3 * time.Second, c4Recs: 10_000, c4Lock: time.Second, c6Recs: 1000,
	d1Total: 120_000, d1Purge: 100_000, d1Base: 1500 * time.Millisecond, s3Dur: 5 * time.Second,
	k1Calls: 500, k2Recs: 100_000, k3Calls: 300, k4Recs: 200_000, s4Recs: 200_000,
	xRecords: 30_000, xCap: 60 * time.Second, xLeaseTTL: 2 * time.Second, xBefore: 2 * time.Second, xAfter: 2 * time.Second, x4Records: 30_000,
	unaryDur: 2 * time.Second, seqWriteMiB: 256, fsyncN: 300, commitRefN: 200,
}

var fullSizes = sizes{
	reps: 3, p1Single: 40_000, p1Batched: 1_000_000, p1Cap: 20 * time.Second, p2Records: 300_000, p2Cap: 15 * time.Second,
	g1Calls1: 5000, g1Calls100: 2000,
	prefill: 1_000_000, c1Cap: 180 * time.Second, c2Acks: 2000, c3Dur: 10 * time.Second, c4Recs: 50_000, c4Lock: time.Second, c6Recs: 4000,
	d1Total: 1_200_000, d1Purge: 1_000_000, d1Base: 3 * time.Second, s3Dur: 60 * time.Second,
	k1Calls: 2000, k2Recs: 400_000, k3Calls: 1000, k4Recs: 1_000_000, s4Recs: 1_000_000,
	xRecords: 200_000, xCap: 180 * time.Second, xLeaseTTL: 5 * time.Second, xBefore: 5 * time.Second, xAfter: 5 * time.Second, x4Records: 240_000,
	unaryDur: 5 * time.Second, seqWriteMiB: 512, fsyncN: 2000, commitRefN: 1000,
}

// env is what every scenario gets.
type env struct {
	sz          sizes
	quick       bool
	sharelogBin string
	natsBin     string
	work        string // temp dir for data
	runDir      string // data directories of the current run (removed after it)
	keep        bool
	natsVersion string
	logf        func(string, ...any)

	// Machine limits measured at the start, used by bars that refer to them.
	nullP50   float64         // ms, plain grpc-go unary round trip
	fsyncP99  float64         // ms, 4 KiB append + fsync
	seqWrite  float64         // MiB/s, sequential write + one fdatasync
	commitP99 map[int]float64 // ms, write + fdatasync of one group commit at P2's producer counts
}

// dataDir makes a fresh directory for one server instance.
func (e *env) dataDir(name string) (string, error) {
	base := e.runDir
	if base == "" {
		base = e.work
	}
	return os.MkdirTemp(base, name+"-")
}

// rowSpec declares a table row a group produces.
type rowSpec struct {
	key        string
	id, name   string
	unit       string
	dir        report.Direction
	bar        report.Bar
	peer       bool   // measured on the peer runs
	selfPeer   bool   // the peer column comes from key+"#peer" of our own runs
	peerName   string // label of a self-peer column
	ratioLabel string
	ratioAbs   bool // the per-run ratio is an absolute value (unit in ratioLabel)
	cpu        bool // judge server CPU per 1M records against the peer's (cpuRows)
}

// group is a set of rows measured on one server instance per run.
type group struct {
	name string
	ids  []string // scenario ids, for -only
	rows []rowSpec
	ours func(ctx context.Context, e *env, rep int, o *runOut) error
	peer func(ctx context.Context, e *env, rep int, o *runOut) error // nil: ours only
	max  time.Duration                                               // timeout per run
}

func main() {
	if os.Getenv(nullServerEnv) == "1" {
		runNullServer()
		return
	}
	quick := flag.Bool("quick", false, "reduced sizes (a few minutes on 2 cores)")
	only := flag.String("only", "", "comma-separated scenario ids to run (e.g. P1,C1,S2); machine limits always run")
	out := flag.String("out", "results", "directory for latest.md and latest.png")
	repo := flag.String("repo", "..", "sharelog repository root (holds cmd/server)")
	keep := flag.Bool("keep", false, "keep the temporary data directories")
	reps := flag.Int("reps", 0, "runs of ours per scenario (default 2 quick, 3 full); the peer runs one fewer, interleaved")
	aclBindings := flag.Int("acl-bindings", 0, "run sharelog with --authorizer acl and this many ACL bindings, the scenarios as an ordinary principal allowed by some of them (0 = no authorization)")
	flag.Parse()

	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	sz := fullSizes
	if *quick {
		sz = quickSizes
	}
	if *reps > 0 {
		sz.reps = *reps
	}
	if d := profileDir(); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			logf("bench: %v", err)
			os.Exit(1)
		}
	}
	currentGroup.Store("limits")
	benchACL.bindings = *aclBindings
	code, err := run(*quick, sz, *only, *out, *repo, *keep, logf)
	if err != nil {
		logf("bench: %v", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(quick bool, sz sizes, only, outDir, repo string, keep bool, logf func(string, ...any)) (int, error) {
	start := time.Now()
	benchDir, err := os.Getwd()
	if err != nil {
		return 1, err
	}
	repoRoot, err := filepath.Abs(repo)
	if err != nil {
		return 1, err
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "cmd", "server")); err != nil {
		return 1, fmt.Errorf("-repo %s has no cmd/server: %w", repoRoot, err)
	}
	work, err := os.MkdirTemp("", "sharelog-bench-")
	if err != nil {
		return 1, err
	}
	if !keep {
		defer os.RemoveAll(work)
	} else {
		logf("keeping %s", work)
	}
	if err := setupACL(benchACL.bindings, work); err != nil {
		return 1, err
	}
	ctx := context.Background()
	slBin, natsBin, err := build(ctx, repoRoot, benchDir, filepath.Join(work, "bin"), logf)
	if err != nil {
		return 1, err
	}
	e := &env{sz: sz, quick: quick, sharelogBin: slBin, natsBin: natsBin, work: work, logf: logf, keep: keep}
	if out, err := exec.Command(natsBin, "--version").CombinedOutput(); err == nil {
		e.natsVersion = strings.TrimSpace(string(out))
	}

	want := map[string]bool{}
	for _, id := range strings.Split(only, ",") {
		if id = strings.TrimSpace(strings.ToUpper(id)); id != "" {
			want[id] = true
		}
	}

	rep := &report.Report{Title: "sharelog benchmarks vs NATS JetStream"}
	if benchACL.bindings > 0 {
		rep.Title += fmt.Sprintf(" (sharelog with --authorizer acl and %d bindings; Kafka scenarios without)", benchACL.bindings)
		logf("sharelog runs with --authorizer acl and %d ACL bindings", benchACL.bindings)
	}
	logf("machine limits (start)")
	limStart := machineLimits(ctx, e)
	e.nullP50 = limStart.nullP50
	e.fsyncP99 = limStart.fsyncP99
	e.seqWrite = limStart.seqWrite
	e.commitP99 = limStart.commitP99

	failed := false
	for _, g := range groups(e) {
		if len(want) > 0 && !anyWanted(g.ids, want) {
			continue
		}
		rows := runGroup(ctx, e, g)
		rep.Rows = append(rep.Rows, rows...)
		rep.Rows = append(rep.Rows, cpuRows(g.rows, rows)...)
	}
	logf("machine limits (end)")
	currentGroup.Store("limits")
	limEnd := machineLimits(ctx, e)
	rep.Limits = mergeLimits(limStart.rows, limEnd.rows)

	mode := "full"
	if quick {
		mode = "quick (-quick: reduced sizes; numbers are indicative)"
	}
	rep.Meta = append(rep.Meta,
		[2]string{"date", time.Now().Format(time.RFC3339)},
		[2]string{"mode", mode},
		[2]string{"runs", fmt.Sprintf("ours %d, peer %d, interleaved A/B/A… (ours, peer, ours, …); median and min–max shown", sz.reps, sz.reps-1)},
		[2]string{"machine", machineInfo()},
		[2]string{"sharelog", describeRepo(repoRoot)},
		[2]string{"peer", e.natsVersion + " (child process, JetStream file storage, loopback TCP), client nats.go " + moduleVersion("github.com/nats-io/nats.go")},
		[2]string{"wall time", time.Since(start).Round(time.Second).String()},
	)
	rep.Methods = methods(e)
	met, missed, noBar, na, nfail := rep.Summary()
	rep.Meta = append(rep.Meta, [2]string{"summary", fmt.Sprintf("%d bars met, %d missed, %d informational, %d not available, %d failed", met, missed, noBar, na, nfail)})
	if nfail > 0 {
		failed = true
	}

	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return 1, err
	}
	mdFile := filepath.Join(outDir, "latest.md")
	if err := os.WriteFile(mdFile, []byte(rep.Markdown()), 0o644); err != nil {
		return 1, err
	}
	pngFile := filepath.Join(outDir, "latest.png")
	title := fmt.Sprintf("sharelog vs NATS JetStream — ratios against bars (%s, %s)", strings.Fields(mode)[0], time.Now().Format("2006-01-02"))
	if err := report.Chart(title, report.ChartPoints(rep.Rows), pngFile); err != nil {
		return 1, fmt.Errorf("chart: %w", err)
	}
	logf("wrote %s and %s in %v: %d met, %d missed, %d informational, %d not available, %d failed",
		mdFile, pngFile, time.Since(start).Round(time.Second), met, missed, noBar, na, nfail)
	if failed {
		logf("FAILED: at least one scenario failed its correctness checks (see %s)", mdFile)
		return 1, nil
	}
	return 0, nil
}

func anyWanted(ids []string, want map[string]bool) bool {
	for _, id := range ids {
		if want[id] {
			return true
		}
	}
	return false
}

// pattern is the A/B/A order: ours, peer, ours, peer, ours…
func pattern(reps int, hasPeer bool) []bool {
	var p []bool
	for i := range reps {
		if i > 0 && hasPeer {
			p = append(p, false)
		}
		p = append(p, true)
	}
	return p
}

// runGroup runs a group in A/B/A order and aggregates its rows.
func runGroup(ctx context.Context, e *env, g group) []report.Row {
	var oursRuns, peerRuns []*runOut
	oursN, peerN := 0, 0
	for _, isOurs := range pattern(e.sz.reps, g.peer != nil) {
		o := newRunOut()
		side, fn, n := "ours", g.ours, oursN
		if !isOurs {
			side, fn, n = "peer", g.peer, peerN
		}
		e.logf("%s: %s run %d", g.name, side, n+1)
		currentGroup.Store(g.ids[0])
		t0 := time.Now()
		rd, err := os.MkdirTemp(e.work, "run-")
		if err != nil {
			rd = ""
		}
		e.runDir = rd
		rctx, cancel := context.WithTimeout(ctx, g.max)
		err = func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
				}
			}()
			return fn(rctx, e, n, o)
		}()
		cancel()
		if rd != "" && !e.keep {
			_ = os.RemoveAll(rd) // full runs write tens of GB otherwise
		}
		e.runDir = ""
		if err != nil {
			keys := make([]string, 0, len(g.rows))
			for _, r := range g.rows {
				keys = append(keys, r.key)
			}
			o.fail(keys, err)
		}
		for k, err := range o.errs {
			if strings.HasSuffix(k, "#peer") {
				continue
			}
			var u *errUnavailable
			if errors.As(err, &u) {
				e.logf("  %s: not available: %v", k, err)
			} else {
				e.logf("  %s: FAILED: %s", k, trimErr(err))
			}
		}
		e.logf("  %s run %d took %v", side, n+1, time.Since(t0).Round(time.Millisecond))
		if isOurs {
			oursRuns = append(oursRuns, o)
			oursN++
		} else {
			peerRuns = append(peerRuns, o)
			peerN++
		}
	}
	rows := make([]report.Row, 0, len(g.rows))
	for _, spec := range g.rows {
		rows = append(rows, aggregate(spec, oursRuns, peerRuns))
	}
	return rows
}

// aggregate builds one table row from the runs. Any failure makes the row
// FAILED (no number printed); UNIMPLEMENTED makes it "not available".
func aggregate(spec rowSpec, oursRuns, peerRuns []*runOut) report.Row {
	r := report.Row{ID: spec.id, Name: spec.name, Unit: spec.unit, Dir: spec.dir, Bar: spec.bar,
		RatioLabel: spec.ratioLabel, RatioAbs: spec.ratioAbs, PeerName: spec.peerName}
	var unavailable, failure error
	collect := func(runs []*runOut, key string, side *report.Side, ratios *[]float64, notes bool) {
		for _, o := range runs {
			if o.skipped[key] {
				continue
			}
			if err, ok := o.errs[key]; ok {
				var u *errUnavailable
				if errors.As(err, &u) {
					unavailable = err
				} else if failure == nil {
					failure = err
				}
				continue
			}
			m, ok := o.vals[key]
			if !ok {
				if failure == nil {
					failure = fmt.Errorf("harness bug: %s not measured", key)
				}
				continue
			}
			side.Add(m.value, m.p50, m.p99, m.cpu, m.rss)
			if ratios != nil {
				*ratios = append(*ratios, m.ratio)
			}
			if notes && m.note != "" && !slices.Contains(r.Notes, m.note) {
				r.Notes = append(r.Notes, m.note)
			}
		}
	}
	var ratios []float64
	collect(oursRuns, spec.key, &r.Ours, &ratios, true)
	if spec.peer {
		collect(peerRuns, spec.key, &r.Peer, nil, true)
	}
	if spec.selfPeer {
		collect(oursRuns, spec.key+"#peer", &r.Peer, nil, false)
	}
	switch {
	case failure != nil:
		r.Status = report.Failed
		r.Reason = trimErr(failure)
	case unavailable != nil:
		r.Status = report.Unavailable
		r.Reason = "UNIMPLEMENTED"
		r.Notes = []string{unavailable.Error()}
	}
	if r.Dir == report.Custom {
		r.Ratio = stats.Summarize(ratios).Median
	} else {
		r.Compute()
	}
	if len(r.Notes) > 3 { // one note per run is plenty; keep the first and last
		r.Notes = []string{r.Notes[0], r.Notes[len(r.Notes)-1]}
	}
	return r
}

// cpuBar is the version-2 CPU bar: for every P, C and S scenario with a
// peer, sharelog's server CPU per 1M records is at most half the peer's.
var cpuBar = report.AtMostBar(0.5, "server CPU-s per 1M records ≤ 0.5 × the peer's")

// cpuRows derives one judged CPU row from every row whose spec says cpu
// (the throughput rows of P, C and S scenarios with a JetStream peer):
// the values are the server CPU-seconds per 1M records of each run, the
// ratio ours/peer of their medians. specs and rows are in the same order
// (runGroup's). A failed or unavailable source row gives a row in the same
// state, so a CPU bar never silently disappears.
func cpuRows(specs []rowSpec, rows []report.Row) []report.Row {
	var out []report.Row
	for i, spec := range specs {
		if !spec.cpu || i >= len(rows) {
			continue
		}
		r := rows[i]
		c := report.Row{ID: "CPU", Name: r.ID + " " + r.Name, Unit: "CPU-s/1M rec", Dir: report.OursOverPeer,
			RatioLabel: "ours/peer CPU", Bar: cpuBar, Status: r.Status, Reason: r.Reason}
		if r.Status == report.OK {
			for _, v := range r.Ours.CPU {
				c.Ours.Add(v, nan, nan, nan, nan)
			}
			for _, v := range r.Peer.CPU {
				c.Peer.Add(v, nan, nan, nan, nan)
			}
		}
		c.Compute()
		out = append(out, c)
	}
	return out
}

// commitRefText lists the group-commit reference p99 per producer count.
func commitRefText(m map[int]float64) string {
	var parts []string
	for _, k := range commitRefProducers {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%d KiB %.3f ms", commitBytes(k)/1024, v))
		}
	}
	if len(parts) == 0 {
		return "not measured"
	}
	return strings.Join(parts, ", ")
}

func machineInfo() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, v, _ := strings.Cut(l, ":")
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	var mem string
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		l, _, _ := strings.Cut(string(b), "\n")
		mem = strings.Join(strings.Fields(l)[1:], " ")
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("%d CPUs (%s), %s RAM, Linux %s, %s, load avg at end %s — client and servers share the machine",
		runtime.NumCPU(), model, mem, kernel, runtime.Version(), load)
}

func describeRepo(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	rev := strings.TrimSpace(string(out))
	if err != nil {
		rev = "unknown revision"
	}
	dirty := ""
	if out, err := exec.Command("git", "-C", root, "status", "--porcelain", "--", ".", ":!bench").Output(); err == nil && len(out) > 0 {
		dirty = " + uncommitted changes"
	}
	// The revision, not the checkout's path: a result names no machine.
	return "built from this repository at " + rev + dirty + " (`go build ./cmd/server`)"
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "?"
}

func methods(e *env) []string {
	return []string{
		"Both servers are child processes on 127.0.0.1, started fresh (new data directory) for every run of a scenario group; the harness drives them over loopback TCP with one connection per producer/consumer. sharelog: `--fsync never` vs JetStream's default `sync_interval` (2 min); `--fsync always` vs JetStream `sync_interval: always`. Nothing else of the peer is configured: stream and consumer settings are the documented defaults except the per-scenario values the scenario itself names (MaxAckPending = 500 × consumers, AckWait = lock duration and MaxDeliver = delivery limit in C4).",
		"CPU-seconds per 1M records: server-process CPU (utime+stime from /proc/<pid>/stat, USER_HZ 100) during the measured phase only, divided by the records of that phase. The client's CPU is not included; the client shares the 2 cores with the server.",
		"Peak RSS: VmHWM of /proc/<pid>/status at the end of the phase, after resetting it at the phase start (`echo 5 > /proc/<pid>/clear_refs`).",
		"Throughput rows: records acknowledged (or consumed) divided by the wall time of the phase. Latency rows: per-call wall time in the client. p50/p99 by nearest rank.",
		"Every scenario verifies its own result and is printed as FAILED (no number) when the check fails: produce — distinct offsets/sequences and high watermark = records acknowledged; share consumers — every offset delivered exactly once with delivery count 1 (C1, C3) or accounted for (C4: accepted once, rejected, or archived at the delivery limit; none lost, none past the limit); change streams — record count, ascending offsets and for S2 the same key→offset map from OSO, ordered and auto; purge — new log start offset / first sequence and produce continuity.",
		"A part whose RPCs answer UNIMPLEMENTED is reported as not available; it never fails the run.",
		fmt.Sprintf("Cluster rows (X1–X4): each run starts a %d-node NATS cluster (child processes on loopback, routes between them, `sync_interval: always`) and sharelog instances with `--store jetstream --nats-replicas %d --lease-ttl %v` on it (one active, the others standbys). X1 and X2 measure both sides on that cluster in one run, alternating the order between runs; the peer's streams are R%d. X3 SIGKILLs the active instance under load; its value is the time to the first Produce started after the kill that succeeded (through a standby), and it FAILS on any acknowledged record or ACCEPT lost. X4 runs sets of 1, 2 and 3 instances with `--cluster-mode partitioned --lease-ttl %v` one after the other on one NATS cluster, each with the same load (%d records over %d partitions, one producer per partition calling the partition's owner), then has one share group consume every record (one consumer per partition, its share session at the partition's owner); its bar is the sharelog CPU per produced record with 3 instances over that with 1 (the consume phase's ratio is information).", clusterNodes, clusterReplicas, e.sz.xLeaseTTL, clusterReplicas, x4LeaseTTL, e.sz.x4Records, x4Partitions),
		fmt.Sprintf("Bars that refer to machine limits use the start-of-run values: null gRPC p50 %.3f ms, fsync p99 %.3f ms, sequential write %.1f MiB/s, group-commit reference p99 %s.", e.nullP50, e.fsyncP99, e.seqWrite, commitRefText(e.commitP99)),
		"Version-2 rows: P2's ack p99 is judged against 2 × the p99 of appending exactly one group commit's bytes (producers × 100 records × 1 KiB of value) to a file on the data directories' file system and calling fdatasync, plus 1 ms (the v1 4 KiB-fsync ratio stays as information). P1b (batch 1000, 4 producers, fsync never) and P2b (durable, batch 100, 16 producers) are record-value bytes per second (1 KiB × acknowledged records; keys, framing and indexes not counted) over the sequential write bandwidth: 1 MiB writes then one fdatasync, on the same file system. CPU rows: the server CPU-s per 1M records of every P, C and S throughput row with a JetStream peer (and S3), ours/peer ≤ 0.5. D1's one-record purges run after the large purge's measurement window, under the same produce load. S2 in -quick runs on a 1M-record partition of its own, in the first run of ours only, with one ordered scan per prefix.",
		"Queue rows (C5, C6; docs/queues.md): C5 runs C3's loop (consumer i on partition i mod 4, one sleep per batch) on an ORDERING_KEY group of 1,000 keys, fetching a consumer's share of its partition's keys (15) with the ACCEPTs carried by the next ShareFetch, and checks per key that no two records are ever held at once (held from the answer that delivered a record until its acknowledgement is sent) and that ACCEPTed offsets increase; C6 measures receipt time minus the record's instant (RELEASE sent + backoff, or the sharelog-deliver-at time) with sessions waiting in long polls, and fails on a record delivered before it.",
		"Server CPU profile: `BENCH_SERVER_CPUPROFILE=<dir> go run ./cmd/bench -only <ID>` builds `./cmd/sharelog-prof` (the same server with a CPU profile written on shutdown) instead of `cmd/server`; inspect with `go tool pprof <dir>/<file>.pprof`.",
	}
}
