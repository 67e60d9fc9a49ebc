package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The X rows run sharelog in cluster mode (docs/cluster.md): a 3-node NATS
// JetStream cluster of child processes on loopback, and sharelog instances
// with --store jetstream on it, one active and the others standbys. The
// peer is the same NATS cluster driven directly with R3 streams.

const (
	clusterNodes    = 3
	clusterReplicas = 3
	// clusterSyncAlways: every NATS node fsyncs each write before it
	// acknowledges it, the setting docs/cluster.md requires for cluster
	// mode. Both sides of every X row run on the same nodes, so durability
	// is matched by construction.
	clusterSyncAlways = true
)

// natsClusterConf is one node's configuration: its own client and route
// ports and store directory, routes to every node (its own included, which
// nats-server ignores), JetStream file storage.
func natsClusterConf(name, clusterName string, port, routePort int, storeDir string, routePorts []int, syncAlways bool) string {
	routes := make([]string, len(routePorts))
	for i, p := range routePorts {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: \"127.0.0.1:%d\"\n", name, port)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", storeDir)
	if syncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n  routes: [\n", clusterName, routePort)
	for _, r := range routes {
		fmt.Fprintf(&b, "    %s\n", r)
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// natsCluster is a NATS JetStream cluster of child processes.
type natsCluster struct {
	nodes []*proc
	urls  []string
}

// url lists every node, as sharelog's --nats-url and nats.Connect take it.
func (c *natsCluster) url() string { return strings.Join(c.urls, ",") }

func (c *natsCluster) stop() {
	for _, p := range c.nodes {
		_ = p.stop()
	}
}

// startNATSCluster starts clusterNodes nats-server processes joined by
// routes, each with its own store under dir, and waits until JetStream
// places and writes an R3 stream.
func startNATSCluster(ctx context.Context, bin, dir string, syncAlways bool) (*natsCluster, error) {
	ports := make([]int, clusterNodes)
	routePorts := make([]int, clusterNodes)
	for i := range clusterNodes {
		var err error
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
		if routePorts[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	// A name of its own, so a node of another run's cluster that reached
	// one of these route ports could not join.
	clusterName := fmt.Sprintf("sharelog-bench-%d-%d", os.Getpid(), routePorts[0])
	c := &natsCluster{}
	for i := range clusterNodes {
		name := fmt.Sprintf("n%d", i+1)
		conf := natsClusterConf(name, clusterName, ports[i], routePorts[i], filepath.Join(dir, name), routePorts, syncAlways)
		file := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			c.stop()
			return nil, err
		}
		p, err := startChild("nats-server "+name, exec.Command(bin, "-c", file), func(p *proc, line string) bool {
			return strings.Contains(line, "Server is ready")
		})
		if err != nil {
			c.stop()
			return nil, err
		}
		p.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
		c.nodes = append(c.nodes, p)
		c.urls = append(c.urls, p.natsURL)
	}
	if err := c.waitR3(ctx, 60*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// waitR3 waits until the cluster has a meta leader that can place a stream
// on every node: a meta leader alone is not enough, a node can still be
// offline for placement for a moment.
func (c *natsCluster) waitR3(ctx context.Context, within time.Duration) error {
	nc, js, err := natsConnect(c.url(), "bench-ready")
	if err != nil {
		return err
	}
	defer nc.Close()
	deadline := time.Now().Add(within)
	probe := func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		const name = "BENCH_READY"
		if _, err := js.CreateOrUpdateStream(pctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench.ready"},
			Replicas: clusterReplicas, Storage: jetstream.FileStorage}); err != nil {
			return err
		}
		if _, err := js.Publish(pctx, "bench.ready", nil); err != nil {
			return err
		}
		return js.DeleteStream(pctx, name)
	}
	for {
		err := probe()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the NATS cluster did not place an R3 stream within %v: %w", within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createR3Stream makes the peer's stream: file storage, 3 replicas, the
// server's defaults otherwise; atomic batch publish allowed when asked (it
// is off by default and the atomic batch API needs it).
func createR3Stream(ctx context.Context, js jetstream.JetStream, name, subject string, atomic bool) error {
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		Replicas: clusterReplicas, AllowAtomicPublish: atomic})
	return err
}

// sharelogCluster is a NATS cluster with sharelog instances on it;
// members[0] is the active instance when it starts, the others standbys.
type sharelogCluster struct {
	nats    *natsCluster
	members []*proc
	ids     []string
}

// procs is every server process (NATS nodes and sharelog instances).
func (c *sharelogCluster) procs() []*proc {
	return append(append([]*proc(nil), c.nats.nodes...), c.members...)
}

func (c *sharelogCluster) stop() {
	// sharelog first: a clean shutdown releases the lease in NATS.
	c.stopMembers()
	c.nats.stop()
}

// stopMembers stops the sharelog instances only, leaving the NATS cluster
// running for the next set of instances.
func (c *sharelogCluster) stopMembers() {
	for _, m := range c.members {
		_ = m.stop()
	}
}

// startCluster starts a NATS cluster and n sharelog instances in cluster
// mode with --lease-ttl ttl; it returns once the first is active and every
// other one forwards to it.
func (e *env) startCluster(ctx context.Context, name string, n int, ttl time.Duration) (*sharelogCluster, error) {
	dir, err := e.dataDir(name + "-nats")
	if err != nil {
		return nil, err
	}
	nc, err := startNATSCluster(ctx, e.natsBin, dir, clusterSyncAlways)
	if err != nil {
		return nil, err
	}
	c := &sharelogCluster{nats: nc}
	for i := range n {
		id := string(rune('a' + i))
		d, err := e.dataDir(name + "-" + id)
		if err != nil {
			c.stop()
			return nil, err
		}
		p, err := startSharelog(e.sharelogBin, d, "--store", "jetstream", "--nats-url", nc.url(),
			"--nats-replicas", fmt.Sprint(clusterReplicas), "--instance-id", id, "--lease-ttl", ttl.String())
		if err != nil {
			c.stop()
			return nil, err
		}
		c.members = append(c.members, p)
		c.ids = append(c.ids, id)
		want := "forwarding to a"
		if i == 0 {
			want = "cluster: active"
		}
		if err := waitReadyz(ctx, p, want, 60*time.Second); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// startPartitioned starts n sharelog instances in --cluster-mode
// partitioned on the running NATS cluster nc, under their own NATS name
// prefix, so a set of instances started earlier on the same cluster (and
// stopped) leaves them nothing to see: no leases, topics or share state.
// It returns once the first one (id "a") coordinates the share groups and
// every other one is ready and names "a" as the coordinator. Stop them with
// stopMembers; nc keeps running.
func (e *env) startPartitioned(ctx context.Context, name string, nc *natsCluster, prefix string, n int, ttl time.Duration) (*sharelogCluster, error) {
	c := &sharelogCluster{nats: nc}
	for i := range n {
		id := string(rune('a' + i))
		d, err := e.dataDir(name + "-" + id)
		if err != nil {
			c.stopMembers()
			return nil, err
		}
		p, err := startSharelog(e.sharelogBin, d, "--store", "jetstream", "--cluster-mode", "partitioned", "--nats-url", nc.url(),
			"--nats-replicas", fmt.Sprint(clusterReplicas), "--nats-prefix", prefix, "--instance-id", id, "--lease-ttl", ttl.String())
		if err != nil {
			c.stopMembers()
			return nil, err
		}
		c.members = append(c.members, p)
		c.ids = append(c.ids, id)
		want := "topic changes served by a "
		if i == 0 {
			want = "serving topic changes"
		}
		if err := waitReadyz(ctx, p, want, 60*time.Second); err != nil {
			c.stopMembers()
			return nil, err
		}
	}
	return c, nil
}

// partitionSpread checks DescribeCluster's partition list for topic: each
// of its n partitions has an owner among live, and every live instance owns
// ⌊n/m⌋ or ⌈n/m⌉ of them (m = len(live)), the placement the partitioned
// mode converges to. It returns partition → owner ID, or why not yet.
func partitionSpread(parts []*sharelogv1.PartitionOwner, topic string, n int, live []string) (map[int32]string, error) {
	owners := map[int32]string{}
	count := map[string]int{}
	for _, p := range parts {
		if p.GetTopic() != topic {
			continue
		}
		if p.GetPartition() < 0 || int(p.GetPartition()) >= n {
			return nil, fmt.Errorf("partition %d listed, the topic has %d", p.GetPartition(), n)
		}
		if _, dup := owners[p.GetPartition()]; dup {
			return nil, fmt.Errorf("partition %d listed twice", p.GetPartition())
		}
		if p.GetOwnerId() == "" {
			return nil, fmt.Errorf("partition %d has no owner yet", p.GetPartition())
		}
		if !slices.Contains(live, p.GetOwnerId()) {
			return nil, fmt.Errorf("partition %d owned by %q, not one of %v", p.GetPartition(), p.GetOwnerId(), live)
		}
		owners[p.GetPartition()] = p.GetOwnerId()
		count[p.GetOwnerId()]++
	}
	if len(owners) != n {
		return nil, fmt.Errorf("%d of %d partitions listed", len(owners), n)
	}
	lo, hi := n/len(live), (n+len(live)-1)/len(live)
	for _, id := range live {
		if count[id] < lo || count[id] > hi {
			return nil, fmt.Errorf("instance %s owns %d partitions, want %d to %d (owners %v)", id, count[id], lo, hi, owners)
		}
	}
	return owners, nil
}

// waitSpread asks DescribeCluster through c until partitionSpread accepts
// the answer, for at most within.
func waitSpread(ctx context.Context, c *client, topic string, n int, live []string, within time.Duration) (map[int32]string, error) {
	deadline := time.Now().Add(within)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := c.log.DescribeCluster(cctx, &sharelogv1.DescribeClusterRequest{})
		cancel()
		var owners map[int32]string
		if err == nil {
			owners, err = partitionSpread(resp.GetPartitions(), topic, n, live)
		} else {
			err = classify("LogService.DescribeCluster", err)
		}
		if err == nil {
			return owners, nil
		}
		var u *errUnavailable
		if errors.As(err, &u) {
			return nil, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the %d partitions of %s not spread over %v within %v: %w", n, topic, live, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readyz is the instance's /readyz answer: status code and body.
func readyz(ctx context.Context, p *proc) string {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+p.httpAddr+"/readyz", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// waitReadyz polls /readyz until its answer contains want.
func waitReadyz(ctx context.Context, p *proc, want string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		got := readyz(ctx, p)
		if strings.Contains(got, want) {
			return nil
		}
		if err := p.alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: /readyz is %q after %v, want %q\n%s", p.name, got, within, want, p.stderrTail())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// retryUnavailable calls fn until it returns anything but UNAVAILABLE (a
// freshly active instance's buckets may still be electing their leaders),
// for at most within.
func retryUnavailable(ctx context.Context, within time.Duration, fn func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := fn()
		if err == nil || status.Code(err) != codes.Unavailable || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// multiMeter measures one phase over several processes: CPU and peak RSS
// are the sums over them.
type multiMeter []meter

func phaseOf(ps ...*proc) multiMeter {
	m := make(multiMeter, len(ps))
	for i, p := range ps {
		m[i] = p.phase()
	}
	return m
}

func (mm multiMeter) done() phaseResult {
	r, _ := mm.doneEach()
	return r
}

// doneEach is done, with each process's own result as well (in phaseOf's
// order).
func (mm multiMeter) doneEach() (phaseResult, []phaseResult) {
	var r phaseResult
	each := make([]phaseResult, len(mm))
	for i, m := range mm {
		d := m.done()
		each[i] = d
		if i == 0 {
			r.elapsed = d.elapsed
		}
		r.cpu += d.cpu
		r.rssMiB += d.rssMiB
	}
	return r, each
}
