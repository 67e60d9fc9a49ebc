package main

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// waitTopicsSpread waits until DescribeCluster through c names an owner
// among live for every partition of every topic, each topic spread within
// one partition per instance (docs/cluster.md "Placement"), and returns
// how many partitions of each topic each instance owns.
func waitTopicsSpread(t *testing.T, c *child, topics map[string]int32, live []string, within time.Duration) map[string]map[string]int {
	t.Helper()
	want := 0
	for _, n := range topics {
		want += int(n)
	}
	deadline := time.Now().Add(within)
	var last map[string]map[string]int
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		res, err := sharelogv1.NewLogServiceClient(c.conn).DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
		cancel()
		if err == nil {
			last = map[string]map[string]int{}
			seen := 0
			for _, p := range res.GetPartitions() {
				if _, ok := topics[p.GetTopic()]; !ok || p.GetOwnerId() == "" {
					continue
				}
				if last[p.GetTopic()] == nil {
					last[p.GetTopic()] = map[string]int{}
				}
				last[p.GetTopic()][p.GetOwnerId()]++
				seen++
			}
			ok := seen == want
			for topic, n := range topics {
				for _, id := range live {
					got := last[topic][id]
					ok = ok && got >= int(n)/len(live) && got <= (int(n)+len(live)-1)/len(live)
				}
				ok = ok && len(last[topic]) <= len(live)
			}
			if ok {
				return last
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("topics %v not spread per topic over %v within %v: %v", topics, live, within, last)
	return nil
}

// TestPartitionedJoinFairPerTopic: a joining instance takes its share of
// every topic — a third of the busy topic's 12 partitions and one of the
// small topic's 3 — not just a third of all 15 partitions from wherever
// (docs/cluster.md "Placement").
func TestPartitionedJoinFairPerTopic(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startPartitioned(t, js.URL(), prefix, "a")
	startPartitioned(t, js.URL(), prefix, "b")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topics := map[string]int32{"busy": 12, "small": 3}
	for name, n := range topics {
		_, err := sharelogv1.NewLogServiceClient(a.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: name, Partitions: n})
		require.NoError(t, err)
	}
	two := waitTopicsSpread(t, a, topics, []string{"a", "b"}, 20*time.Second)
	startPartitioned(t, js.URL(), prefix, "c")
	three := waitTopicsSpread(t, a, topics, []string{"a", "b", "c"}, 20*time.Second)
	require.Equal(t, 4, three["busy"]["c"], "the joiner's third of the busy topic: %v (before: %v)", three, two)
	require.Equal(t, 1, three["small"]["c"], "and one of the small topic's: %v", three)
	total := map[string]int{}
	for _, owners := range three {
		for id, n := range owners {
			total[id] += n
		}
	}
	require.Equal(t, map[string]int{"a": 5, "b": 5, "c": 5}, total, fmt.Sprint(three))
}

// TestPartitionedSIGTERMHandsOverAtOnce: SIGTERM of a partitioned
// instance with a change stream tailing and a long poll waiting on its
// partitions: the others own every one of its partitions within 1 s,
// not after its drain (--shutdown-timeout) or the lease TTL
// (docs/cluster.md "Stopping").
func TestPartitionedSIGTERMHandsOverAtOnce(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startPartitioned(t, js.URL(), prefix, "a")
	startPartitioned(t, js.URL(), prefix, "b")
	c := startPartitioned(t, js.URL(), prefix, "c")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := sharelogv1.NewLogServiceClient(a.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "t", Partitions: 6})
	require.NoError(t, err)
	owners := waitSpread(t, a, 6, []string{"a", "b", "c"}, 20*time.Second)
	var mine []int32
	for _, p := range owners {
		if p.GetOwnerId() == "c" {
			mine = append(mine, p.GetPartition())
		}
	}
	require.NotEmpty(t, mine)
	// A tail and a long poll on c's partitions, served by c.
	require.Eventually(t, func() bool {
		_, err = sharelogv1.NewLogServiceClient(a.conn).Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &mine[0],
			Records: []*sharelogv1.Record{{Value: []byte("v")}}})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "a produce to c's partition: %v", err)
	st, err := sharelogv1.NewChangeStreamServiceClient(c.conn).StreamChanges(ctx, &sharelogv1.StreamChangesRequest{Topic: "t", Partition: mine[0]})
	require.NoError(t, err)
	_, err = st.Recv()
	require.NoError(t, err, "the stream is open")
	go func() {
		_, _ = sharelogv1.NewLogServiceClient(c.conn).Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Partition: mine[len(mine)-1], MaxWaitMs: 60000})
	}()
	time.Sleep(200 * time.Millisecond)

	start := time.Now()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	waitSpread(t, a, 6, []string{"a", "b"}, 10*time.Second)
	took := time.Since(start)
	t.Logf("a and b own c's %d partitions %v after its SIGTERM", len(mine), took)
	require.LessOrEqual(t, took, time.Second, "the hand-over after SIGTERM")
}
