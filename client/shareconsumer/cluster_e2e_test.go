package shareconsumer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// clusterNode is one in-process sharelog instance of a partitioned cluster
// on a JetStream cluster (as internal/app's cluster tests start them).
type clusterNode struct {
	id   string
	srv  *app.Server
	conn *grpc.ClientConn
	log  sharelogv1.LogServiceClient

	mu      sync.Mutex
	stopped bool
}

// startPartitionedCluster starts a 3-node JetStream cluster on loopback
// and one sharelog instance per id on it, in partitioned mode.
func startPartitionedCluster(t *testing.T, ids ...string) []*clusterNode {
	t.Helper()
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	var nodes []*clusterNode
	for _, id := range ids {
		cfg := testsupport.ClusterConfig(t, js.URL(), prefix, id, func(c *app.Config) { c.Cluster.Mode = app.ModePartitioned })
		srv, err := app.Start(context.Background(), cfg, nil, testsupport.ClusterOptions())
		require.NoError(t, err)
		n := &clusterNode{id: id, srv: srv}
		n.conn = dial(t, srv.GRPCAddr())
		n.log = sharelogv1.NewLogServiceClient(n.conn)
		t.Cleanup(func() { n.stop(t) })
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.waitReadyz(t, "cluster: partitioned")
	}
	return nodes
}

// stop closes the instance (gracefully: its partitions move to the others).
func (n *clusterNode) stop(t *testing.T) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.stopped {
		n.stopped = true
		require.NoError(t, n.srv.Close())
	}
}

func (n *clusterNode) waitReadyz(t *testing.T, want string) {
	t.Helper()
	testsupport.WaitReadyz(t, n.srv.HTTPAddr(), want, 15*time.Second)
}

// metric returns the lines of the instance's /metrics for one family.
func (n *clusterNode) metric(t *testing.T, name string) []string {
	t.Helper()
	resp, err := http.Get("http://" + n.srv.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			out = append(out, l)
		}
	}
	return out
}

// requireOneSession checks that each instance holds one share session of
// group g (its sharelog_share_sessions gauge).
func requireOneSession(t *testing.T, nodes ...*clusterNode) {
	t.Helper()
	for _, n := range nodes {
		lines := n.metric(t, "sharelog_share_sessions")
		require.Len(t, lines, 1, "%s: %q", n.id, lines)
		require.Contains(t, lines[0], `group="g"`)
		require.True(t, strings.HasSuffix(lines[0], " 1"), "%s: %q", n.id, lines[0])
	}
}

// waitSpread waits until DescribeCluster (through n) gives the topic's
// partitions one owner each, spread evenly over ids, and returns
// partition → owner ID.
func waitSpread(t *testing.T, n *clusterNode, partitions int, ids ...string) map[int32]string {
	t.Helper()
	var last *sharelogv1.DescribeClusterResponse
	var out map[int32]string
	require.Eventually(t, func() bool {
		var err error
		last, err = n.log.DescribeCluster(context.Background(), &sharelogv1.DescribeClusterRequest{})
		if err != nil || len(last.GetPartitions()) != partitions {
			return false
		}
		out = map[int32]string{}
		count := map[string]int{}
		for _, p := range last.GetPartitions() {
			out[p.GetPartition()] = p.GetOwnerId()
			count[p.GetOwnerId()]++
		}
		for _, id := range ids {
			if count[id] != partitions/len(ids) {
				return false
			}
		}
		return len(count) == len(ids)
	}, 20*time.Second, 50*time.Millisecond, "partitions not spread over %v: %v", ids, last)
	return out
}

// produceTo appends n records to partition p through node, retrying while
// ownership settles.
func produceTo(t *testing.T, node *clusterNode, topic string, p int32, first, n int) {
	t.Helper()
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: proto.Int32(p)}
	for i := first; i < first+n; i++ {
		req.Records = append(req.Records, &sharelogv1.Record{Value: fmt.Appendf(nil, "p%d-%d", p, i)})
	}
	var err error
	require.Eventually(t, func() bool {
		_, err = node.log.Produce(context.Background(), req)
		return err == nil
	}, 15*time.Second, 20*time.Millisecond, "produce to %s-%d: %v", topic, p, err)
}

// fetchWatch is a Config.Dial that counts, per address, the ShareFetch
// responses, the partitions they answer NOT_LEADER_OR_FOLLOWER, and the
// share-session requests that failed (a session replaced by another of
// the same member on the same instance fails with an epoch mismatch).
type fetchWatch struct {
	mu        sync.Mutex
	fetches   map[string]int
	notLeader int
	failed    []error
}

func (w *fetchWatch) dial(addr string) (grpc.ClientConnInterface, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		testsupport.FastReconnect(),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err != nil {
				w.mu.Lock()
				w.failed = append(w.failed, fmt.Errorf("%s to %s: %w", method, addr, err))
				w.mu.Unlock()
			}
			if r, ok := reply.(*sharelogv1.ShareFetchResponse); ok && err == nil {
				w.mu.Lock()
				w.fetches[addr]++
				for _, tr := range r.GetResponses() {
					for _, pr := range tr.GetPartitions() {
						if pr.GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER {
							w.notLeader++
						}
					}
				}
				w.mu.Unlock()
			}
			return err
		}))
}

