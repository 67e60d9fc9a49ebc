package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/client/router"
	"github.com/sharelog/sharelog/client/shareconsumer"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
)

// startPartitionedTrio starts instances a, b and c in partitioned mode on a
// new JetStream cluster, creates topic t with 3 partitions and waits until
// they are spread one per instance.
func startPartitionedTrio(t *testing.T, mutate ...func(*app.Config)) []*clusterInstance {
	t.Helper()
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	return startTrioOn(t, js, js.Prefix(), mutate...)
}

// startTrioOn is startPartitionedTrio on js, its buckets named by prefix.
func startTrioOn(t *testing.T, js *jstest.Cluster, prefix string, mutate ...func(*app.Config)) []*clusterInstance {
	t.Helper()
	var err error
	mutate = append([]func(*app.Config){partitionedMode}, mutate...)
	ins := []*clusterInstance{
		startClusterInstance(t, js, prefix, "a", mutate...),
		startClusterInstance(t, js, prefix, "b", mutate...),
		startClusterInstance(t, js, prefix, "c", mutate...),
	}
	for _, in := range ins {
		in.waitReadyz(t, "cluster: partitioned", 10*time.Second)
	}
	require.Eventually(t, func() bool {
		_, err = ins[0].log.CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: "t", Partitions: 3})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "create: %v", err)
	waitOwners(t, ins[1], 3, []string{"a", "b", "c"})
	return ins
}

// startPartitionedSolo starts instance a in partitioned mode on a new
// JetStream cluster (returned with its prefix, for more instances) and
// creates topic t with the given number of partitions.
func startPartitionedSolo(t *testing.T, partitions int32) (*jstest.Cluster, string, *clusterInstance) {
	t.Helper()
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a", partitionedMode)
	a.waitReadyz(t, "cluster: partitioned", 10*time.Second)
	require.Eventually(t, func() bool {
		_, err = a.log.CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: "t", Partitions: partitions})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "create: %v", err)
	return js, prefix, a
}

// scrapeInstance fetches and parses an instance's /metrics.
func scrapeInstance(t *testing.T, in *clusterInstance) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeURL(t, http.DefaultClient, "http://"+in.srv.HTTPAddr()+"/metrics")
}

