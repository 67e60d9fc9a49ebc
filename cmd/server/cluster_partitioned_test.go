package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/client/changestream"
	"github.com/sharelog/sharelog/client/router"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// startPartitioned runs a sharelog child in --cluster-mode=partitioned.
func startPartitioned(t *testing.T, natsURL, prefix, id string) *child {
	t.Helper()
	c := startMember(t, natsURL, prefix, id, "--cluster-mode", "partitioned")
	c.waitReadyz(t, "cluster: partitioned", 15*time.Second)
	return c
}

// routed is seed behind client/router: each call goes to the instance
// owning what it names (a share fetch: the owner of its partition, where
// its share session lives).
func routed(t *testing.T, seed grpc.ClientConnInterface) *router.Conn {
	rc := router.New(seed, func(addr string) (grpc.ClientConnInterface, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}, router.Options{Refresh: time.Second})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// ownership is DescribeCluster's answer as topic/partition → owner.
type ownership map[string]*sharelogv1.PartitionOwner

// waitSpread waits until DescribeCluster through c names an owner among
// live for each of n partitions, spread within one per instance.
func waitSpread(t *testing.T, c *child, n int, live []string, within time.Duration) ownership {
	t.Helper()
	deadline := time.Now().Add(within)
	var last *sharelogv1.DescribeClusterResponse
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		last, err = sharelogv1.NewLogServiceClient(c.conn).DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
		cancel()
		if err == nil && len(last.GetPartitions()) == n {
			count := map[string]int{}
			out := ownership{}
			for _, p := range last.GetPartitions() {
				count[p.GetOwnerId()]++
				out[fmt.Sprintf("%s/%d", p.GetTopic(), p.GetPartition())] = p
			}
			ok := len(count) == len(live)
			for _, id := range live {
				ok = ok && count[id] >= n/len(live) && count[id] <= (n+len(live)-1)/len(live)
			}
			if ok {
				return out
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%d partitions not spread over %v within %v: %v %v", n, live, within, last, err)
	return nil
}

// SIGKILL of the owner of a partition, also the share group's coordinator,
// under produce and purge load through another instance (which forwards)
// and share-ack load on the partition's owner (client/router): only
// the killed instance's partitions move, the group moves, the load resumes, every acknowledged offset is ACCEPTed exactly
// once and the history of the partition is linearizable.
func TestPartitionedKillOwner(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	members := map[string]*child{}
	for _, id := range []string{"a", "b", "c"} {
		members[id] = startPartitioned(t, js.URL(), prefix, id)
	}
	ctx := context.Background()
	admin := sharelogv1.NewLogServiceClient(members["a"].conn)
	require.Eventually(t, func() bool {
		_, err := admin.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "spread", Partitions: 5})
		return err == nil || status.Code(err) == codes.AlreadyExists
	}, 10*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool {
		_, err := admin.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
		return err == nil || status.Code(err) == codes.AlreadyExists
	}, 10*time.Second, 100*time.Millisecond)
	before := waitSpread(t, members["a"], 6, []string{"a", "b", "c"}, 15*time.Second)

	// The workload goes through an instance that does not own orders/0;
	// the victim, its owner, also coordinates the share group (the first
	// call for a new group is taken by the instance it reaches).
	victim := before["orders/0"].GetOwnerId()
	via := "a"
	if victim == "a" {
		via = "b"
	}
	newWorkload(t, members[victim], "orders").setup(t)
	var groupBefore *sharelogv1.GroupCoordinator
	require.Eventually(t, func() bool {
		groupBefore = coordinatorOf(t, members[via], "g")
		return groupBefore.GetCoordinatorId() == victim
	}, 5*time.Second, 50*time.Millisecond, "the group's coordinator is the victim: %v", groupBefore)
	w := newWorkload(t, members[via], "orders")
	w.sg = sharelogv1.NewShareGroupServiceClient(routed(t, members[via].conn)) // share sessions live on the partition's owner
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			close(stop)
			wg.Wait()
		}
		if t.Failed() {
			t.Logf("last log lines of %s:\n%s", via, strings.Join(members[via].logs.Tail(40), "\n"))
		}
	})
	w.runProducers(ctx, stop, 3, &wg)
	w.runPurger(ctx, stop, 6, &wg)
	wg.Go(func() { w.consume(ctx, "m1", stop) })
	// And one group over the five spread partitions, its share sessions
	// on their owners (client/shareconsumer), through another instance.
	sw := newSpreadWorkload(t, members[via].conn, "spread", "gs")
	sw.setup(t, members[via].conn)
	sw.runProducer(ctx, stop, &wg)
	sw.runConsumer(ctx, members[via].conn, stop, 40*time.Second, &wg) // past a 30 s record lock of a lost acknowledgement
	time.Sleep(1500 * time.Millisecond)

	members[victim].kill(t)
	var live []string
	for _, id := range []string{"a", "b", "c"} {
		if id != victim {
			live = append(live, id)
		}
	}
	after := waitSpread(t, members[via], 6, live, leaseTTL+5*time.Second)
	for k, o := range before {
		if o.GetOwnerId() != victim {
			require.Equal(t, o.GetOwnerId(), after[k].GetOwnerId(), "%s moved though its owner lived", k)
			require.Equal(t, o.GetEpoch(), after[k].GetEpoch(), "%s changed term", k)
		}
	}
	require.Eventually(t, func() bool {
		g := coordinatorOf(t, members[via], "g")
		return g.GetCoordinatorId() != "" && g.GetCoordinatorId() != victim && g.GetEpoch() > groupBefore.GetEpoch()
	}, leaseTTL+5*time.Second, 50*time.Millisecond, "the share group moves to a live instance")
	time.Sleep(1500 * time.Millisecond) // load goes on after the move
	close(stop)
	stopped = true
	wg.Wait()
	w.drain(ctx, "m2", 15*time.Second)
	w.verify(t)
	sw.verify(t)

	// A new instance joins: it takes a fair share (two of six), moved to
	// it from the others; nothing else moves.
	members["d"] = startPartitioned(t, js.URL(), prefix, "d")
	joined := waitSpread(t, members[via], 6, append(live, "d"), 15*time.Second)
	moved := 0
	for k, o := range joined {
		if o.GetOwnerId() != after[k].GetOwnerId() {
			require.Equal(t, "d", o.GetOwnerId(), "%s moved to another instance than the new one", k)
			moved++
		}
	}
	require.Equal(t, 2, moved)
}

