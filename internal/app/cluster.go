package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/ownership"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jslog"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsoffsets"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsstate"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/telemetry"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// Health service names that tell an instance's cluster role: SERVING
// exactly while the instance has that role (docs/cluster.md).
const (
	HealthClusterActive  = "sharelog.cluster.active"
	HealthClusterStandby = "sharelog.cluster.standby"
)

// clusterNode is an instance of cluster mode, phase 1: it follows the
// lease (internal/cluster), opens the JetStream stores and a backend when
// it becomes active, closes them when it stops being active, and forwards
// every call while another instance is active.
type clusterNode struct {
	s       *Server
	o       Options
	nc      *nats.Conn
	fwdTLS  *tls.Config
	stop    context.CancelFunc
	runDone chan struct{}

	mu      sync.RWMutex
	role    cluster.Role
	holder  cluster.Holder
	epoch   uint64
	term    uint64         // the revision the holder's term began at (cluster.Status.Term)
	active  *activeBackend // set while active and open
	conns   map[string]*grpc.ClientConn
	closing bool
	lease   *cluster.Lease // set once opened
	self    cluster.Member // this instance's ID and addresses (set by start)
	part    *partitioned   // --cluster-mode=partitioned only (partitioned.go)
	refused string         // why this instance refused to join (another --cluster-mode runs)
	secret  string         // the cluster's instance secret, with --auth-tokens-file (outgoing)
	closers sync.WaitGroup // backends being closed
	kafka   *kafkaCluster  // the Kafka listener's view of the cluster (kafka.go); nil without --kafka-addr
	dcp     *dcpCluster    // the DCP listener's view of the cluster (dcp.go); nil without --dcp-addr

	forwarded metric.Int64Counter // sharelog_cluster_forwarded_calls_total (clustermetrics.go)
	lastRTT   atomic.Int64        // the last NATS round trip, ns
}

// activeBackend is the backend of one term as active instance.
type activeBackend struct {
	*backend
	epoch uint64
	store *jslog.Store
	calls sync.WaitGroup
}

func (s *Server) newClusterNode(ctx context.Context, o Options, serverTLS *tls.Config) (*clusterNode, error) {
	c := s.cfg.Cluster
	opts := []nats.Option{
		nats.Name("sharelog " + c.InstanceID),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// Each connection event is logged once (docs/cluster.md
		// "Metrics"), not by every call that meets it.
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			s.log.Warn("disconnected from NATS; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			s.log.Info("reconnected to NATS", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
		}),
	}
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	}
	if c.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(c.NATSTLSCA))
	}
	if c.NATSTLSCert != "" {
		opts = append(opts, nats.ClientCert(c.NATSTLSCert, c.NATSTLSKey))
	}
	nc, err := nats.Connect(c.NATSURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at --nats-url %s: %w", c.NATSURL, err)
	}
	n := &clusterNode{s: s, o: o, nc: nc, conns: map[string]*grpc.ClientConn{}, runDone: make(chan struct{})}
	if c.Mode == ModePartitioned {
		n.part = &partitioned{gates: ownership.NewGates()}
	}
	if serverTLS != nil {
		// Instances forward to each other over TLS, verified against the
		// client CA when one is set (else the system roots), presenting
		// this instance's own certificate (for mTLS).
		n.fwdTLS = &tls.Config{Certificates: serverTLS.Certificates, RootCAs: serverTLS.ClientCAs, MinVersion: tls.VersionTLS12}
	}
	return n, nil
}

// start runs the lease once the gRPC listener is bound (the default
// advertised address is the bound one).
func (n *clusterNode) start(grpcAddr string) {
	c := n.s.cfg.Cluster
	addr := c.AdvertiseAddr
	if addr == "" {
		addr = grpcAddr
	}
	n.mu.Lock()
	n.self = cluster.Member{ID: c.instanceID(grpcAddr), Addr: addr, HTTPAddr: n.s.HTTPAddr(), Mode: c.Mode,
		KafkaAddr: n.s.kafkaAdvertised(), DCPAddr: n.s.dcpAdvertised()}
	n.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	go n.measureRTT(ctx, 5*time.Second)
	go func() {
		defer close(n.runDone)
		n.run(ctx, cluster.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, TTL: c.LeaseTTL,
			InstanceID: c.instanceID(grpcAddr), AdvertiseAddr: addr, Logger: n.s.log})
	}()
}

