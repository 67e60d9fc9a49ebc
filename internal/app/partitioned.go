package app

// Cluster mode "partitioned" (--cluster-mode=partitioned, docs/cluster.md
// "Phase 2"): every live instance owns a balanced share of the partitions
// through per-partition leases (internal/cluster Items) and serves the
// calls about them; one instance, the holder of the phase-1 lease, is the
// coordinator of every share group. The code of phase 1 (cluster.go,
// forward.go) runs unchanged for that coordinator; this file adds the
// per-partition ownership and routing.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/ownership"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jslog"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsoffsets"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsstate"
	"github.com/sharelog/sharelog/internal/telemetry"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// partitioned is the per-partition side of an instance in partitioned mode.
type partitioned struct {
	store *jslog.Store   // shared by the log backend and the coordinator's backend
	state *jsstate.Store // scoped: the share groups this instance coordinates (groups.go)
	// offsets: the committed offsets of the consumer groups this
	// instance coordinates (scoped; with a Kafka listener only, else nil).
	offsets *jsoffsets.Store
	logB    *backend       // serves LogService and ChangeStreamService calls
	items   *cluster.Items // this instance's partition leases
	calls   sync.WaitGroup // calls running on logB
	// gates: the partitions and groups this instance serves, opened and
	// closed by their leases (acquireItem, releaseItem).
	gates *ownership.Gates
}

// openPartitioned opens the shared JetStream log store and the log backend,
// retrying while NATS cannot be reached. False when ctx ended first.
func (n *clusterNode) openPartitioned(ctx context.Context, ttl time.Duration) bool {
	c := n.s.cfg.Cluster
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ls, err := jslog.Open(octx, n.nc, jslog.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, WriteTimeout: c.NATSWriteTimeout})
		cancel()
		if err == nil {
			err = n.openLogBackend(ctx, ls)
			if err == nil {
				return true
			}
			_ = ls.Close()
		}
		n.s.log.Warn("cannot open the JetStream log; retrying", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(ttl / 4):
		}
	}
}

// openLogBackend opens the instance's backend over the shared log store:
// LogService and ChangeStreamService calls of the partitions it owns, and
// ShareGroupService calls of the groups it coordinates, over a scoped
// share state store (groups.go).
func (n *clusterNode) openLogBackend(ctx context.Context, ls *jslog.Store) error {
	c := n.s.cfg.Cluster
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ss, err := jsstate.Open(sctx, n.nc, jsstate.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, Scoped: true, PartitionOwners: true,
		OnFenced: n.shareFenced})
	cancel()
	if err != nil {
		return fmt.Errorf("open the JetStream share state: %w", err)
	}
	store := telemetry.TraceStore(ls, n.s.tel.Tracer, n.s.tel.Meter)
	// DescribeCluster is answered by the holder of the phase-1 lease.
	unused := func(context.Context) (grpcapi.ClusterView, error) {
		return grpcapi.ClusterView{}, notOwnerErr("DescribeCluster is answered by another instance; retry")
	}
	b, err := n.s.openBackend(store, ls, ss, n.o, unused, n.shareOwnerHooks(), n.logRoute(ls), jsProducers(ls)) // closes ss on failure
	if err != nil {
		return err
	}
	// This mode coordinates no transactional ids, but an active-standby
	// deployment before it may have (docs/kafka.md "Transactions").
	n.readTxnState(ctx, b)
	var offs *jsoffsets.Store
	if n.s.cfg.KafkaAddr != "" {
		// Consumer groups are coordinated like share groups: by the
		// holder of the group's lease (groups.go).
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		offs, err = jsoffsets.Open(octx, n.nc, jsoffsets.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas, Scoped: true,
			OnFenced: n.offsetsFenced, Logger: n.s.log})
		cancel()
		if err == nil {
			var cg *consumergroup.Coordinator
			cg, err = openCoordinator(n.s.cfg, offs, b.logAPI, b.share, &groupRoute{
				coordinates: n.consumerGroupCoordinates,
				serves:      func(g string) bool { return n.part.gates.Serves(cluster.GroupItem(g)) },
			}, n.s.log)
			if err == nil {
				b.withGroups(cg, n.s.guard)
			}
		}
		if err != nil {
			_ = b.close(n.s.log)
			return fmt.Errorf("open the consumer groups' offsets: %w", err)
		}
	}
	n.mu.Lock()
	n.part.store, n.part.logB, n.part.state, n.part.offsets = ls, b, ss, offs
	n.mu.Unlock()
	return nil
}

