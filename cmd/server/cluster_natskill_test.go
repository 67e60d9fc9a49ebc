package main

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/cluster"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
)

// defaultLeaseTTL is --lease-ttl's default.
var defaultLeaseTTL = app.DefaultClusterConfig().LeaseTTL

// streamLeaderOf is the NATS server leading the stream.
func streamLeaderOf(t *testing.T, np *natsProcs, stream string) string {
	t.Helper()
	nc, err := nats.Connect(np.url())
	require.NoError(t, err)
	defer nc.Close()
	js, err := njs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	return info.Cluster.Leader
}

// leaseEpoch is sharelog_cluster_lease_epoch of c's /metrics.
func leaseEpoch(t *testing.T, c *child) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^sharelog_cluster_lease_epoch (\d+)$`).FindStringSubmatch(fetchMetrics(t, c.httpAddr))
	require.Len(t, m, 2)
	return m[1]
}

// TestClusterKillNATSLeaders: SIGKILL of the NATS node leading the lease
// bucket, the share bucket or the partition's stream (each in a NATS
// cluster of its own), with the default --lease-ttl, is no sharelog
// failover (docs/cluster.md "Lease TTL and NATS elections"): the active
// instance keeps its lease (the same term) while NATS elects the new
// leader, the standby never takes over, every produce through the standby
// answers within --nats-write-timeout + 1 s — acknowledged, or a retryable
// error while /readyz names the partition — and produces are acknowledged
// again after the election.
func TestClusterKillNATSLeaders(t *testing.T) {
	for _, tc := range []struct{ name, stream string }{
		{"lease bucket", "KV_" + cluster.LeaseBucket("LL")},
		{"share bucket", "KV_" + sljs.ShareBucket("LL")},
		{"partition stream", ""}, // the partition's, found after the create
	} {
		t.Run(tc.name, func(t *testing.T) { killNATSLeader(t, tc.stream) })
	}
}

func killNATSLeader(t *testing.T, stream string) {
	np := startNATSProcs(t)
	prefix := "LL"
	// The default lease TTL (startMember sets the tests' short one).
	a := startMember(t, np.url(), prefix, "a", "--lease-ttl", defaultLeaseTTL.String())
	a.waitReadyz(t, "cluster: active", 30*time.Second)
	b := startMember(t, np.url(), prefix, "b", "--lease-ttl", defaultLeaseTTL.String())
	b.waitReadyz(t, "forwarding to a", 20*time.Second)
	epoch := leaseEpoch(t, a)
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []*child{a, b} {
				t.Logf("last log lines of %s:\n%s", c.grpcAddr, strings.Join(c.logs.Tail(60), "\n"))
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := sharelogv1.NewLogServiceClient(b.conn)
	_, err := logs.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "t", Partitions: 1})
	require.NoError(t, err)

	var leader string
	if stream == "" {
		_, err = logs.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Records: []*sharelogv1.Record{{Value: []byte("v")}}})
		require.NoError(t, err)
		leader = streamLeader(t, np, prefix)
	} else {
		leader = streamLeaderOf(t, np, stream)
	}
	t.Logf("killing NATS node %s, leader of %s", leader, cmp.Or(stream, "the partition stream"))
	np.kill(t, leader)
	killed := time.Now()
	var longest, slowest, lastFailure time.Duration
	failed, named := false, false
	for time.Since(killed) < defaultLeaseTTL+5*time.Second {
		start := time.Now()
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := logs.Produce(pctx, &sharelogv1.ProduceRequest{Topic: "t", Records: []*sharelogv1.Record{{Value: []byte("v")}}})
		pcancel()
		took := time.Since(start)
		slowest = max(slowest, took)
		if err == nil {
			longest = max(longest, took)
		} else {
			failed = true
			lastFailure = time.Since(killed)
			t.Logf("%v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
			require.Equal(t, codes.Unavailable, status.Code(err), "a failed produce is retryable: %v", err)
			if !named {
				// While it lasts, /readyz names the partition.
				named = strings.Contains(readyzBody(t, a), "not writable") && strings.Contains(readyzBody(t, a), "t-0")
			}
		}
		// Fail fast, never hang: within --nats-write-timeout (2 s) + 1 s.
		require.Less(t, took, 3*time.Second, "a produce %v after the kill took %v", time.Since(killed), took)
		require.NotContains(t, strings.Join(b.logs.Tail(200), "\n"), `"msg":"active: serving"`, "the standby took over")
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, epoch, leaseEpoch(t, a), "the active kept its lease through the bucket's election")
	if failed {
		require.True(t, named, "/readyz named the partition whose appends failed")
	}
	require.Equal(t, "0", leaseEpoch(t, b))
	require.Less(t, lastFailure, defaultLeaseTTL, "produces are acknowledged again after the election")
	t.Logf("longest acknowledged produce after the kill: %v; slowest answer %v; last failure %v after the kill", longest, slowest, lastFailure)
}

// readyzBody is c's /readyz answer.
func readyzBody(t *testing.T, c *child) string {
	t.Helper()
	resp, err := http.Get("http://" + c.httpAddr + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
