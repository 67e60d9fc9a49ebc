package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sharelog/sharelog/bench/internal/procfs"
)

// proc is a child server process (sharelog, nats-server or the null gRPC
// server) whose CPU time and peak RSS the harness reads from /proc.
type proc struct {
	name      string
	cmd       *exec.Cmd
	pid       int
	grpcAddr  string // sharelog / null server
	httpAddr  string // sharelog
	kafkaAddr string // sharelog started with --kafka-addr
	dcpAddr   string // sharelog started with --dcp-addr
	natsURL   string // nats-server
	exited    chan struct{}
	waitErr   error

	mu   sync.Mutex
	tail []string // last stderr lines, for error messages
}

func (p *proc) addLine(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tail = append(p.tail, s)
	if len(p.tail) > 30 {
		p.tail = p.tail[len(p.tail)-30:]
	}
}

func (p *proc) stderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// alive reports an error if the process has exited.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v\n%s", p.name, p.waitErr, p.stderrTail())
	default:
		return nil
	}
}

// stop sends SIGTERM and waits (clean shutdown syncs everything), then
// SIGKILL after the timeout.
func (p *proc) stop() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop on SIGTERM within 60s", p.name)
	}
}

// startChild starts cmd and waits until ready(line) returns true for a
// stderr line; ready may fill p's addresses.
func startChild(name string, cmd *exec.Cmd, ready func(p *proc, line string) bool) (*proc, error) {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, pid: cmd.Process.Pid, exited: make(chan struct{})}
	readyCh := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		done := false
		for sc.Scan() {
			line := sc.Text()
			p.addLine(line)
			if !done && ready(p, line) {
				done = true
				close(readyCh)
			}
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-readyCh:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before it was ready: %v\n%s", name, p.waitErr, p.stderrTail())
	case <-time.After(120 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s not ready within 120s\n%s", name, p.stderrTail())
	}
}