// dialInsecure is the share consumers' way to the partitions' owners.
func dialInsecure(addr string) (grpc.ClientConnInterface, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// waitCoordinators is group → coordinator as DescribeCluster answers, once
// every group of want has a coordinator among ids, spread evenly over them.
func waitCoordinators(t *testing.T, in *clusterInstance, groups []string, ids []string) map[string]*sharelogv1.GroupCoordinator {
	t.Helper()
	var last *sharelogv1.DescribeClusterResponse
	var lastErr error
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		last, lastErr = in.log.DescribeCluster(context.Background(), &sharelogv1.DescribeClusterRequest{})
		out := map[string]*sharelogv1.GroupCoordinator{}
		count := map[string]int{}
		for _, g := range last.GetGroups() {
			if g.GetCoordinatorId() != "" {
				out[g.GetGroupId()] = g
				count[g.GetCoordinatorId()]++
			}
		}
		ok := lastErr == nil && len(out) == len(groups) && len(count) == len(ids)
		for _, id := range ids {
			c := count[id]
			ok = ok && c >= len(groups)/len(ids) && c <= (len(groups)+len(ids)-1)/len(ids)
		}
		if ok {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("groups not spread over %v within 20s: %v %v", ids, last, lastErr)
	return nil
}

// consumeAll polls group through in until want records were delivered (or
// 20 s passed) and returns partition/offset → deliveries; every delivery
// is accepted.
func consumeAll(t *testing.T, in *clusterInstance, group string, want int) map[string]int {
	t.Helper()
	ctx := context.Background()
	sc, err := shareconsumer.New(in.conn, shareconsumer.Config{GroupID: group, Topics: []string{"t"}, MaxWait: 100 * time.Millisecond, Dial: dialInsecure})
	require.NoError(t, err)
	seen := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	total := 0
	for total < want && time.Now().Before(deadline) {
		recs, err := sc.Poll(ctx)
		if err != nil {
			t.Logf("poll %s through %s: %v", group, in.id, err)
			continue
		}
		for _, r := range recs {
			seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++
			total++
		}
	}
	require.NoError(t, sc.Close(ctx))
	return seen
}

// Share groups are spread over the instances: each has a coordinator,
// balanced within one group per instance; every instance serves every
// group's calls (forwarding them); when an instance leaves only its groups
// move, and what they acknowledged stays acknowledged.
func TestPartitionedShareGroupsSpread(t *testing.T) {
	// A 3 s lease: under -race on two shared cores a 1 s lease is now and
	// then not renewed in time, and the group it covers moves, which this
	// test would take for the placement's doing. Nothing here waits for
	// an expiry: c leaves cleanly.
	ins := startPartitionedTrio(t, func(c *app.Config) { c.Cluster.LeaseTTL = 3 * time.Second })
	ctx := context.Background()
	for p := range int32(3) {
		for i := range 5 {
			produceRetry(t, ins[i%3], "t", p, fmt.Sprintf("%d-%d", p, i))
		}
	}

	// Six groups, each made through one instance (all through a for the
	// first three): the placement spreads them two per instance.
	groups := []string{"g0", "g1", "g2", "g3", "g4", "g5"}
	earliest := "earliest"
	var err error
	for i, g := range groups {
		in := ins[max(0, i-3)]
		require.Eventually(t, func() bool {
			_, err = sharelogv1.NewShareGroupServiceClient(in.conn).UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{
				GroupId: g, Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: &earliest}})
			return err == nil
		}, 10*time.Second, 50*time.Millisecond, "update config of %s: %v", g, err)
	}
	before := waitCoordinators(t, ins[2], groups, []string{"a", "b", "c"})
	// A call about a group that does not exist answers as on one server,
	// and makes no coordinator for it.
	_, err = sharelogv1.NewShareGroupServiceClient(ins[0].conn).DescribeShareGroup(ctx, &sharelogv1.DescribeShareGroupRequest{GroupId: "nope"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	dc, err := ins[1].log.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
	require.NoError(t, err)
	for _, g := range dc.GetGroups() {
		require.NotEqual(t, "nope", g.GetGroupId())
	}
	for _, in := range ins {
		// /readyz counts what the instance holds, the view may be a
		// moment ahead. The report names the last answer (a message
		// given to require.Eventually would be evaluated before it ran).
		var code int
		var body string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			code, body = in.readyz(t)
			if code == 200 && strings.Contains(body, "coordinating 2 share groups") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz answered %d %q, want 200 and 2 share groups", in.id, code, body)
			}
		}
	}
	terms := func(m map[string]*sharelogv1.GroupCoordinator) map[string]string {
		out := map[string]string{}
		for g, c := range m {
			out[g] = fmt.Sprintf("%s@%d", c.GetCoordinatorId(), c.GetEpoch())
		}
		return out
	}
	require.Equal(t, terms(before), terms(waitCoordinators(t, ins[2], groups, []string{"a", "b", "c"})), "no group moved meanwhile")

	// Every group consumed through an instance that does not coordinate
	// it: each record once, with delivery count 1.
	through := func(g string, coordinator string) *clusterInstance {
		for _, in := range ins {
			if in.id != coordinator && in.id != "c" {
				return in
			}
		}
		return ins[0]
	}
	for _, g := range groups {
		seen := consumeAll(t, through(g, before[g].GetCoordinatorId()), g, 15)
		require.Len(t, seen, 15, g)
		for k, n := range seen {
			require.Equal(t, 1, n, "group %s: record %s delivered %d times", g, k, n)
		}
	}
	// Each instance's /metrics has the share-partitions of the partitions
	// it owns, of every group, and only those.
	owners := waitOwners(t, ins[0], 3, []string{"a", "b", "c"})
	for _, in := range ins {
		fams := scrapeInstance(t, in)
		for _, g := range groups {
			for p := range int32(3) {
				labels := map[string]string{"group": g, "topic": "t", "partition": fmt.Sprint(p), "type": "accept"}
				v, ok := series(t, fams, "sharelog_share_acknowledgements_total", labels)
				if owners[p].GetOwnerId() == in.id {
					require.True(t, ok, "%s's metrics lack group %s's partition %d", in.id, g, p)
					require.Equal(t, 5.0, v, "%s/%d accepted", g, p)
				} else {
					require.False(t, ok, "%s reports group %s's partition %d, owned by %s", in.id, g, p, owners[p].GetOwnerId())
				}
			}
		}
	}
	list, err := sharelogv1.NewShareGroupServiceClient(ins[1].conn).ListShareGroups(ctx, &sharelogv1.ListShareGroupsRequest{})
	require.NoError(t, err)
	var listed []string
	for _, l := range list.GetGroups() {
		listed = append(listed, l.GetGroupId())
	}
	require.Equal(t, groups, listed, "every instance's groups")

	// client/router sends a group's calls straight to its coordinator.
	addr := map[string]string{}
	for _, in := range ins {
		addr[in.id] = in.srv.GRPCAddr()
	}
	d := &countingDialer{calls: map[string]int{}}
	rc := router.New(ins[0].conn, d.dial(t), router.Options{})
	t.Cleanup(func() { _ = rc.Close() })
	for _, g := range groups {
		coord := addr[before[g].GetCoordinatorId()]
		n := d.count(coord)
		_, err := sharelogv1.NewShareGroupServiceClient(rc).DescribeShareGroup(ctx, &sharelogv1.DescribeShareGroupRequest{GroupId: g})
		require.NoError(t, err)
		require.Equal(t, n+1, d.count(coord), "group %s's call went to its coordinator %s", g, before[g].GetCoordinatorId())
	}

	// c leaves: only its groups move; nothing acknowledged is delivered
	// again, and new records are delivered once.
	require.NoError(t, ins[2].srv.Close())
	ins = ins[:2]
	after := waitCoordinators(t, ins[0], groups, []string{"a", "b"})
	for g, o := range before {
		if o.GetCoordinatorId() != "c" {
			require.Equal(t, o.GetCoordinatorId(), after[g].GetCoordinatorId(), "group %s moved though its coordinator lived", g)
			require.Equal(t, o.GetEpoch(), after[g].GetEpoch(), "group %s changed term", g)
		} else {
			require.Greater(t, after[g].GetEpoch(), o.GetEpoch())
		}
	}
	for p := range int32(3) {
		produceRetry(t, ins[0], "t", p, fmt.Sprintf("%d-after", p))
	}
	for _, g := range groups {
		seen := consumeAll(t, ins[1], g, 3)
		require.Equal(t, map[string]int{"0/5": 1, "1/5": 1, "2/5": 1}, seen, "group %s after c left", g)
	}
}