// run opens the lease (retrying while NATS is unreachable), runs it, and
// follows its role changes until ctx ends.
func (n *clusterNode) run(ctx context.Context, lo cluster.Options) {
	var lease *cluster.Lease
	for {
		octx, cancel := context.WithTimeout(ctx, lo.TTL)
		l, err := cluster.Open(octx, n.nc, lo)
		cancel()
		if err == nil {
			lease = l
			break
		}
		n.s.log.Warn("cannot open the lease bucket; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(lo.TTL / 4):
		}
	}
	n.mu.Lock()
	n.lease = lease
	self := n.self
	n.mu.Unlock()
	// An instance of the other --cluster-mode must not join: the two modes
	// decide ownership differently, and their writes would fence each
	// other's. The one that starts second refuses, and stays out.
	if other, ok := n.otherMode(ctx, lease, self); ok {
		reason := fmt.Sprintf("instance %s at %s runs --cluster-mode %s, this one %s: every instance of a deployment must use the same mode",
			other.ID, other.Addr, other.Mode, self.Mode)
		n.mu.Lock()
		n.refused = reason
		n.mu.Unlock()
		n.s.log.Error("refusing to join the cluster", "reason", reason)
		return
	}
	if n.s.auth != nil && n.s.auth.TokensEnabled() && !n.loadSecret(ctx, lease) {
		return
	}
	// A Kafka broker needs its node id before its heartbeat names it.
	if n.kafka != nil {
		if !n.kafka.join(ctx, lease, &self, n.s.freshKafkaClusterID()) {
			return
		}
		n.mu.Lock()
		n.self = self
		n.mu.Unlock()
	}
	if n.dcp != nil {
		go n.dcp.open(ctx) // a standby's topics, for the bucket config
	}
	// The heartbeat lists this instance in DescribeCluster and, in
	// partitioned mode, in the live set partitions are placed over.
	beatDone := make(chan struct{})
	go func() { lease.RunHeartbeat(ctx, self); close(beatDone) }()
	go n.watchModes(ctx, lease, self)
	itemsDone := make(chan struct{})
	if n.part == nil {
		close(itemsDone)
	} else {
		items := lease.Items(self, cluster.ItemHooks{Acquired: n.acquireItem, Release: n.releaseItem, Keep: n.keepItem})
		n.mu.Lock()
		n.part.items = items
		n.mu.Unlock()
		if !n.openPartitioned(ctx, lo.TTL) {
			<-beatDone
			return
		}
		go func() { items.Run(ctx, n.placeItems); close(itemsDone) }()
	}
	leaseDone := make(chan struct{})
	go func() { lease.Run(ctx); close(leaseDone) }()
	for {
		changed := lease.Changed()
		n.apply(ctx, lease.Status())
		select {
		case <-ctx.Done():
			<-leaseDone
			<-beatDone
			<-itemsDone
			n.apply(context.Background(), cluster.Status{Role: cluster.Standby})
			return
		case <-changed:
		}
	}
}

// loadSecret reads (or makes) the cluster's instance secret, retrying
// while NATS does not answer: with tokens on, the calls instances make on
// their own behalf present it. False when ctx ended first.
func (n *clusterNode) loadSecret(ctx context.Context, lease *cluster.Lease) bool {
	for {
		sctx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL)
		secret, err := lease.Secret(sctx)
		cancel()
		if err == nil {
			n.s.auth.SetInstanceSecret(secret)
			n.mu.Lock()
			n.secret = secret
			n.mu.Unlock()
			return true
		}
		n.s.log.Warn("cannot read the cluster's instance secret; retrying", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(n.s.cfg.Cluster.LeaseTTL / 4):
		}
	}
}

// otherMode returns a live instance (not self) that runs another
// --cluster-mode, retrying the listing while NATS does not answer.
func (n *clusterNode) otherMode(ctx context.Context, lease *cluster.Lease, self cluster.Member) (cluster.Member, bool) {
	for {
		lctx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL)
		members, err := lease.Members(lctx)
		cancel()
		if err == nil {
			for _, m := range members {
				if m.ID != self.ID && m.Mode != "" && m.Mode != self.Mode {
					return m, true
				}
			}
			return cluster.Member{}, false
		}
		n.s.log.Warn("cannot list the cluster members; retrying", "err", err)
		select {
		case <-ctx.Done():
			return cluster.Member{}, false
		case <-time.After(n.s.cfg.Cluster.LeaseTTL / 4):
		}
	}
}