// partitionItems lists every partition of every topic, as leases name them.
func (n *clusterNode) partitionItems() ([]string, error) {
	topics, err := n.part.store.Topics(context.Background())
	if err != nil {
		return nil, err
	}
	var items []string
	for _, t := range topics {
		for p := range t.Partitions {
			items = append(items, cluster.PartitionItem(t.ID, p))
		}
	}
	return items, nil
}

// topicName is the name of the topic with ID id ("" when there is none).
func (n *clusterNode) topicName(ctx context.Context, id string) string {
	topics, err := n.part.store.Topics(ctx)
	if err != nil {
		return ""
	}
	for _, t := range topics {
		if t.ID == id {
			return t.Name
		}
	}
	return ""
}

// acquirePartition runs after this instance took item's lease: it reads
// the stream's bounds as the previous owner left them, then serves.
func (n *clusterNode) acquirePartition(ctx context.Context, item string, epoch uint64) error {
	id, part, ok := cluster.ParsePartitionItem(item)
	if !ok {
		return fmt.Errorf("%q is not a partition", item)
	}
	name := n.topicName(ctx, id)
	if name == "" {
		return fmt.Errorf("no topic has the ID %s", id)
	}
	if err := n.part.store.Resync(ctx, name, part); err != nil {
		return err
	}
	// The share-partitions first: a fetch finding the partition served
	// must find their state (owners.go).
	if err := n.adoptSharePartitions(ctx, id, part); err != nil {
		return err
	}
	n.part.gates.Serve(item, epoch)
	n.s.log.Info("serving partition", "topic", name, "partition", part, "epoch", epoch)
	return nil
}

// releasePartition stops serving item's writes, after those running.
func (n *clusterNode) releasePartition(item string, epoch uint64, handover bool) {
	owned := n.part.gates.Stop(item, epoch)
	if id, part, ok := cluster.ParsePartitionItem(item); ok && owned {
		n.releaseSharePartitions(id, part, handover)
	}
	n.s.log.Info("stopped serving partition", "item", item, "epoch", epoch, "handover", handover)
}

// localBackend is the log backend for one call (done ends it).
func (n *clusterNode) localBackend() (*backend, func(), error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	switch {
	case n.closing:
		return nil, nil, notOwnerErr("this instance is shutting down; retry")
	case n.part.logB == nil:
		return nil, nil, ownerUnreachableErr("this instance has not opened the JetStream log yet; retry")
	}
	n.part.calls.Add(1)
	return n.part.logB, n.part.calls.Done, nil
}

func (n *clusterNode) serveLocal(ctx context.Context, m method, req any) (any, error) {
	b, done, err := n.localBackend()
	if err != nil {
		return nil, err
	}
	defer done()
	return m.unary(implOf(b, m.service), ctx, func(v any) error {
		proto.Merge(v.(proto.Message), req.(proto.Message))
		return nil
	}, nil)
}