// coordinatorOf is group's coordinator as DescribeCluster through c names
// it (empty when none, or when the call fails: the instance answering it
// may be changing).
func coordinatorOf(t *testing.T, c *child, group string) *sharelogv1.GroupCoordinator {
	dc, err := sharelogv1.NewLogServiceClient(c.conn).DescribeCluster(context.Background(), &sharelogv1.DescribeClusterRequest{})
	if err != nil {
		t.Logf("describe cluster: %v", err)
	}
	for _, g := range dc.GetGroups() {
		if g.GetGroupId() == group {
			return g
		}
	}
	return &sharelogv1.GroupCoordinator{GroupId: group}
}

// offsetCounter is a change-stream handler that only follows the stream.
type offsetCounter struct {
	mu     sync.Mutex
	resets int
}

func (o *offsetCounter) OnSnapshot(context.Context, changestream.Snapshot) error { return nil }
func (o *offsetCounter) OnMutation(context.Context, changestream.Mutation) error { return nil }
func (o *offsetCounter) OnDeletion(context.Context, changestream.Deletion) error { return nil }
func (o *offsetCounter) OnReset(context.Context, changestream.Reset) error {
	o.mu.Lock()
	o.resets++
	o.mu.Unlock()
	return nil
}
func (o *offsetCounter) OnCheckpoint(context.Context, changestream.Checkpoint) error { return nil }

