package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// An operator can see the cluster in /metrics (docs/cluster.md
// "Metrics"): each instance's role (1 for the current one), the active's
// lease epoch, its NATS connection and round trip, and the calls a
// standby forwarded by outcome — every series there from the start, and
// no otel_scope_* labels on any series.
func TestClusterMetrics(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startMember(t, js.URL(), prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startMember(t, js.URL(), prefix, "b")
	b.waitReadyz(t, "forwarding to a", 10*time.Second)

	am, bm := fetchMetrics(t, a.httpAddr), fetchMetrics(t, b.httpAddr)
	for _, m := range []string{am, bm} {
		assert.NotContains(t, m, "otel_scope_", "no instrumentation-scope labels")
		assert.Regexp(t, `(?m)^sharelog_nats_connected 1$`, m)
		assert.Regexp(t, `(?m)^sharelog_nats_reconnects_total 0$`, m)
		assert.Regexp(t, `(?m)^sharelog_cluster_forwarded_calls_total\{method="",outcome="outcome_unknown"\} 0$`, m, "registered at 0")
		assert.Regexp(t, `(?m)^sharelog_cluster_partitions_unwritable 0$`, m)
	}
	assert.Regexp(t, `(?m)^sharelog_cluster_role\{role="active"\} 1$`, am)
	assert.Regexp(t, `(?m)^sharelog_cluster_role\{role="standby"\} 0$`, am)
	assert.Regexp(t, `(?m)^sharelog_cluster_lease_epoch [1-9][0-9]*$`, am)
	assert.Regexp(t, `(?m)^sharelog_cluster_role\{role="standby"\} 1$`, bm)
	assert.Regexp(t, `(?m)^sharelog_cluster_lease_epoch 0$`, bm)
	assert.Regexp(t, `(?m)^sharelog_cluster_owned_items\{kind="partition"\} 0$`, bm, "active-standby owns no items")

	// A create and a produce through the standby are forwarded, and counted.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs := sharelogv1.NewLogServiceClient(b.conn)
	_, err := logs.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "m", Partitions: 1})
	require.NoError(t, err)
	_, err = logs.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "m", Records: []*sharelogv1.Record{{Value: []byte("v")}}})
	require.NoError(t, err)
	bm = fetchMetrics(t, b.httpAddr)
	assert.Regexp(t, `(?m)^sharelog_cluster_forwarded_calls_total\{method="Produce",outcome="ok"\} 1$`, bm)
	rtt := regexp.MustCompile(`(?m)^sharelog_nats_rtt_seconds ([0-9.e-]+)$`).FindStringSubmatch(bm)
	require.Len(t, rtt, 2, "sharelog_nats_rtt_seconds in %s", bm)
	assert.NotEqual(t, "0", rtt[1], "a round trip was measured")
}
