package main

import (
	"context"
	"fmt"
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
