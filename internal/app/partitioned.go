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
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/sharegroup"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jslog"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsstate"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/telemetry"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// partitioned is the per-partition side of an instance in partitioned mode.
type partitioned struct {
	store *jslog.Store   // shared by the log backend and the coordinator's backend
	state *jsstate.Store // scoped: the share groups this instance coordinates (groups.go)
	logB  *backend       // serves LogService and ChangeStreamService calls
	items *cluster.Items // this instance's partition leases
	calls sync.WaitGroup // calls running on logB

	gmu   sync.Mutex
	gates map[string]*partitionGate
}

// partitionGate says whether this instance serves a partition's writes.
// Appends and purges hold it shared while they run; giving the partition
// up takes it exclusively, so it waits for them, and none starts after.
type partitionGate struct {
	mu    sync.RWMutex
	owned bool
	epoch uint64
	// For a share group (groups.go): calls ends when the group is given
	// up, stop ends it.
	calls context.Context
	stop  context.CancelFunc
}

func (p *partitioned) gate(item string) *partitionGate {
	p.gmu.Lock()
	defer p.gmu.Unlock()
	g := p.gates[item]
	if g == nil {
		g = &partitionGate{}
		p.gates[item] = g
	}
	return g
}

// hold returns item's gate read-locked if this instance serves item (the
// caller unlocks it), nil if not.
func (p *partitioned) hold(item string) *partitionGate {
	g := p.gate(item)
	g.mu.RLock()
	if !g.owned {
		g.mu.RUnlock()
		return nil
	}
	return g
}

func (p *partitioned) serves(item string) bool {
	g := p.hold(item)
	if g == nil {
		return false
	}
	g.mu.RUnlock()
	return true
}

// openPartitioned opens the shared JetStream log store and the log backend,
// retrying while NATS cannot be reached. False when ctx ended first.
func (n *clusterNode) openPartitioned(ctx context.Context, ttl time.Duration) bool {
	c := n.s.cfg.Cluster
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ls, err := jslog.Open(octx, n.nc, jslog.Options{Prefix: c.NATSPrefix, Replicas: c.NATSReplicas})
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
	store := telemetry.TraceStore(routedStore{Store: ls, n: n}, n.s.tel.Tracer, n.s.tel.Meter)
	// DescribeCluster is answered by the holder of the phase-1 lease.
	unused := func(context.Context) (grpcapi.ClusterView, error) {
		return grpcapi.ClusterView{}, notOwnerErr("DescribeCluster is answered by another instance; retry")
	}
	b, err := n.s.openBackend(store, ls, ss, n.o, unused, n.shareOwnerHooks()) // closes ss on failure
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.part.store, n.part.logB, n.part.state = ls, b, ss
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
	g := n.part.gate(item)
	g.mu.Lock()
	g.owned, g.epoch = true, epoch
	g.mu.Unlock()
	n.s.log.Info("serving partition", "topic", name, "partition", part, "epoch", epoch)
	return nil
}

// releasePartition stops serving item's writes, after those running.
func (n *clusterNode) releasePartition(item string, epoch uint64, handover bool) {
	g := n.part.gate(item)
	g.mu.Lock()
	owned := g.owned && g.epoch == epoch
	if owned {
		g.owned = false
	}
	g.mu.Unlock()
	if id, part, ok := cluster.ParsePartitionItem(item); ok && owned {
		n.releaseSharePartitions(id, part, handover)
	}
	n.s.log.Info("stopped serving partition", "item", item, "epoch", epoch, "handover", handover)
}

// routedStore is the JetStream log store as the backends of a partitioned
// instance see it: appends and purges of a partition this instance owns
// go to the store, under the partition's gate; an append to a partition
// owned elsewhere (a produce routed by key, a dead-letter copy) is sent to
// its owner as a Produce with that partition.
type routedStore struct {
	*jslog.Store
	n *clusterNode
}