// punary routes a unary call in partitioned mode:
//   - ShareGroupService calls are served here: the share-group domain asks
//     the group's coordinator and the partitions' owners
//     (sharegroup.Coordinators and Peers, groups.go, grouppeers.go); an
//     admin call a coordinator sends owned-only is answered for the
//     partitions owned here (owners.go);
//   - ConsumerGroupService calls go to the group's coordinator, and
//     ListConsumerGroups to every instance (cgroute.go);
//   - DescribeCluster goes to the holder of the phase-1 lease (the
//     phase-1 path);
//   - every other LogService call is served here: the log domain asks
//     the owners of partitions owned elsewhere (broker.Owners, logRoute)
//     and the holder of the phase-1 lease to create and delete topics
//     (broker.Controller, topicController).
func (n *clusterNode) punary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, ok := methods[info.FullMethod]
	if !ok || m.unary == nil {
		return handler(ctx, req)
	}
	if m.service == sharelogv1.ShareGroupService_ServiceDesc.ServiceName {
		switch r := req.(type) {
		case *sharelogv1.DescribeShareGroupOffsetsRequest, *sharelogv1.DescribeSharePartitionStateRequest,
			*sharelogv1.AlterShareGroupOffsetsRequest, *sharelogv1.DeleteShareGroupOffsetsRequest, *sharelogv1.DeleteShareGroupRequest:
			// A coordinator asking the owners (owners.go).
			owned, err := n.ownedOnlyCall(ctx)
			if err != nil {
				return nil, err
			}
			if owned {
				ctx = sharegroup.OwnedOnly(ctx)
			}
		case *sharelogv1.ShareFetchRequest:
			// Served by the instance that receives it (owners.go).
			if r.GetShareSessionEpoch() == 0 && forwardedFrom(ctx) == "" {
				n.ensureGroup(ctx, r.GetGroupId())
			}
		}
		return n.serveLocal(ctx, m, req)
	}
	if m.service == sharelogv1.ConsumerGroupService_ServiceDesc.ServiceName {
		return n.consumerGroupCall(ctx, m, info, req) // cgroute.go
	}
	switch req.(type) {
	case *sharelogv1.DescribeClusterRequest:
		return n.unary(ctx, req, info, handler)
	}
	return n.serveLocal(ctx, m, req)
}

// pstream serves a streaming call (StreamChanges) in partitioned mode
// here: the change-stream domain streams a partition owned elsewhere from
// its owner (changestream.Peers, grpcPeers).
func (n *clusterNode) pstream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	m, ok := methods[info.FullMethod]
	if !ok || m.stream == nil {
		return handler(srv, ss)
	}
	if m.service == sharelogv1.ShareGroupService_ServiceDesc.ServiceName {
		return n.stream(srv, ss, info, handler)
	}
	b, done, err := n.localBackend()
	if err != nil {
		return err
	}
	defer done()
	return m.stream(implOf(b, m.service), ss)
}

// partitionedView is DescribeCluster in partitioned mode, answered by the
// holder of the phase-1 lease: the live instances, each partition's owner
// and each group's coordinator from the leases; the groups are those with
// state in the share bucket and those with a coordinator.
func (n *clusterNode) partitionedView(ctx context.Context, epoch uint64) (grpcapi.ClusterView, error) {
	v, err := n.activeView(ctx, epoch)
	if err != nil {
		return v, err
	}
	v.Mode = ModePartitioned
	n.mu.RLock()
	lease, state := n.lease, n.part.state
	n.mu.RUnlock()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	owners, err := lease.LiveOwners(rctx)
	if err != nil {
		return v, ownerUnreachableErr("cannot read the partition leases from NATS: " + err.Error())
	}
	v.Owner = func(topicID string, p int32) (string, int64) {
		o := owners[cluster.PartitionItem(topicID, p)]
		return o.Owner.ID, int64(o.Epoch)
	}
	v.Coordinator = func(group string) (string, int64) {
		o := owners[cluster.GroupItem(group)]
		return o.Owner.ID, int64(o.Epoch)
	}
	v.Groups = []string{}
	if state != nil {
		if v.Groups, err = state.LiveGroupIDs(rctx); err != nil {
			return v, ownerUnreachableErr("cannot list the share groups in NATS: " + err.Error())
		}
	}
	for item := range owners {
		if id, ok := groupOf(item); ok && !slices.Contains(v.Groups, id) {
			v.Groups = append(v.Groups, id)
		}
	}
	slices.Sort(v.Groups)
	return v, nil
}

// closePartitioned closes the log backend after the leases were handed
// over: its change streams end, the calls on it return, then the store
// closes.
func (n *clusterNode) closePartitioned() {
	n.mu.Lock()
	b, store := n.part.logB, n.part.store
	n.part.logB, n.part.store, n.part.state, n.part.offsets = nil, nil, nil, nil
	n.mu.Unlock()
	if b != nil {
		b.streams.Shutdown()
		_ = b.close(n.s.log)
	}
	n.part.calls.Wait()
	if store != nil {
		_ = store.Close()
	}
}
