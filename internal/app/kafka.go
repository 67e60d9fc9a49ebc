package app

// The Kafka listener in cluster mode (docs/kafka.md "Cluster mode",
// docs/cluster.md "Kafka listener"): kafkaCluster is the listener's
// kafkawire.Cluster. Every instance with a --kafka-addr is a broker, its
// node id allocated once per instance ID in the lease bucket
// (cluster.Lease.KafkaNodeID) and its advertised Kafka address published
// in its heartbeat (cluster.Member). A partition's leader is the instance
// serving it — its owner (partitioned) or the active instance
// (active-standby) — and its leader epoch the revision of the lease the
// leader's term began at: partition leases in partitioned mode, the
// phase-1 lease in active-standby mode, so an epoch grows with every
// change of leader.

import (
	"context"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jslog"
	"github.com/sharelog/sharelog/internal/transport/kafkawire"
)

// kafkaCluster is kafkawire.Cluster over this instance's cluster node.
type kafkaCluster struct {
	n *clusterNode
	// node is this instance's Kafka node id, -1 until allocated; id is
	// the deployment's Kafka cluster id, "" until read.
	node atomic.Int32
	id   atomic.Pointer[string]
	// catalog is a standby's log domain in active-standby mode: the
	// topics as the JetStream log records them, every partition at the
	// active instance (activeOwners) and topics created there; nil while
	// not open. store is its store.
	catalog atomic.Pointer[broker.Log]
	store   atomic.Pointer[jslog.Store]
}

var _ kafkawire.Cluster = (*kafkaCluster)(nil)

func newKafkaCluster(n *clusterNode) *kafkaCluster {
	k := &kafkaCluster{n: n}
	k.node.Store(-1)
	return k
}

// kafkaEpoch is a lease revision as a Kafka leader epoch (an int32).
func kafkaEpoch(rev uint64) int32 {
	return int32(min(rev, math.MaxInt32))
}

// join allocates this instance's node id and reads the cluster id,
// retrying while NATS does not answer, and, in active-standby mode, opens
// the standby's catalog. False when ctx ended first.
func (k *kafkaCluster) join(ctx context.Context, lease *cluster.Lease, self *cluster.Member, freshID string) bool {
	n := k.n
	ttl := n.s.cfg.Cluster.LeaseTTL
	for {
		jctx, cancel := context.WithTimeout(ctx, ttl)
		node, err := lease.KafkaNodeID(jctx, self.ID)
		var id string
		if err == nil {
			id, err = lease.KafkaClusterID(jctx, freshID)
		}
		cancel()
		if err == nil {
			k.node.Store(node)
			k.id.Store(&id)
			self.KafkaNodeID = node
			n.s.log.Info("kafka broker", "node_id", node, "advertised_addr", self.KafkaAddr, "cluster_id", id)
			break
		}
		n.s.log.Warn("cannot read this instance's Kafka node id; retrying", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(ttl / 4):
		}
	}
	if n.part != nil {
		return true
	}
	c := n.s.cfg.Cluster
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ls, err := jslog.Open(octx, n.nc, jslog.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, WriteTimeout: c.NATSWriteTimeout})
		cancel()
		if err == nil {
			k.store.Store(ls)
			k.catalog.Store(broker.New(ls, broker.Config{Logger: n.s.log, Owners: activeOwners{n}, Peers: grpcPeers{n},
				Controller: topicController{n}, LongPolls: n.s.longPolls, Budget: n.s.budget}))
			return true
		}
		n.s.log.Warn("cannot open the JetStream log for the Kafka listener's topics; retrying", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(ttl / 4):
		}
	}
}

// close closes the catalog's store.
func (k *kafkaCluster) close() {
	if ls := k.store.Swap(nil); ls != nil {
		k.catalog.Store(nil)
		_ = ls.Close()
	}
}

// activeOwners is the broker.Owners of a standby's catalog: every
// partition is the active instance's.
type activeOwners struct{ n *clusterNode }

func (o activeOwners) Owner(ctx context.Context, _ string, _ int32) (broker.Owner, error) {
	n := o.n
	n.mu.RLock()
	role, holder, closing := n.role, n.holder, n.closing
	n.mu.RUnlock()
	if err := holderErr(ctx, closing, role, holder); err != nil {
		return broker.Owner{}, err
	}
	return broker.Owner{Peer: holder.Addr}, nil
}

// members maps the live instances' IDs to their Kafka brokers.
func (k *kafkaCluster) members(ctx context.Context) (map[string]kafkawire.Broker, error) {
	k.n.mu.RLock()
	lease := k.n.lease
	k.n.mu.RUnlock()
	if lease == nil {
		return nil, nil
	}
	ms, err := lease.LiveMembers(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]kafkawire.Broker, len(ms))
	for _, m := range ms {
		if m.KafkaAddr == "" {
			continue
		}
		host, portStr, err := net.SplitHostPort(m.KafkaAddr)
		port, perr := strconv.ParseInt(portStr, 10, 32)
		if err != nil || perr != nil {
			continue
		}
		out[m.ID] = kafkawire.Broker{NodeID: m.KafkaNodeID, Host: host, Port: int32(port)}
	}
	return out, nil
}

// nodeOf is the node id of the live instance id, -1 if none.
func nodeOf(members map[string]kafkawire.Broker, id string) int32 {
	if b, ok := members[id]; ok && id != "" {
		return b.NodeID
	}
	return -1
}