func (r routedStore) Append(ctx context.Context, topic string, part int32, recs []logstore.Record) (int64, error) {
	id, err := r.Store.TopicID(topic)
	if err != nil {
		return r.Store.Append(ctx, topic, part, recs) // the store says what is wrong
	}
	item := cluster.PartitionItem(id, part)
	if g := r.n.part.hold(item); g != nil {
		off, err := r.Store.Append(ctx, topic, part, recs)
		epoch := g.epoch
		g.mu.RUnlock()
		if errors.Is(err, sljs.ErrFenced) {
			r.n.part.items.Fenced(item, epoch)
		}
		return off, err
	}
	cc, err := r.n.ownerConn(ctx, item, topic, part)
	if err != nil {
		return 0, err
	}
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &part, Records: make([]*sharelogv1.Record, len(recs))}
	for i := range recs {
		rec := &recs[i]
		pr := &sharelogv1.Record{Timestamp: rec.Timestamp, Key: rec.Key, Value: rec.Value}
		for _, h := range rec.Headers {
			pr.Headers = append(pr.Headers, &sharelogv1.RecordHeader{Key: h.Key, Value: h.Value})
		}
		req.Records[i] = pr
	}
	resp, err := sharelogv1.NewLogServiceClient(cc).Produce(r.n.outgoing(ctx), req)
	if err != nil {
		return 0, forwardErr(cc.Target(), err)
	}
	if len(resp.GetResults()) != len(recs) {
		return 0, fmt.Errorf("the owner of %s-%d answered %d results for %d records: %w", topic, part, len(resp.GetResults()), len(recs), logstore.ErrStorage)
	}
	return resp.GetResults()[0].GetOffset(), nil
}

func (r routedStore) DeleteRecordsBefore(ctx context.Context, topic string, part int32, offset int64) (int64, error) {
	id, err := r.Store.TopicID(topic)
	if err != nil {
		return r.Store.DeleteRecordsBefore(ctx, topic, part, offset)
	}
	g := r.n.part.hold(cluster.PartitionItem(id, part))
	if g == nil {
		// Purges are routed to the owner before they get here; ownership
		// moved during the call.
		return 0, fmt.Errorf("this instance stopped owning %s-%d during the purge; retry: %w", topic, part, logstore.ErrStorage)
	}
	defer g.mu.RUnlock()
	return r.Store.DeleteRecordsBefore(ctx, topic, part, offset)
}