// watchModes logs, once per instance, an error for every live instance
// that runs another --cluster-mode (two instances started at the same
// moment with different modes both pass the check at start).
func (n *clusterNode) watchModes(ctx context.Context, lease *cluster.Lease, self cluster.Member) {
	seen := map[string]bool{}
	t := time.NewTicker(n.s.cfg.Cluster.LeaseTTL)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL)
		members, err := lease.LiveMembers(lctx)
		cancel()
		if err != nil {
			continue
		}
		for _, m := range members {
			if m.ID != self.ID && m.Mode != "" && m.Mode != self.Mode && !seen[m.ID] {
				seen[m.ID] = true
				n.s.log.Error("an instance of another --cluster-mode is in the cluster; stop it", "instance", m.ID, "addr", m.Addr,
					"its_mode", m.Mode, "this_mode", self.Mode)
			}
		}
	}
}

// apply moves the instance to st: opens a backend when it becomes active,
// closes the current one when it stops being active (or changes epoch).
func (n *clusterNode) apply(ctx context.Context, st cluster.Status) {
	n.mu.Lock()
	old := n.active
	// A renewal changes the lease revision, not the term: the backend stays
	// open while the role stays active. A lost lease always passes through
	// a role that is not active, which closes it.
	if old != nil && st.Role != cluster.Active {
		n.active = nil
	}
	n.role, n.holder, n.term = st.Role, st.Holder, st.Term
	if st.Role == cluster.Active {
		n.epoch = st.Epoch
	}
	closing := n.closing
	stillOld := n.active == old && old != nil
	n.mu.Unlock()
	if old != nil && !stillOld {
		n.closeAsync(old)
	}
	if st.Role != cluster.Active || stillOld || closing {
		return
	}
	b, err := n.openBackend(ctx, st.Epoch)
	if err != nil {
		n.s.log.Error("cannot serve as the active instance; giving up the lease", "err", err, "epoch", st.Epoch)
		n.lease.Fenced(st.Epoch)
		return
	}
	n.mu.Lock()
	if n.role != cluster.Active || n.closing {
		n.mu.Unlock()
		n.closeAsync(b)
		return
	}
	n.active = b
	n.mu.Unlock()
	n.s.log.Info("active: serving", "epoch", st.Epoch)
}

func (n *clusterNode) openBackend(ctx context.Context, epoch uint64) (*activeBackend, error) {
	c := n.s.cfg.Cluster
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if n.part != nil {
		return n.openCoordinatorBackend(ctx, epoch)
	}
	ls, err := jslog.Open(ctx, n.nc, jslog.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, WriteTimeout: c.NATSWriteTimeout})
	if err != nil {
		return nil, fmt.Errorf("open the JetStream log: %w", err)
	}
	ss, err := jsstate.Open(ctx, n.nc, jsstate.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas})
	if err != nil {
		_ = ls.Close()
		return nil, fmt.Errorf("open the JetStream share state: %w", err)
	}
	fence := func() { n.fenced(epoch) }
	store := telemetry.TraceStore(fencedStore{Store: ls, fenced: fence}, n.s.tel.Tracer, n.s.tel.Meter)
	view := func(ctx context.Context) (grpcapi.ClusterView, error) { return n.activeView(ctx, epoch) }
	b, err := n.s.openBackend(store, ls, fencedState{Store: ss, fenced: fence}, n.o, view, nil, nil, jsProducers(ls))
	if err != nil {
		_ = ss.Close()
		_ = ls.Close()
		return nil, err
	}
	if n.s.cfg.KafkaAddr != "" {
		// The consumer groups' committed offsets, read and fenced with
		// this term (jsoffsets' doc.go "Fencing"): a write refused
		// because a newer active instance wrote deposes this one, as a
		// fenced append does.
		gs, err := jsoffsets.Open(ctx, n.nc, jsoffsets.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, Epoch: epoch,
			OnFenced: func(string) { fence() }, Logger: n.s.log})
		if err == nil {
			var cg *consumergroup.Coordinator
			if cg, err = openCoordinator(n.s.cfg, gs, b.logAPI, b.share, nil, n.s.log); err == nil {
				b.withGroups(cg, n.s.guard)
			}
		}
		if err != nil {
			_ = b.close(n.s.log)
			_ = ls.Close()
			return nil, fmt.Errorf("open the consumer groups' offsets: %w", err)
		}
		// The transaction coordinator of this term: every transactional
		// id is the active instance's (docs/kafka.md "Transactions").
		if b.txn, err = openClusterTransactions(ctx, n.s.cfg, n.nc, epoch, fence, b.logAPI, b.groups, n.s.log); err != nil {
			_ = b.close(n.s.log)
			_ = ls.Close()
			return nil, err
		}
	} else {
		// No coordinator without the Kafka listener, but a run with one
		// may have left transactional records.
		n.readTxnState(ctx, b)
	}
	return &activeBackend{backend: b, epoch: epoch, store: ls}, nil
}