func (k *kafkaCluster) Self() int32 { return k.node.Load() }

func (k *kafkaCluster) Brokers(ctx context.Context) kafkawire.Brokers {
	out := kafkawire.Brokers{Self: k.node.Load(), Controller: -1}
	if id := k.id.Load(); id != nil {
		out.ClusterID = *id
	}
	members, err := k.members(ctx)
	if err != nil {
		k.n.s.log.Debug("kafka metadata: cannot list the cluster members", "err", err)
	}
	for _, b := range members {
		out.List = append(out.List, b)
	}
	n := k.n
	n.mu.RLock()
	active, holder, selfID := n.active != nil, n.holder, n.self.ID
	n.mu.RUnlock()
	if active {
		holder.ID = selfID
	}
	out.Controller = nodeOf(members, holder.ID)
	return out
}

func (k *kafkaCluster) Domain() (kafkawire.Domain, func()) {
	n := k.n
	if n.part != nil {
		b, done, err := n.localBackend()
		if err != nil {
			return kafkawire.Domain{}, func() {}
		}
		return kafkawire.Domain{Log: b.logAPI, Share: b.share, Groups: b.groups}, done
	}
	n.mu.RLock()
	active, closing := n.active, n.closing
	if active != nil && !closing {
		active.calls.Add(1) // under n.mu: closeBackend cannot have started waiting
	}
	n.mu.RUnlock()
	if active != nil && !closing {
		return kafkawire.Domain{Log: active.logAPI, Share: active.share, Groups: active.groups, Txn: active.txn}, active.calls.Done
	}
	return kafkawire.Domain{Log: k.catalog.Load()}, func() {}
}

func (k *kafkaCluster) Leader(ctx context.Context, topic string, part int32) kafkawire.Leader {
	n := k.n
	self := k.node.Load()
	if n.part == nil {
		n.mu.RLock()
		active, role, holder, term := n.active != nil, n.role, n.holder, n.term
		n.mu.RUnlock()
		switch {
		case active:
			return kafkawire.Leader{Node: self, Epoch: kafkaEpoch(term)}
		case role != cluster.Standby || holder.ID == "":
			return kafkawire.Leader{Node: -1, Epoch: kafkaEpoch(term)}
		}
		members, _ := k.members(ctx)
		return kafkawire.Leader{Node: nodeOf(members, holder.ID), Epoch: kafkaEpoch(term)}
	}
	n.mu.RLock()
	store, its, selfID := n.part.store, n.part.items, n.self.ID
	n.mu.RUnlock()
	if store == nil {
		return kafkawire.Leader{Node: -1, Epoch: -1}
	}
	info, err := store.TopicInfo(ctx, topic)
	if err != nil || part < 0 || part >= info.Partitions {
		return kafkawire.Leader{Node: self} // the domain answers for it
	}
	item := cluster.PartitionItem(info.ID, part)
	if epoch, ok := n.part.gates.Term(item); ok {
		return kafkawire.Leader{Node: self, Epoch: kafkaEpoch(epoch)}
	}
	if its == nil {
		return kafkawire.Leader{Node: -1, Epoch: -1}
	}
	o, ok := its.Owner(item)
	if !ok || o.Owner.ID == selfID {
		// Nobody, or this instance taking it over: not served yet.
		return kafkawire.Leader{Node: -1, Epoch: kafkaEpoch(o.Epoch)}
	}
	members, _ := k.members(ctx)
	return kafkawire.Leader{Node: nodeOf(members, o.Owner.ID), Epoch: kafkaEpoch(o.Epoch)}
}

func (k *kafkaCluster) Coordinator(ctx context.Context, keyType int8, key string) int32 {
	n := k.n
	self := k.node.Load()
	if n.part == nil {
		n.mu.RLock()
		active, holder := n.active != nil, n.holder
		n.mu.RUnlock()
		if active {
			return self
		}
		members, _ := k.members(ctx)
		return nodeOf(members, holder.ID)
	}
	group := key
	if keyType == 2 { // a share-partition's key: group:topic id:partition
		group, _, _ = strings.Cut(key, ":")
	}
	item := cluster.GroupItem(group)
	if n.part.gates.Serves(item) {
		return self
	}
	n.mu.RLock()
	its, lease, selfID := n.part.items, n.lease, n.self.ID
	n.mu.RUnlock()
	if its == nil || lease == nil {
		return -1
	}
	owners, err := lease.LiveOwners(ctx)
	if err != nil {
		return -1
	}
	o, ok := owners[item]
	if !ok {
		return self // nobody coordinates it: a call here takes it
	}
	if o.Owner.ID == selfID {
		return -1 // being adopted here
	}
	members, _ := k.members(ctx)
	return nodeOf(members, o.Owner.ID)
}

// Transactions: transactional ids are served in active-standby mode, each
// coordinated by the active instance (Coordinator answers it for every
// key type); partitioned mode does not serve them yet (docs/kafka.md
// "Transactions").
func (k *kafkaCluster) Transactions() bool { return k.n.part == nil }

// kafkaAdvertised is the Kafka address this instance publishes.
func (s *Server) kafkaAdvertised() string {
	if s.kafka == nil {
		return ""
	}
	return s.kafka.AdvertisedAddr()
}

// freshKafkaClusterID is the cluster id this instance offers when the
// deployment has none yet: the one of its data dir's listener.
func (s *Server) freshKafkaClusterID() string {
	if s.kafka == nil {
		return ""
	}
	return s.kafka.ClusterID()
}