// ownerConn is the connection to item's owner, for a call this instance
// cannot serve.
func (n *clusterNode) ownerConn(ctx context.Context, item, topic string, part int32) (*grpc.ClientConn, error) {
	if forwardedFrom(ctx) != "" {
		return nil, notOwnerErr(fmt.Sprintf("this instance does not own %s-%d (any more); retry", topic, part))
	}
	o, ok := n.part.items.Owner(item)
	n.mu.RLock()
	self := n.self.ID
	n.mu.RUnlock()
	if !ok || o.Owner.Addr == "" || o.Owner.ID == self {
		return nil, notOwnerErr(fmt.Sprintf("%s-%d has no owner serving it right now (one is being chosen); retry", topic, part))
	}
	return n.conn(o.Owner.Addr)
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

// partitionOf is the lease item of topic's partition, false when there is
// no such partition (the log backend then answers the error).
func (n *clusterNode) partitionOf(ctx context.Context, topic string, part int32) (string, bool) {
	n.mu.RLock()
	store := n.part.store
	n.mu.RUnlock()
	if store == nil {
		return "", false
	}
	info, err := store.TopicInfo(ctx, topic)
	if err != nil || part < 0 || part >= info.Partitions {
		return "", false
	}
	return cluster.PartitionItem(info.ID, part), true
}

// punary routes a unary call in partitioned mode:
//   - ShareGroupService calls go to the group's coordinator (groups.go),
//     ListShareGroups to every instance;
//   - CreateTopic, DeleteTopic and DescribeCluster go to the holder of the
//     phase-1 lease (the phase-1 path);
//   - Fetch, ListOffsets and Produce with a partition go to the
//     partition's owner;
//   - Purge is split by owner;
//   - ListTopics, DescribeTopic and Produce without a partition are
//     served here (appends to partitions owned elsewhere are sent on by
//     routedStore).
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
				return n.serveLocal(sharegroup.OwnedOnly(ctx), m, req)
			}
		case *sharelogv1.ListShareGroupsRequest:
			return n.listGroups(ctx, info.FullMethod, m, r)
		case *sharelogv1.ShareFetchRequest:
			// Served by the instance that receives it (owners.go).
			if r.GetShareSessionEpoch() == 0 && forwardedFrom(ctx) == "" {
				n.ensureGroup(ctx, r.GetGroupId())
			}
			return n.serveLocal(ctx, m, req)
		case *sharelogv1.ShareAcknowledgeRequest:
			return n.serveLocal(ctx, m, req)
		}
		if r, ok := req.(groupRequest); ok {
			return n.groupCall(ctx, info.FullMethod, m, req, r.GetGroupId())
		}
		return n.serveLocal(ctx, m, req)
	}
	switch r := req.(type) {
	case *sharelogv1.CreateTopicRequest, *sharelogv1.DeleteTopicRequest, *sharelogv1.DescribeClusterRequest:
		return n.unary(ctx, req, info, handler)
	case *sharelogv1.PurgeRequest:
		return n.purge(ctx, r)
	case *sharelogv1.ProduceRequest:
		if r.Partition == nil {
			return n.serveLocal(ctx, m, req)
		}
		return n.byPartition(ctx, info.FullMethod, m, req, r.GetTopic(), r.GetPartition())
	case *sharelogv1.FetchRequest:
		return n.byPartition(ctx, info.FullMethod, m, req, r.GetTopic(), r.GetPartition())
	case *sharelogv1.ListOffsetsRequest:
		return n.byPartition(ctx, info.FullMethod, m, req, r.GetTopic(), r.GetPartition())
	}
	return n.serveLocal(ctx, m, req)
}

func (n *clusterNode) byPartition(ctx context.Context, fullMethod string, m method, req any, topic string, part int32) (any, error) {
	item, ok := n.partitionOf(ctx, topic, part)
	if !ok || n.part.serves(item) {
		return n.serveLocal(ctx, m, req)
	}
	cc, err := n.ownerConn(ctx, item, topic, part)
	if err != nil {
		return nil, err
	}
	return n.forwardUnary(ctx, cc, fullMethod, m, req)
}