func (w *fetchWatch) snapshot() (map[string]int, int, []error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.fetches {
		out[k] = v
	}
	return out, w.notLeader, append([]error(nil), w.failed...)
}

// A consumer connected to one instance of a partitioned cluster, with
// Config.Dial, consumes every partition from its owner, one session per
// owner; when an instance leaves and its partitions move under
// consumption, it follows them: nothing accepted is delivered again, and
// every record is accepted exactly once.
func TestPartitionedClusterOneSessionPerOwner(t *testing.T) {
	nodes := startPartitionedCluster(t, "a", "b", "c")
	a, c := nodes[0], nodes[2]
	const partitions, perPartition = 6, 100
	require.Eventually(t, func() bool {
		_, err := a.log.CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: "t", Partitions: partitions})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	owners := waitSpread(t, a, partitions, "a", "b", "c")
	groups := sharelogv1.NewShareGroupServiceClient(a.conn)
	require.Eventually(t, func() bool { // the coordinator may still be taking its lease
		_, err := groups.UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{
			GroupId: "g",
			Config: &sharelogv1.ShareGroupConfig{
				AutoOffsetReset:     proto.String("earliest"),
				SessionTimeoutMs:    proto.Int32(3000),
				HeartbeatIntervalMs: proto.Int32(200),
			},
		})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	want := map[TopicPartition]int{}
	for p := range int32(partitions) {
		produceTo(t, nodes[int(p)%3], "t", p, 0, perPartition)
		want[TopicPartition{Topic: "t", Partition: p}] = perPartition
	}
	total := partitions * perPartition

	w := &fetchWatch{fetches: map[string]int{}}
	acks := newAckLog()
	cons := newConsumer(t, a.conn, Config{GroupID: "g", Topics: []string{"t"}, Dial: w.dial, MaxRecords: 12, OnAcknowledgement: acks.hook})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	// poll polls (accepting implicitly) until cond, failing on a record
	// delivered again after its acceptance succeeded.
	delivered := 0
	served := map[int32]bool{}
	poll := func(cond func() bool) {
		t.Helper()
		for !cond() {
			recs, err := cons.Poll(ctx)
			require.NoError(t, err)
			acks.mu.Lock()
			for _, r := range recs {
				k := recordKey{tp: r.TopicPartition(), offset: r.Offset}
				require.Zero(t, acks.accepted[k], "%v delivered again after its ACCEPT succeeded", k)
				served[r.Partition] = true
			}
			acks.mu.Unlock()
			delivered += len(recs)
		}
	}

	// Warm-up: every partition served. An owner named by DescribeCluster
	// may still be adopting its partitions' share state for a moment, and
	// answers NOT_LEADER_OR_FOLLOWER ("none is known to own it at the
	// moment") meanwhile; the consumer asks again.
	poll(func() bool { return len(served) == partitions })
	_, warmNotLeader, warmFailed := w.snapshot()
	// Then half the records: from the three owners, none asked for a
	// partition it does not own, every session kept (no request failed).
	poll(func() bool { return acks.acceptedCount() >= total/2 })
	fetches, notLeader, failed := w.snapshot()
	require.Equal(t, warmNotLeader, notLeader, "NOT_LEADER_OR_FOLLOWER answers with a stable ownership")
	require.Equal(t, warmFailed, failed, "share-session requests failed with a stable ownership")
	require.Len(t, fetches, 3, "ShareFetch calls by address: %v", fetches)
	for addr, n := range fetches {
		require.Positive(t, n, addr)
	}
	require.Len(t, cons.sessions, 3)
	requireOneSession(t, nodes...)

	// c leaves under consumption (Polls go on while it closes, and the
	// consumer holds records of the last Poll, accepted by the next): its
	// partitions move to a and b.
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		c.stop(t)
	}()
	poll(func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	})
	moved := 0
	for _, o := range owners {
		if o == "c" {
			moved++
		}
	}
	require.Equal(t, 2, moved)
	waitSpread(t, a, partitions, "a", "b")
	// More records on every partition, the moved ones included.
	for p := range int32(partitions) {
		produceTo(t, a, "t", p, perPartition, 10)
		want[TopicPartition{Topic: "t", Partition: p}] += 10
		total += 10
	}
	poll(func() bool { return acks.acceptedCount() >= total })
	_, err := cons.Commit(ctx)
	require.NoError(t, err)
	acks.requireAllAcceptedOnce(t, want)
	require.Len(t, cons.sessions, 2, "sessions on a and b only")
	requireOneSession(t, nodes[:2]...)
	require.NotContains(t, cons.sessions, c.srv.GRPCAddr())
	t.Logf("%d deliveries for %d records; failed acknowledgements: %d", delivered, total, len(acks.failed))
	require.NoError(t, cons.Close(ctx))
}