// fenced: a write of the term begun at epoch was refused because another
// instance wrote. Stop serving at once.
func (n *clusterNode) fenced(epoch uint64) {
	n.mu.Lock()
	b := n.active
	if b == nil || b.epoch != epoch {
		n.mu.Unlock()
		return
	}
	n.active = nil
	n.role = cluster.Standby
	lease := n.lease
	n.mu.Unlock()
	n.s.log.Warn("deposed: a write was fenced by another instance", "epoch", epoch)
	if lease != nil {
		lease.Fenced(epoch)
	}
	n.closeAsync(b)
}

// closeAsync closes b without blocking the caller; close waits for it.
func (n *clusterNode) closeAsync(b *activeBackend) {
	n.closers.Go(func() { n.closeBackend(b) })
}

// closeBackend ends the backend's change streams, sessions and waiting
// fetches, closes its stores (calls still running on them fail as
// retryable) and waits for those calls to return.
func (n *clusterNode) closeBackend(b *activeBackend) {
	b.streams.Shutdown()
	_ = b.close(n.s.log)
	if b.store != nil { // nil in partitioned mode: the store is shared
		_ = b.store.Close()
	}
	b.calls.Wait()
}

// beginShutdown ends change streams at once, as the file mode does.
func (n *clusterNode) beginShutdown() {
	n.mu.RLock()
	b := n.active
	var logB *backend
	if n.part != nil {
		logB = n.part.logB
	}
	n.mu.RUnlock()
	if b != nil {
		b.streams.Shutdown()
	}
	if logB != nil {
		logB.streams.Shutdown()
	}
	// Partitioned mode hands over at once (docs/cluster.md "Stopping"):
	// the heartbeat leaves and every item lease is released, each after
	// its partition or group was flushed, so the others adopt them within
	// a moment while this instance drains its calls (which answer
	// NOT_OWNER for what it gave up) instead of after the drain.
	if n.part != nil && n.stop != nil {
		n.stop()
		<-n.runDone
	}
}

// close releases the lease (so a standby takes over without waiting for
// the TTL), closes the backend, the forwarding connections and NATS.
func (n *clusterNode) close() error {
	n.mu.Lock()
	n.closing = true
	n.mu.Unlock()
	if n.stop != nil {
		n.stop()
		<-n.runDone
	}
	n.mu.Lock()
	b := n.active
	n.active = nil
	conns := n.conns
	n.conns = map[string]*grpc.ClientConn{}
	n.mu.Unlock()
	if b != nil {
		n.closeAsync(b)
	}
	n.closers.Wait()
	if n.part != nil {
		n.closePartitioned()
	}
	if n.kafka != nil {
		n.kafka.close()
	}
	if n.dcp != nil {
		n.dcp.close()
	}
	for _, cc := range conns {
		_ = cc.Close()
	}
	n.nc.Close()
	return nil
}

// route decides what a call does: serve on the active backend (b, with a
// done func to call when the call ends), forward (cc), or fail (err).
func (n *clusterNode) route(ctx context.Context) (b *activeBackend, cc *grpc.ClientConn, err error) {
	n.mu.RLock()
	role, holder, active, closing := n.role, n.holder, n.active, n.closing
	if active != nil && !closing {
		active.calls.Add(1) // under n.mu: closeBackend cannot have started waiting
	}
	n.mu.RUnlock()
	if active != nil && !closing {
		return active, nil, nil
	}
	if err := holderErr(ctx, closing, role, holder); err != nil {
		return nil, nil, err
	}
	cc, err = n.conn(holder.Addr)
	return nil, cc, err
}