// purge splits a Purge by the owners of its partitions, sends each part
// to its owner (or serves it here) and puts the answers back in the
// request's order.
func (n *clusterNode) purge(ctx context.Context, req *sharelogv1.PurgeRequest) (any, error) {
	type part struct {
		req *sharelogv1.PurgeRequest
		pos [][2]int // per sub-request partition, in order: (topic entry, partition entry) of the request
	}
	const here = ""
	parts := map[string]*part{} // owner address, here = this instance
	var order []string
	for ti, t := range req.GetTopics() {
		for pi, p := range t.GetPartitions() {
			target := here
			if item, ok := n.partitionOf(ctx, t.GetTopic(), p.GetPartition()); ok && !n.part.serves(item) {
				o, known := n.part.items.Owner(item)
				if !known || o.Owner.Addr == "" || forwardedFrom(ctx) != "" {
					return nil, notOwnerErr(fmt.Sprintf("%s-%d has no owner serving it here right now; retry", t.GetTopic(), p.GetPartition()))
				}
				target = o.Owner.Addr
			}
			pt := parts[target]
			if pt == nil {
				pt = &part{req: &sharelogv1.PurgeRequest{TimeoutMs: req.GetTimeoutMs()}}
				parts[target] = pt
				order = append(order, target)
			}
			if k := len(pt.req.Topics); k == 0 || pt.pos[len(pt.pos)-1][0] != ti {
				pt.req.Topics = append(pt.req.Topics, &sharelogv1.PurgeTopic{Topic: t.GetTopic()})
			}
			last := pt.req.Topics[len(pt.req.Topics)-1]
			last.Partitions = append(last.Partitions, p)
			pt.pos = append(pt.pos, [2]int{ti, pi})
		}
	}
	if len(order) <= 1 && (len(order) == 0 || order[0] == here) {
		return n.serveLocal(ctx, methods[sharelogv1.LogService_Purge_FullMethodName], req)
	}
	out := &sharelogv1.PurgeResponse{Topics: make([]*sharelogv1.PurgeTopicResult, len(req.GetTopics()))}
	for ti, t := range req.GetTopics() {
		out.Topics[ti] = &sharelogv1.PurgeTopicResult{Topic: t.GetTopic(), Partitions: make([]*sharelogv1.PurgePartitionResult, len(t.GetPartitions()))}
	}
	m := methods[sharelogv1.LogService_Purge_FullMethodName]
	for _, target := range order {
		pt := parts[target]
		var resp any
		var err error
		if target == here {
			resp, err = n.serveLocal(ctx, m, pt.req)
		} else {
			var cc *grpc.ClientConn
			if cc, err = n.conn(target); err == nil {
				resp, err = n.forwardUnary(ctx, cc, sharelogv1.LogService_Purge_FullMethodName, m, pt.req)
			}
		}
		if err != nil {
			return nil, err
		}
		k := 0
		for _, tr := range resp.(*sharelogv1.PurgeResponse).GetTopics() {
			for _, pr := range tr.GetPartitions() {
				if k >= len(pt.pos) {
					return nil, fmt.Errorf("a purge answer has more partitions than its request: %w", logstore.ErrStorage)
				}
				pos := pt.pos[k]
				out.Topics[pos[0]].Partitions[pos[1]] = pr
				k++
			}
		}
		if k != len(pt.pos) {
			return nil, fmt.Errorf("a purge answer has %d partitions for %d asked: %w", k, len(pt.pos), logstore.ErrStorage)
		}
	}
	return out, nil
}

// replayStream hands first to the handler's first RecvMsg, then reads on.
type replayStream struct {
	grpc.ServerStream
	first proto.Message
}

func (r *replayStream) RecvMsg(v any) error {
	if r.first != nil {
		proto.Merge(v.(proto.Message), r.first)
		r.first = nil
		return nil
	}
	return r.ServerStream.RecvMsg(v)
}

// pstream routes a streaming call (StreamChanges) in partitioned mode to
// the owner of the partition its request names.
func (n *clusterNode) pstream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	m, ok := methods[info.FullMethod]
	if !ok || m.stream == nil {
		return handler(srv, ss)
	}
	if m.service == sharelogv1.ShareGroupService_ServiceDesc.ServiceName {
		return n.stream(srv, ss, info, handler)
	}
	first := m.in.New().Interface()
	if err := ss.RecvMsg(first); err != nil {
		return err
	}
	ctx := ss.Context()
	if topic, part, ok := requestPartition(first); ok {
		if item, ok := n.partitionOf(ctx, topic, part); ok && !n.part.serves(item) {
			cc, err := n.ownerConn(ctx, item, topic, part)
			if err != nil {
				return err
			}
			return n.forwardStream(ctx, cc, info.FullMethod, m, ss, first)
		}
	}
	b, done, err := n.localBackend()
	if err != nil {
		return err
	}
	defer done()
	return m.stream(implOf(b, m.service), &replayStream{ServerStream: ss, first: first})
}

// requestPartition reads a request's topic and partition fields.
func requestPartition(m proto.Message) (string, int32, bool) {
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	tf, pf := fields.ByName("topic"), fields.ByName("partition")
	if tf == nil || pf == nil || tf.Kind() != protoreflect.StringKind || pf.Kind() != protoreflect.Int32Kind {
		return "", 0, false
	}
	return r.Get(tf).String(), int32(r.Get(pf).Int()), true
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
	n.part.logB, n.part.store, n.part.state = nil, nil, nil
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
