package app

// The DCP listener in cluster mode (docs/dcp.md "Cluster mode",
// docs/cluster.md "DCP listener"): dcpCluster is the listener's
// dcpwire.Cluster. Every instance with a --dcp-addr publishes its
// advertised DCP address in its heartbeat (cluster.Member.DCPAddr); the
// bucket config lists the live instances with one and names, per
// vBucket, the instance serving the partition — its owner (partitioned)
// or the active instance (active-standby). The config's rev is built
// from the lease revisions the serving terms began at (partition leases
// in partitioned mode, the phase-1 lease in active-standby mode), so it
// grows whenever a partition changes owner.

import (
	"context"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jslog"
	"github.com/sharelog/sharelog/internal/transport/dcpwire"
)

// dcpCluster is dcpwire.Cluster over this instance's cluster node.
type dcpCluster struct {
	n *clusterNode
	// catalog is a standby's log domain in active-standby mode (the
	// topics as the JetStream log records them), so that a client
	// bootstrapping here reads the bucket config; nil while not open,
	// and never opened with a Kafka listener, whose catalog serves.
	// store is its store.
	catalog atomic.Pointer[broker.Log]
	store   atomic.Pointer[jslog.Store]
}

var _ dcpwire.Cluster = (*dcpCluster)(nil)

func newDCPCluster(n *clusterNode) *dcpCluster { return &dcpCluster{n: n} }

// open opens, in active-standby mode, the standby's catalog, retrying
// while NATS does not answer, until ctx ends.
func (d *dcpCluster) open(ctx context.Context) {
	n := d.n
	if n.part != nil || n.kafka != nil {
		return // partitioned: the log backend has the topics; else the Kafka listener's catalog
	}
	c := n.s.cfg.Cluster
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ls, err := jslog.Open(octx, n.nc, jslog.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, WriteTimeout: c.NATSWriteTimeout})
		cancel()
		if err == nil {
			d.store.Store(ls)
			d.catalog.Store(broker.New(ls, broker.Config{Logger: n.s.log, Owners: activeOwners{n}, Peers: grpcPeers{n},
				Controller: topicController{n}, LongPolls: n.s.longPolls, Budget: n.s.budget}))
			return
		}
		n.s.log.Warn("cannot open the JetStream log for the DCP listener's topics; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.LeaseTTL / 4):
		}
	}
}

// close closes the catalog's store.
func (d *dcpCluster) close() {
	if ls := d.store.Swap(nil); ls != nil {
		d.catalog.Store(nil)
		_ = ls.Close()
	}
}

func (d *dcpCluster) Domain() (dcpwire.Domain, func(), error) {
	n := d.n
	if n.part != nil {
		b, done, err := n.localBackend()
		if err != nil {
			return dcpwire.Domain{}, nil, err
		}
		return dcpwire.Domain{Log: b.logAPI, Streams: b.streams}, done, nil
	}
	n.mu.RLock()
	active, closing := n.active, n.closing
	if active != nil && !closing {
		active.calls.Add(1) // under n.mu: closeBackend cannot have started waiting
	}
	n.mu.RUnlock()
	if active != nil && !closing {
		return dcpwire.Domain{Log: active.logAPI, Streams: active.streams}, active.calls.Done, nil
	}
	// A standby: the topics only; every stream request answers
	// NOT_MY_VBUCKET.
	catalog := d.catalog.Load()
	if catalog == nil && n.kafka != nil {
		catalog = n.kafka.catalog.Load()
	}
	return dcpwire.Domain{Log: catalog}, func() {}, nil
}

func (d *dcpCluster) Serve(topicID string, part int32) (<-chan struct{}, bool) {
	n := d.n
	if n.part == nil {
		// Active-standby: the active instance serves every vBucket; its
		// streams end (STREAM_END state changed) when its backend closes.
		n.mu.RLock()
		ok := n.active != nil && !n.closing
		n.mu.RUnlock()
		return nil, ok
	}
	h, ok := n.part.gates.Hold(cluster.PartitionItem(topicID, part))
	if !ok {
		return nil, false
	}
	defer h.Release()
	return h.Calls.Done(), true
}

func (d *dcpCluster) Map(ctx context.Context, t broker.Topic) dcpwire.Map {
	n := d.n
	n.mu.RLock()
	lease, self, active, holder, term := n.lease, n.self, n.active != nil, n.holder, n.term
	n.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var members []cluster.Member
	if lease != nil {
		members, _ = lease.LiveMembers(ctx)
	}
	if !slices.ContainsFunc(members, func(m cluster.Member) bool { return m.ID == self.ID }) {
		// Before this instance's first heartbeat is seen: it is live.
		members = append(members, self)
		slices.SortFunc(members, func(a, b cluster.Member) int { return strings.Compare(a.ID, b.ID) })
	}
	m := dcpwire.Map{Self: -1}
	index := map[string]int{}
	for _, mb := range members {
		host, portStr, err := net.SplitHostPort(mb.DCPAddr)
		port, perr := strconv.Atoi(portStr)
		if mb.DCPAddr == "" || err != nil || perr != nil || port <= 0 {
			continue // no DCP listener there
		}
		if mb.ID == self.ID {
			m.Self = len(m.Nodes)
		}
		index[mb.ID] = len(m.Nodes)
		m.Nodes = append(m.Nodes, dcpwire.Node{Host: host, Port: port})
	}
	nodeOf := func(id string) int {
		if i, ok := index[id]; ok && id != "" {
			return i
		}
		return -1
	}
	m.Owners = make([]int, len(t.Partitions))
	var epoch uint64
	if n.part == nil {
		id := holder.ID
		if active {
			id = self.ID
		}
		for i := range m.Owners {
			m.Owners[i] = nodeOf(id)
		}
		epoch = term
	} else {
		var owners map[string]cluster.ItemOwner
		if lease != nil {
			owners, _ = lease.LiveOwners(ctx)
		}
		// The lease's owner, also when it is this instance still
		// adopting the partition (a stream request then answers
		// NOT_MY_VBUCKET until it serves): the map changes only with
		// an owner's new term, so its rev tells every change.
		for i := range m.Owners {
			o, ok := owners[cluster.PartitionItem(t.Info.ID, int32(i))]
			m.Owners[i] = -1
			if ok {
				m.Owners[i] = nodeOf(o.Owner.ID)
				epoch = max(epoch, o.Epoch)
			}
		}
	}
	m.Rev = configRev(epoch, len(t.Partitions))
	return m
}

// configRev is a bucket config's rev: the newest term's lease revision,
// then the partition count (a topic that grows gives a newer config).
func configRev(epoch uint64, partitions int) int64 {
	return int64(min(epoch, math.MaxInt64>>16))<<16 | int64(min(partitions, 0xffff))
}

// dcpAdvertised is the DCP address this instance publishes.
func (s *Server) dcpAdvertised() string {
	if s.dcp == nil {
		return ""
	}
	return s.dcp.AdvertisedAddr()
}
