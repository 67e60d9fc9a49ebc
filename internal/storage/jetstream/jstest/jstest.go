// Package jstest starts a real NATS JetStream cluster inside a test binary:
// in-process nats-server instances on loopback, each with its own store
// directory, joined by explicit routes. It is imported only by tests (it
// links the NATS server, which the sharelog binary must not).
//
// Share one cluster per test package: start it in TestMain (Start), hand
// each test its own name prefix (Prefix) so tests cannot see each other's
// streams, and shut it down after m.Run. Main does all three, and checks
// with goleak that the tests left nothing running.
package jstest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// Options configures a test cluster.
type Options struct {
	// Nodes is the number of servers (default 3).
	Nodes int
	// SyncAlways makes every server fsync each write before acknowledging
	// it (nats-server's "sync_interval: always"); the durable mode sharelog
	// requires in production.
	SyncAlways bool
	// Dir holds the servers' store directories (default: a new temporary
	// directory, removed by Shutdown).
	Dir string
	// ReadyTimeout bounds the wait for a JetStream meta leader with every
	// node as a peer (default 30 s).
	ReadyTimeout time.Duration
	// NoAdvertise keeps the servers from telling clients the other nodes'
	// addresses, so a client reconnects only to the URLs it was given
	// (tests that cut a client off through a proxy need this).
	NoAdvertise bool
}

// Cluster is a running test cluster.
type Cluster struct {
	Servers []*server.Server
	opts    []*server.Options
	dir     string
	ownDir  bool
	next    atomic.Int64
}

// startAttempts is how often Start tries with fresh route ports: another
// process may take a port between the check that it is free and the
// server's bind.
const startAttempts = 3

// Start starts the cluster and waits until JetStream has a meta leader and
// every node is a peer.
func Start(o Options) (*Cluster, error) {
	var err error
	for range startAttempts {
		var c *Cluster
		if c, err = start(o); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func start(o Options) (*Cluster, error) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	c := &Cluster{dir: o.Dir}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "jstest-")
		if err != nil {
			return nil, err
		}
		c.dir, c.ownDir = d, true
	}
	ports, err := clusterPorts(o.Nodes)
	if err != nil {
		c.Shutdown()
		return nil, err
	}
	// A name of its own, so that a node of another test binary's cluster
	// that ever reached one of these route ports could not join it.
	clusterName := fmt.Sprintf("sharelog-test-%d-%d", os.Getpid(), ports[0])
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	for i := range o.Nodes {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   fmt.Sprintf("%s/n%d", c.dir, i+1),
			SyncAlways: o.SyncAlways,
			Cluster: server.ClusterOpts{
				Name:        clusterName,
				Host:        "127.0.0.1",
				Port:        ports[i],
				NoAdvertise: o.NoAdvertise,
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
			NoLog:  true,
			NoSigs: true,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("nats server %d: %w", i+1, err)
		}
		go s.Start()
		c.Servers = append(c.Servers, s)
		c.opts = append(c.opts, opts)
	}
	deadline := time.Now().Add(o.ReadyTimeout)
	for _, s := range c.Servers {
		if !s.ReadyForConnections(time.Until(deadline)) {
			c.Shutdown()
			return nil, fmt.Errorf("nats server %s did not accept connections within %v", s.Name(), o.ReadyTimeout)
		}
	}
	if err := c.waitReady(deadline); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// waitReady polls until some node is the meta leader and sees every node
// as a peer, and JetStream answers an account-info request.
func (c *Cluster) waitReady(deadline time.Time) error {
	for {
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(c.Servers) {
				return c.probe(deadline)
			}
		}
		if time.Now().After(deadline) {
			return errors.New("the JetStream cluster elected no meta leader in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) probe(deadline time.Time) error {
	nc, err := nats.Connect(c.URL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	// A meta leader that sees every peer is not yet enough: a node can
	// still be marked offline for placement for a moment, and the first
	// test's replicated bucket then fails with "no suitable peers". Place
	// and write a stream replicated on every node, as the tests will.
	probe := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err != nil {
			return err
		}
		const name = "JSTEST_READY"
		if _, err := js.CreateOrUpdateStream(ctx, njs.StreamConfig{Name: name, Subjects: []string{"jstest.ready"},
			Replicas: len(c.Servers), Storage: njs.FileStorage}); err != nil {
			return err
		}
		if _, err := js.Publish(ctx, "jstest.ready", nil); err != nil {
			return err
		}
		return js.DeleteStream(ctx, name)
	}
	for {
		err = probe()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("JetStream not ready for replicated streams: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is a client URL listing every node.
func (c *Cluster) URL() string {
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// Connect opens a client connection for tb, closed at its cleanup.
func (c *Cluster) Connect(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1))
	if err != nil {
		tb.Fatalf("connect to the test cluster: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Prefix returns a name prefix no other caller of this cluster gets, so
// each test has its own streams and buckets.
func (c *Cluster) Prefix() string {
	return fmt.Sprintf("T%d", c.next.Add(1))
}

// Cleanup deletes, at tb's cleanup, every stream whose name starts with
// prefix+"_" and the KV buckets of prefix.
func (c *Cluster) Cleanup(tb testing.TB, nc *nats.Conn, prefix string) {
	tb.Cleanup(func() {
		js, err := njs.New(nc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		names := js.StreamNames(ctx)
		var del []string
		for n := range names.Name() {
			if strings.HasPrefix(n, prefix+"_") || strings.HasPrefix(n, "KV_"+prefix+"_") {
				del = append(del, n)
			}
		}
		for _, n := range del {
			if err := js.DeleteStream(ctx, n); err != nil && !errors.Is(err, njs.ErrStreamNotFound) {
				tb.Errorf("delete test stream %s: %v", n, err)
			}
		}
	})
}

// Stop shuts node i (from 0) down; its store directory stays, for
// Restart. The other nodes keep a quorum of a 3-node cluster.
func (c *Cluster) Stop(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// Restart starts node i again on its store directory, after Stop, and
// waits until it accepts connections (not until its streams caught up).
func (c *Cluster) Restart(i int) error {
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		return fmt.Errorf("nats server %d: %w", i+1, err)
	}
	go s.Start()
	c.Servers[i] = s
	if !s.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("nats server %s did not accept connections again", s.Name())
	}
	return nil
}

// Shutdown stops every server and removes the store directories the
// cluster created.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
	for _, s := range c.Servers {
		s.WaitForShutdown()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
}

// clusterPorts picks n free TCP ports for the cluster routes. Every node
// needs the others' route ports before any of them starts, so they cannot
// be ephemeral (":0") ports. They come from 20000-32767, below Linux's
// ephemeral range, starting at a point derived from the process id so
// concurrent test binaries rarely probe the same ports; each is checked
// free by listening on it.
func clusterPorts(n int) ([]int, error) {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d", os.Getpid())
	const lo, span = 20000, 12768
	start := int(h.Sum32() % span)
	var ports []int
	for i := 0; i < span && len(ports) < n; i++ {
		p := lo + (start+i)%span
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = l.Close()
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, errors.New("no free ports for the cluster routes")
	}
	return ports, nil
}
