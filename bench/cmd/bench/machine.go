package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
)

// The null gRPC server is this binary re-executed with nullServerEnv=1: a
// plain grpc-go server with default options and only the standard health
// service, in its own process like the servers under test.
const nullServerEnv = "SHARELOG_BENCH_NULL_GRPC"

func runNullServer() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	fmt.Fprintf(os.Stderr, "null serving %s\n", l.Addr())
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		gs.Stop()
	}()
	_ = gs.Serve(l)
}

func startNullServer() (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), nullServerEnv+"=1")
	return startChild("null grpc server", cmd, func(p *proc, line string) bool {
		if a, ok := strings.CutPrefix(line, "null serving "); ok {
			p.grpcAddr = a
			return true
		}
		return false
	})
}

// unaryRate calls health.Check back to back (one in flight) for d.
func unaryRate(ctx context.Context, addr string, d time.Duration) (qps float64, lat *stats.Latencies, err error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for range 200 { // warm up the connection
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			return 0, nil, err
		}
	}
	lat = &stats.Latencies{}
	n := 0
	t0 := time.Now()
	for time.Since(t0) < d {
		t := time.Now()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return 0, nil, err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return 0, nil, fmt.Errorf("health status %v", resp.GetStatus())
		}
		lat.Add(time.Since(t))
		n++
	}
	return float64(n) / time.Since(t0).Seconds(), lat, nil
}

// seqWrite writes mib MiB in 1 MiB blocks and calls fdatasync once at the
// end; MiB/s over the whole (writes + fdatasync). This is the sequential
// write bandwidth the P1b and P2b bars are fractions of.
func seqWrite(dir string, mib int) (float64, error) {
	f, err := os.Create(filepath.Join(dir, "seqwrite"))
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := payload(1<<20, 7)
	t0 := time.Now()
	for range mib {
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
	}
	if err := syscall.Fdatasync(int(f.Fd())); err != nil {
		return 0, err
	}
	return float64(mib) / time.Since(t0).Seconds(), nil
}

// commitBytes is what one group commit holds when every one of producers
// producers has one Produce of 100 records of 1 KiB waiting (payload only).
func commitBytes(producers int) int { return producers * 100 * recordSize }

// commitRefProducers are the producer counts of P2, whose durable ack p99 is
// judged against a write + fdatasync of commitBytes(producers).
var commitRefProducers = []int{1, 4, 16}

// writeSyncLatency appends size bytes and calls fdatasync, n times: the
// reference for one group commit of that size. The file is replaced every
// 64 MiB so the run does not fill the disk; every call still appends to
// the end of a file, as a segment write does.
func writeSyncLatency(dir string, size, n int) (*stats.Latencies, error) {
	buf := payload(size, 11)
	lat := &stats.Latencies{}
	name := filepath.Join(dir, "commitref")
	defer os.Remove(name)
	var f *os.File
	written := 0
	for range n {
		if f == nil || written+size > 64<<20 {
			if f != nil {
				f.Close()
			}
			var err error
			if f, err = os.Create(name); err != nil {
				return nil, err
			}
			written = 0
		}
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return nil, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			f.Close()
			return nil, err
		}
		lat.Add(time.Since(t))
		written += size
	}
	return lat, f.Close()
}

// fsyncLatency appends 4 KiB and fsyncs, n times.
func fsyncLatency(dir string, n int) (*stats.Latencies, error) {
	f, err := os.Create(filepath.Join(dir, "fsync"))
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := payload(4096, 9)
	lat := &stats.Latencies{}
	for range n {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		lat.Add(time.Since(t))
	}
	return lat, nil
}

type limits struct {
	rows      []report.Row
	nullP50   float64
	fsyncP99  float64
	seqWrite  float64
	commitP99 map[int]float64 // producers -> p99 ms of write + fdatasync of commitBytes(producers)
}

func limitRow(name, unit string) report.Row { return report.Row{Name: name, Unit: unit} }

func failRow(r *report.Row, err error) {
	r.Status = report.Failed
	r.Reason = trimErr(err)
}