// holderErr is why a call for the holder of the phase-1 lease, which this
// instance is not serving as, cannot go to holder either; nil: it can.
func holderErr(ctx context.Context, closing bool, role cluster.Role, holder cluster.Holder) error {
	switch {
	case closing:
		return notOwnerErr("this instance is shutting down; retry")
	case role == cluster.Active:
		return notOwnerErr("this instance is taking over as the active instance; retry")
	case role == cluster.Disconnected:
		return ownerUnreachableErr("this instance cannot reach the NATS cluster, so it does not know the active instance; retry, possibly on another instance")
	case holder.Addr == "":
		return notOwnerErr("no instance holds the lease yet; retry")
	case forwardedFrom(ctx) != "":
		// One hop only: a forwarded call that finds no owner here fails
		// rather than travelling on.
		return notOwnerErr(fmt.Sprintf("this instance is not active (the lease names %s); retry", holder.ID))
	}
	return nil
}

// conn is the forwarding connection to addr, made on first use.
func (n *clusterNode) conn(addr string) (*grpc.ClientConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cc := n.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := newForwardConn(addr, n.fwdTLS, n.s.cfg.MaxRequestBytes, n.forwardCounting()...)
	if err != nil {
		return nil, ownerUnreachableErr(fmt.Sprintf("cannot dial the owner at %s: %v", addr, err))
	}
	n.conns[addr] = cc
	return cc, nil
}

// status is the instance's role as /readyz and gRPC health report it.
func (n *clusterNode) status() (role cluster.Role, holder cluster.Holder, serving bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.role, n.holder, n.active != nil
}

// readinessChecks: ready while active and serving, or standby with a known
// active instance to forward to; not ready while taking over or
// disconnected.
func (n *clusterNode) readinessChecks() []ReadinessCheck {
	return []ReadinessCheck{{Service: "", Check: n.roleReady},
		{Service: sharelogv1.LogService_ServiceDesc.ServiceName, Check: n.partitionsWritable}}
}

// partitionsWritable is not ready while partitions this instance appends
// to failed their last append with a storage error (a stream electing a
// leader, NATS unreachable; --nats-write-timeout) and have not succeeded
// since (jslog.Store.Unwritable), naming them.
func (n *clusterNode) partitionsWritable() (string, bool) {
	failing, first := n.unwritable()
	if len(failing) == 0 {
		return "", true
	}
	return unwritableReason(failing, first), false
}

// unwritable lists the partitions of this instance's JetStream logs whose
// last append failed, sorted, and the first failure.
func (n *clusterNode) unwritable() ([]string, error) {
	n.mu.RLock()
	var stores []*jslog.Store
	if n.part != nil && n.part.store != nil {
		stores = append(stores, n.part.store)
	}
	if n.active != nil && n.active.store != nil {
		stores = append(stores, n.active.store)
	}
	n.mu.RUnlock()
	var failing []string
	var first error
	for _, st := range stores {
		for _, p := range st.Unwritable() {
			if first == nil {
				first = p.Err
			}
			name := p.Err.Error()
			if i := strings.IndexByte(name, ':'); i > 0 {
				name = name[:i]
			}
			failing = append(failing, name)
		}
	}
	slices.Sort(failing)
	return slices.Compact(failing), first
}

// unwritableCount is how many partitions partitionsWritable names.
func (n *clusterNode) unwritableCount() int {
	failing, _ := n.unwritable()
	return len(failing)
}

func unwritableReason(failing []string, first error) string {
	return fmt.Sprintf("cluster: %d partitions not writable (KAFKA_STORAGE_ERROR, retryable): %s; first: %v",
		len(failing), strings.Join(failing, ", "), first)
}

// roleReady is the readiness of this instance's cluster role.
func (n *clusterNode) roleReady() (string, bool) {
	n.mu.RLock()
	refused := n.refused
	n.mu.RUnlock()
	if refused != "" {
		return "cluster: refused to join: " + refused, false
	}
	role, holder, serving := n.status()
	n.setRoleHealth(role, serving, holder)
	if n.part != nil {
		n.mu.RLock()
		open := n.part.logB != nil
		n.mu.RUnlock()
		switch {
		case role == cluster.Disconnected:
			return n.disconnectedLine(), false
		case !open:
			return "cluster: partitioned, opening the JetStream log", false
		}
		return "", true
	}
	switch {
	case serving:
		return "", true
	case role == cluster.Active:
		return "cluster: active, loading the share state", false
	case role == cluster.Standby && holder.Addr != "":
		return "", true
	case role == cluster.Standby:
		return "cluster: standby, no active instance known", false
	}
	return n.disconnectedLine(), false
}