// A rolling restart (SIGTERM, start again under the same ID) of every
// instance under produce, share-consume (one partition, and one group over
// five partitions spread over the instances) and change-stream load, the
// client spreading its calls over every instance: every partition keeps an owner,
// zero acknowledged records are lost, every acknowledged offset is
// ACCEPTed exactly once, the history is linearizable, and the change
// stream follows the partition to its end across every owner change.
func TestPartitionedRollingRestart(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	ids := []string{"a", "b", "c"}
	members := map[string]*child{}
	for _, id := range ids {
		members[id] = startPartitioned(t, js.URL(), prefix, id)
	}
	addrs := func() resolver.State {
		var st resolver.State
		for _, id := range ids {
			st.Addresses = append(st.Addresses, resolver.Address{Addr: members[id].grpcAddr})
		}
		return st
	}
	r := manual.NewBuilderWithScheme("sharelog-rolling")
	r.InitialState(addrs())
	conn, err := grpc.NewClient(r.Scheme()+":///cluster", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })

	w := newWorkloadConn(t, conn, "orders")
	w.sg = sharelogv1.NewShareGroupServiceClient(routed(t, conn)) // share sessions live on the partition's owner
	w.setup(t)
	ctx := context.Background()
	admin := sharelogv1.NewLogServiceClient(members["a"].conn)
	require.Eventually(t, func() bool {
		_, err := admin.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "spread", Partitions: 5})
		return err == nil || status.Code(err) == codes.AlreadyExists
	}, 10*time.Second, 100*time.Millisecond)
	waitSpread(t, members["a"], 6, ids, 15*time.Second)

	cs := &offsetCounter{}
	stream, err := changestream.New(conn, changestream.Config{Topic: "orders", Partition: 0,
		Backoff: changestream.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}}, cs)
	require.NoError(t, err)
	sctx, scancel := context.WithCancel(ctx)
	streamDone := make(chan error, 1)
	go func() { streamDone <- stream.Run(sctx) }()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			close(stop)
			wg.Wait()
		}
		scancel()
	})
	w.runProducers(ctx, stop, 3, &wg)
	wg.Go(func() { w.consume(ctx, "m1", stop) })
	// And one group over the five spread partitions, its share sessions
	// on their owners (client/shareconsumer keeps one per owner).
	sw := newSpreadWorkload(t, conn, "spread", "gs")
	sw.setup(t, conn)
	sw.runProducer(ctx, stop, &wg)
	sw.runConsumer(ctx, conn, stop, 40*time.Second, &wg) // past a 30 s record lock of a lost acknowledgement
	time.Sleep(time.Second)

	for _, id := range ids {
		require.NoError(t, members[id].cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-members[id].exited:
			require.NoError(t, err, "%s: SIGTERM is a clean exit", id)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not stop on SIGTERM", id)
		}
		members[id].conn.Close()
		members[id] = startPartitioned(t, js.URL(), prefix, id)
		r.UpdateState(addrs())
		other := ids[(slices.Index(ids, id)+1)%len(ids)]
		waitSpread(t, members[other], 6, ids, 15*time.Second)
		time.Sleep(500 * time.Millisecond) // load on the new placement
	}
	close(stop)
	stopped = true
	wg.Wait()
	w.drain(ctx, "m2", 15*time.Second)
	w.verify(t)
	sw.verify(t)

	// The change stream reached the end of the partition.
	w.mu.Lock()
	end := int64(0)
	for off := range w.produced {
		end = max(end, off+1)
	}
	w.mu.Unlock()
	require.Eventually(t, func() bool { return stream.Checkpoint().NextOffset >= end }, 15*time.Second, 50*time.Millisecond,
		"change stream at %d, want %d", stream.Checkpoint().NextOffset, end)
	scancel()
	require.ErrorIs(t, <-streamDone, context.Canceled)
	cs.mu.Lock()
	t.Logf("change stream resets: %d", cs.resets)
	cs.mu.Unlock()
}
