package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// startPartitioned runs a sharelog child in --cluster-mode=partitioned.
func startPartitioned(t *testing.T, natsURL, prefix, id string) *child {
	t.Helper()
	c := startMember(t, natsURL, prefix, id, "--cluster-mode", "partitioned")
	c.waitReadyz(t, "cluster: partitioned", 15*time.Second)
	return c
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

// SIGKILL of the owner of a partition under produce, purge and share-ack
// load through another instance: only the killed instance's partitions
// move, the load resumes, every acknowledged offset is ACCEPTed exactly
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
	w0 := newWorkload(t, members["a"], "orders")
	w0.setup(t)
	before := waitSpread(t, members["a"], 6, []string{"a", "b", "c"}, 15*time.Second)

	// The workload goes through an instance that does not own orders/0.
	victim := before["orders/0"].GetOwnerId()
	via := "a"
	if victim == "a" {
		via = "b"
	}
	w := newWorkload(t, members[via], "orders")
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
	time.Sleep(1500 * time.Millisecond) // load goes on after the move
	close(stop)
	stopped = true
	wg.Wait()
	w.drain(ctx, "m2", 15*time.Second)
	w.verify(t)
}