// startSharelog runs the sharelog server on loopback with its data in dir.
func startSharelog(bin, dir string, args ...string) (*proc, error) {
	args = aclServerArgs(args)
	all := append([]string{"--data-dir", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--log-level", "info"}, args...)
	if d := profileDir(); d != "" {
		n := profileSeq.Add(1)
		label := profileLabel(args)
		all = append(all, "--cpuprofile", filepath.Join(d, fmt.Sprintf("%03d-%s-%s.pprof", n, currentGroup.Load(), label)))
	}
	cmd := exec.Command(bin, all...)
	cmd.Env = sharelogEnv()
	p, err := startChild("sharelog "+strings.Join(args, " "), cmd, func(p *proc, line string) bool {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "sharelog serving" {
			return false
		}
		p.grpcAddr, _ = m["grpc_addr"].(string)
		p.httpAddr, _ = m["http_addr"].(string)
		p.kafkaAddr, _ = m["kafka_addr"].(string)
		p.dcpAddr, _ = m["dcp_addr"].(string)
		return p.grpcAddr != ""
	})
	if err == nil && slices.Contains(args, "--authorizer") {
		if err = loadACL(p.grpcAddr); err != nil {
			p.stop()
			return nil, err
		}
	}
	return p, err
}

// profileLabel turns server flags into a file-name part: anything but
// letters, digits, '.', '_' and '-' becomes '_' (a --nats-url holds '/'
// and ':'), and long labels keep their end, where cluster mode's
// --instance-id and --lease-ttl are.
func profileLabel(args []string) string {
	label := strings.NewReplacer("--", "", " ", "_", "=", "_").Replace(strings.Join(args, "_"))
	label = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, label)
	const maxLen = 80
	if len(label) > maxLen {
		label = label[len(label)-maxLen:]
	}
	return label
}

// sharelogEnv is the harness environment without SHARELOG_* variables (so a
// developer's shell cannot change the server's flags) and without OTEL
// exporters (the default is no exporter, which is what we measure).
func sharelogEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SHARELOG_") || strings.HasPrefix(kv, "OTEL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startNATS runs nats-server with JetStream file storage in dir. With
// syncAlways it sets `sync_interval: always` (fsync every write); otherwise
// the documented default sync interval (2 minutes) applies. Nothing else is
// configured: every other setting is the server's default.
func startNATS(bin, dir string, syncAlways bool) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n", port, filepath.Join(dir, "js"))
	if syncAlways {
		conf += "  sync_interval: always\n"
	}
	conf += "}\n"
	cfgFile := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(cfgFile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", cfgFile)
	name := "nats-server"
	if syncAlways {
		name += " sync_interval=always"
	}
	p, err := startChild(name, cmd, func(p *proc, line string) bool {
		return strings.Contains(line, "Server is ready")
	})
	if err != nil {
		return nil, err
	}
	p.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	return p, nil
}

// meter measures one phase of a child process: wall time, CPU time and the
// peak RSS since the phase began.
type meter struct {
	p     *proc
	t0    time.Time
	cpu0  time.Duration
	reset bool
}

func (p *proc) phase() meter {
	m := meter{p: p, t0: time.Now()}
	m.reset = procfs.ResetPeakRSS(p.pid) == nil
	m.cpu0, _ = procfs.CPU(p.pid)
	return m
}

// phaseResult is what a meter measured.
type phaseResult struct {
	elapsed time.Duration
	cpu     time.Duration // server CPU during the phase
	rssMiB  float64       // peak RSS during the phase (since process start if reset failed)
}

func (m meter) done() phaseResult {
	r := phaseResult{elapsed: time.Since(m.t0)}
	if c, err := procfs.CPU(m.p.pid); err == nil {
		r.cpu = c - m.cpu0
	}
	if rss, err := procfs.PeakRSS(m.p.pid); err == nil {
		r.rssMiB = float64(rss) / (1 << 20)
	}
	return r
}

// cpuPerM is CPU-seconds per million records.
func (r phaseResult) cpuPerM(records int64) float64 {
	if records <= 0 {
		return nan
	}
	return r.cpu.Seconds() / float64(records) * 1e6
}

// build compiles the binaries the run needs into dir.
func build(ctx context.Context, repoRoot, benchDir, dir string, logf func(string, ...any)) (sharelogBin, natsBin string, err error) {
	sharelogBin = filepath.Join(dir, "sharelog-server")
	natsBin = filepath.Join(dir, "nats-server")
	run := func(wd string, args ...string) error {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = wd
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), wd, err, out)
		}
		return nil
	}
	t0 := time.Now()
	if profileDir() != "" {
		// The same server with a CPU profile written on shutdown.
		if err := run(benchDir, "build", "-tags", "benchprof", "-o", sharelogBin, "./cmd/sharelog-prof"); err != nil {
			return "", "", err
		}
		logf("profiling: server CPU profiles go to %s", profileDir())
	} else if err := run(repoRoot, "build", "-o", sharelogBin, "./cmd/server"); err != nil {
		// sharelog is built by its own module, exactly as `make build` does.
		return "", "", err
	}
	// The peer is the unmodified nats-server main package at the version
	// pinned in bench/go.mod.
	if err := run(benchDir, "build", "-o", natsBin, "github.com/nats-io/nats-server/v2"); err != nil {
		return "", "", err
	}
	logf("built sharelog-server and nats-server in %v", time.Since(t0).Round(time.Millisecond))
	return sharelogBin, natsBin, nil
}

// profileDir is where server CPU profiles go (BENCH_SERVER_CPUPROFILE), or "".
func profileDir() string { return os.Getenv("BENCH_SERVER_CPUPROFILE") }

var (
	profileSeq   atomic.Int64
	currentGroup atomic.Value // string: the running group's first id, for profile names
)

// startDialed starts sharelog on a fresh data directory named name, with
// args, and dials its gRPC address; stop closes the client and the server.
func (e *env) startDialed(name string, args ...string) (*proc, *client, func(), error) {
	dir, err := e.dataDir(name)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := startSharelog(e.sharelogBin, dir, args...)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := dial(p.grpcAddr)
	if err != nil {
		p.stop()
		return nil, nil, nil, err
	}
	return p, c, func() { c.close(); p.stop() }, nil
}