// machineLimits measures the null gRPC round trip (plain grpc-go and
// through sharelog's interceptors), sequential write and fsync latency of
// the disk that holds the data directories.
func machineLimits(ctx context.Context, e *env) limits {
	var l limits
	l.nullP50, l.fsyncP99, l.seqWrite = nan, nan, nan

	null := limitRow("null gRPC unary, grpc-go default server (health.Check, separate process, 1 in flight)", "calls/s")
	if p, err := startNullServer(); err != nil {
		failRow(&null, err)
	} else {
		qps, lat, err := unaryRate(ctx, p.grpcAddr, e.sz.unaryDur)
		_ = p.stop()
		if err != nil {
			failRow(&null, err)
		} else {
			l.nullP50 = lat.PercentileMs(50)
			null.Ours.Add(qps, l.nullP50, lat.PercentileMs(99), nan, nan)
		}
	}
	l.rows = append(l.rows, null)

	sl := limitRow("null gRPC unary on sharelog (health.Check through its interceptors, --fsync never)", "calls/s")
	func() {
		dir, err := e.dataDir("limits")
		if err != nil {
			failRow(&sl, err)
			return
		}
		// The null call is health.Check: lift its per-IP probe limit.
		p, err := startSharelog(e.sharelogBin, dir, "--fsync", "never", "--health-probes-per-sec", "0")
		if err != nil {
			failRow(&sl, err)
			return
		}
		defer p.stop()
		qps, lat, err := unaryRate(ctx, p.grpcAddr, e.sz.unaryDur)
		if err != nil {
			failRow(&sl, err)
			return
		}
		sl.Ours.Add(qps, lat.PercentileMs(50), lat.PercentileMs(99), nan, nan)
	}()
	l.rows = append(l.rows, sl)

	sw := limitRow(fmt.Sprintf("sequential write, %d MiB in 1 MiB writes + one fdatasync (data disk)", e.sz.seqWriteMiB), "MiB/s")
	if v, err := seqWrite(e.work, e.sz.seqWriteMiB); err != nil {
		failRow(&sw, err)
	} else {
		l.seqWrite = v
		sw.Ours.Add(v, nan, nan, nan, nan)
	}
	l.rows = append(l.rows, sw)

	fs := limitRow(fmt.Sprintf("4 KiB append + fsync, %d times (data disk)", e.sz.fsyncN), "fsync/s")
	if lat, err := fsyncLatency(e.work, e.sz.fsyncN); err != nil {
		failRow(&fs, err)
	} else {
		l.fsyncP99 = lat.PercentileMs(99)
		fs.Ours.Add(1000/lat.PercentileMs(50), lat.PercentileMs(50), l.fsyncP99, nan, nan)
	}
	l.rows = append(l.rows, fs)

	l.commitP99 = map[int]float64{}
	for _, k := range commitRefProducers {
		size := commitBytes(k)
		cr := limitRow(fmt.Sprintf("append %d KiB + fdatasync, %d times (one group commit of %d × 100 KiB, the P2 reference; data disk)", size/1024, e.sz.commitRefN, k), "commits/s")
		if lat, err := writeSyncLatency(e.work, size, e.sz.commitRefN); err != nil {
			failRow(&cr, err)
		} else {
			l.commitP99[k] = lat.PercentileMs(99)
			cr.Ours.Add(1000/lat.PercentileMs(50), lat.PercentileMs(50), l.commitP99[k], nan, nan)
		}
		l.rows = append(l.rows, cr)
	}
	for _, r := range l.rows {
		if r.Status == report.Failed {
			e.logf("  limit %q FAILED: %s", r.Name, r.Reason)
		} else {
			e.logf("  %s: %s %s (p50 %.3f ms, p99 %.3f ms)", r.Name, report.Human(r.Ours.Median()), r.Unit,
				firstOr(r.Ours.P50), firstOr(r.Ours.P99))
		}
	}
	return l
}

func firstOr(xs []float64) float64 {
	if len(xs) == 0 {
		return nan
	}
	return xs[0]
}

// mergeLimits puts the start and end measurements of each limit in one row.
func mergeLimits(a, b []report.Row) []report.Row {
	out := make([]report.Row, len(a))
	for i := range a {
		out[i] = a[i]
		if i < len(b) && b[i].Status == report.OK && a[i].Status == report.OK {
			s := b[i].Ours
			for j := range s.Values {
				out[i].Ours.Add(s.Values[j], s.P50[j], s.P99[j], nan, nan)
			}
		}
		if out[i].Status == report.OK {
			out[i].Notes = []string{"measured at the start and at the end of the run"}
		}
	}
	return out
}

// nullP50Now measures the plain grpc-go null round trip p50 (ms) right now
// with a fresh null server, for bars that compare against it.
func nullP50Now(ctx context.Context) (float64, error) {
	p, err := startNullServer()
	if err != nil {
		return 0, err
	}
	defer p.stop()
	_, lat, err := unaryRate(ctx, p.grpcAddr, 500*time.Millisecond)
	if err != nil {
		return 0, err
	}
	return lat.PercentileMs(50), nil
}