// A partition's handover does not wait for its long polls: a fetch
// waiting on the partition that moves returns at once, the partition
// answered NOT_LEADER_OR_FOLLOWER naming its new owner; one waiting on a
// partition that stays keeps waiting. The sessions live on the instance
// that received them: the moved partition is served by its new owner.
func TestPartitionedPartitionHandoverEndsLongPolls(t *testing.T) {
	js, prefix, a := startPartitionedSolo(t, 2)
	ctx := context.Background()
	sg := sharelogv1.NewShareGroupServiceClient(a.conn)
	one := func(p int32) []*sharelogv1.ShareFetchTopic {
		return []*sharelogv1.ShareFetchTopic{{Topic: "t", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: p}}}}
	}
	waitOwners(t, a, 2, []string{"a"})
	for p := range int32(2) {
		// Until a serves the partition (its lease may be a moment ahead
		// of its share state), the session opens without it.
		var resp *sharelogv1.ShareFetchResponse
		var err error
		require.Eventually(t, func() bool {
			resp, err = sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: fmt.Sprint("m", p), ShareSessionEpoch: 0, Topics: one(p)})
			return err == nil && byPartition(resp)[p].GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NONE
		}, 10*time.Second, 50*time.Millisecond, "open a session on partition %d: %v %v", p, resp, err)
	}

	type result struct {
		resp *sharelogv1.ShareFetchResponse
		err  error
		took time.Duration
	}
	done := map[int32]chan result{}
	for p := range int32(2) {
		done[p] = make(chan result, 1)
		go func() {
			start := time.Now()
			resp, err := sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: fmt.Sprint("m", p), ShareSessionEpoch: 1,
				MaxWaitMs: 30000, MinBytes: 1})
			done[p] <- result{resp, err, time.Since(start)}
		}()
	}
	time.Sleep(300 * time.Millisecond) // both wait

	b := startClusterInstance(t, js, prefix, "b", partitionedMode)
	moved := waitOwners(t, a, 2, []string{"a", "b"})
	var gone, kept int32
	for p, o := range moved {
		if o.GetOwnerId() == "b" {
			gone = p
		} else {
			kept = p
		}
	}
	select {
	case r := <-done[gone]:
		require.NoError(t, r.err)
		pr := byPartition(r.resp)[gone]
		require.NotNil(t, pr, "%v", r.resp)
		require.Equal(t, notLeader, pr.GetErrorCode(), "%v", pr)
		require.Less(t, r.took, 10*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatalf("the fetch waiting on partition %d, which moved to b, did not return", gone)
	}
	select {
	case r := <-done[kept]:
		t.Fatalf("the fetch waiting on partition %d, which stayed, returned: %v %v", kept, r.resp, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	// Named to a again, the partition is answered with its new owner
	// (the waiting fetch returned before b had taken it, so its answer
	// may name no instance).
	resp, err := sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m-a", ShareSessionEpoch: 0, Topics: one(gone)})
	require.NoError(t, err)
	require.Equal(t, notLeader, byPartition(resp)[gone].GetErrorCode(), "%v", resp)
	require.Contains(t, byPartition(resp)[gone].GetErrorMessage(), "instance b at "+b.srv.GRPCAddr())
	// The moved partition is served by b, to a session there.
	produceRetry(t, a, "t", gone, "after")
	resp, err = sharelogv1.NewShareGroupServiceClient(b.conn).ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g",
		MemberId: "m-b", ShareSessionEpoch: 0, MaxWaitMs: 5000, MinBytes: 1, Topics: one(gone)})
	require.NoError(t, err)
	require.Len(t, byPartition(resp)[gone].GetRecords(), 1, "%v", resp)
}