// disconnectedLine says why an instance whose role is Disconnected does
// not know who is active: the NATS connection is down, or it is up but
// the lease bucket does not answer (its JetStream leader being elected,
// or a quorum lost) — an instance says it is disconnected only when it is.
func (n *clusterNode) disconnectedLine() string {
	if n.nc.IsConnected() {
		return fmt.Sprintf("cluster: connected to NATS (%s) but the lease bucket does not answer (a JetStream leader election, or no quorum); not serving until it does", n.nc.ConnectedServerName())
	}
	return "cluster: disconnected from NATS"
}

// setRoleHealth sets the role's gRPC health names.
func (n *clusterNode) setRoleHealth(role cluster.Role, serving bool, holder cluster.Holder) {
	h := n.s.health
	if h == nil {
		return
	}
	set := func(name string, on bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if on {
			st = healthpb.HealthCheckResponse_SERVING
		}
		h.SetServingStatus(name, st)
	}
	set(HealthClusterActive, serving)
	set(HealthClusterStandby, role == cluster.Standby && holder.Addr != "")
}

// roleLine is the one-line cluster role /readyz prints.
func (n *clusterNode) roleLine() string {
	n.mu.RLock()
	refused := n.refused
	n.mu.RUnlock()
	if refused != "" {
		return "cluster: refused to join: " + refused
	}
	role, holder, serving := n.status()
	if n.part != nil {
		line := "cluster: partitioned"
		n.mu.RLock()
		items := n.part.items
		n.mu.RUnlock()
		if items != nil {
			parts, groups := 0, 0
			for item := range items.Held() {
				if _, ok := groupOf(item); ok {
					groups++
				} else {
					parts++
				}
			}
			line += fmt.Sprintf(", owning %d partitions, coordinating %d share groups", parts, groups)
		}
		switch {
		case serving:
			return line + ", serving topic changes"
		case holder.Addr != "":
			return line + fmt.Sprintf(", topic changes served by %s at %s", holder.ID, holder.Addr)
		}
		return line + ", " + role.String()
	}
	switch {
	case serving:
		return "cluster: active"
	case role == cluster.Standby && holder.Addr != "":
		return fmt.Sprintf("cluster: standby, forwarding to %s at %s", holder.ID, holder.Addr)
	}
	if role == cluster.Disconnected {
		return n.disconnectedLine()
	}
	return "cluster: " + role.String()
}

// offlineCount is the number of offline partitions and share-partitions,
// for the sharelog_partitions_offline gauge.
func (s *Server) offlineCount() int {
	n := 0
	if s.store != nil {
		n += len(s.store.Offline())
	}
	if s.share != nil {
		n += len(s.share.Offline())
	}
	if s.cluster != nil {
		s.cluster.mu.RLock()
		if b := s.cluster.active; b != nil {
			n += len(b.share.Offline())
		}
		s.cluster.mu.RUnlock()
	}
	return n
}

// fencedStore reports appends and purges refused by the fence.
type fencedStore struct {
	logstore.Store
	fenced func()
}

func (f fencedStore) Append(ctx context.Context, topic string, partition int32, recs []logstore.Record) (int64, error) {
	off, err := f.Store.Append(ctx, topic, partition, recs)
	if errors.Is(err, sljs.ErrFenced) {
		f.fenced()
	}
	return off, err
}

// fencedState reports share-state writes refused by the compare-and-set.
type fencedState struct {
	sharestate.Store
	fenced func()
}

func (f fencedState) Wait(ticket uint64) error {
	err := f.Store.Wait(ticket)
	if errors.Is(err, jsstate.ErrConflict) {
		f.fenced()
	}
	return err
}

// openCoordinatorBackend is openBackend in partitioned mode for the holder
// of the phase-1 lease, which serves DescribeCluster (CreateTopic and
// DeleteTopic reach it through the log domain's controller, and run on
// the log backend: topicController). Share groups have coordinators of their own
// (groups.go): this backend's share-group manager is never called.
func (n *clusterNode) openCoordinatorBackend(_ context.Context, epoch uint64) (*activeBackend, error) {
	n.mu.RLock()
	ls := n.part.store
	n.mu.RUnlock()
	if ls == nil {
		return nil, errors.New("the JetStream log is not open")
	}
	store := telemetry.TraceStore(ls, n.s.tel.Tracer, n.s.tel.Meter)
	view := func(ctx context.Context) (grpcapi.ClusterView, error) { return n.partitionedView(ctx, epoch) }
	b, err := n.s.openBackend(store, ls, sharestate.NewMem(), n.o, view, nil, n.logRoute(ls), jsProducers(ls))
	if err != nil {
		return nil, err
	}
	return &activeBackend{backend: b, epoch: epoch}, nil
}
