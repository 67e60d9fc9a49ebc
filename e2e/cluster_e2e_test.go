package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jslog"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsstate"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// clusterInstance is one sharelog instance in cluster mode, in-process,
// on real loopback listeners.
type clusterInstance struct {
	id   string
	srv  *app.Server
	conn *grpc.ClientConn
	log  sharelogv1.LogServiceClient
}

// testLogger is the cluster instances' logger: discarded, unless
// SHARELOG_TEST_LOG is set (then debug and up, on stderr), to read what
// the instances did when a test fails.
func testLogger() *slog.Logger {
	if os.Getenv("SHARELOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func startClusterInstance(t *testing.T, js *jstest.Cluster, prefix, id string, mutate ...func(*app.Config)) *clusterInstance {
	t.Helper()
	cfg := testsupport.ClusterConfig(t, js.URL(), prefix, id, mutate...)
	srv, err := app.Start(context.Background(), cfg, testLogger(), testsupport.ClusterOptions())
	require.NoError(t, err)
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	in := &clusterInstance{id: id, srv: srv, conn: conn, log: sharelogv1.NewLogServiceClient(conn)}
	t.Cleanup(func() {
		conn.Close()
		_ = srv.Close()
	})
	return in
}

// createTopic creates a topic through log, retrying UNAVAILABLE: it is
// retryable (a fresh NATS cluster may still be electing the leader of a
// stream the call needs), as every client is told to.
func createTopic(t *testing.T, log sharelogv1.LogServiceClient, name string, partitions int32) *sharelogv1.Topic {
	t.Helper()
	var resp *sharelogv1.Topic
	var err error
	require.Eventually(t, func() bool {
		resp, err = log.CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: name, Partitions: partitions})
		return status.Code(err) != codes.Unavailable
	}, 10*time.Second, 50*time.Millisecond, "last error: %v", err)
	require.NoError(t, err)
	return resp
}

// readyz is the instance's /readyz status and body.
func (c *clusterInstance) readyz(t *testing.T) (int, string) {
	t.Helper()
	code, body, err := testsupport.Readyz(c.srv.HTTPAddr())
	require.NoError(t, err)
	return code, body
}

// waitReadyz polls /readyz until it answers 200 with a body containing want.
func (c *clusterInstance) waitReadyz(t *testing.T, want string, within time.Duration) {
	t.Helper()
	testsupport.WaitReadyz(t, c.srv.HTTPAddr(), want, within)
}

func TestClusterStandbyForwardsAndTakesOver(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startClusterInstance(t, js, prefix, "b")
	b.waitReadyz(t, "cluster: standby, forwarding to a", 10*time.Second)

	ctx := context.Background()
	// Everything through the standby: forwarded to a.
	createTopic(t, b.log, "t", 1)
	p := int32(0)
	for i := range 3 {
		resp, err := b.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p,
			Records: []*sharelogv1.Record{{Value: fmt.Appendf(nil, "v%d", i)}}})
		require.NoError(t, err)
		require.Equal(t, int64(i), resp.GetResults()[0].GetOffset())
	}
	// REST through the standby's gateway is forwarded too.
	resp, err := http.Get("http://" + b.srv.HTTPAddr() + "/v1/topics/t")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	// A server-streaming call through the standby: the change stream of
	// the (keyless) records up to offset 3 — a snapshot marker, then the
	// end.
	end := int64(3)
	cs, err := sharelogv1.NewChangeStreamServiceClient(b.conn).StreamChanges(ctx, &sharelogv1.StreamChangesRequest{Topic: "t", EndOffset: &end})
	require.NoError(t, err)
	var events []string
	for {
		resp, err := cs.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		for _, ev := range resp.GetEvents() {
			switch {
			case ev.GetSnapshotMarker() != nil:
				events = append(events, "snapshot_marker")
			case ev.GetStreamEnd() != nil:
				events = append(events, ev.GetStreamEnd().GetReason().String())
			}
		}
	}
	require.Equal(t, []string{"snapshot_marker", "STREAM_END_REASON_OK"}, events)

	// gRPC health names the roles.
	for _, c := range []struct {
		in            *clusterInstance
		active, stdby healthpb.HealthCheckResponse_ServingStatus
	}{
		{a, healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING},
		{b, healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING},
	} {
		hc := healthpb.NewHealthClient(c.in.conn)
		for name, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
			app.HealthClusterActive: c.active, app.HealthClusterStandby: c.stdby, "": healthpb.HealthCheckResponse_SERVING} {
			require.Eventually(t, func() bool {
				r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
				return err == nil && r.GetStatus() == want
			}, 2*time.Second, 20*time.Millisecond, "%s: health %q want %v", c.in.id, name, want)
		}
	}

	// The share-group metrics come from the active instance, none from
	// the standby: a session opened through b lives on a.
	_, err = sharelogv1.NewShareGroupServiceClient(b.conn).ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m",
		Topics: []*sharelogv1.ShareFetchTopic{{Topic: "t", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}}}}})
	require.NoError(t, err)
	v, ok := series(t, scrapeInstance(t, a), "sharelog_share_sessions", map[string]string{"group": "g"})
	require.True(t, ok, "the active instance reports its share groups")
	require.Equal(t, 1.0, v)
	_, ok = series(t, scrapeInstance(t, b), "sharelog_share_sessions", map[string]string{"group": "g"})
	require.False(t, ok, "a standby has no share groups")

	// The active instance goes away (released lease): b takes over.
	start := time.Now()
	require.NoError(t, a.srv.Close())
	b.waitReadyz(t, "cluster: active", 3*time.Second)
	t.Logf("takeover after %v", time.Since(start))
	for i := 3; i < 5; i++ {
		var resp *sharelogv1.ProduceResponse
		require.Eventually(t, func() bool {
			resp, err = b.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p,
				Records: []*sharelogv1.Record{{Value: fmt.Appendf(nil, "v%d", i)}}})
			return err == nil
		}, 5*time.Second, 50*time.Millisecond, "produce after takeover: %v", err)
		require.Equal(t, int64(i), resp.GetResults()[0].GetOffset())
	}
	fr, err := b.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Partition: 0, Offset: 0})
	require.NoError(t, err)
	var got []string
	for _, r := range fr.GetRecords() {
		got = append(got, string(r.GetValue()))
	}
	require.Equal(t, []string{"v0", "v1", "v2", "v3", "v4"}, got)
}

func TestClusterDisconnectedAnswersOwnerUnreachable(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Cluster.Store = app.StoreJetStream
	cfg.Cluster.NATSURL = "nats://127.0.0.1:1" // nothing listens there
	cfg.Cluster.InstanceID = "lonely"
	cfg.Cluster.LeaseTTL = time.Second
	srv, err := app.Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = sharelogv1.NewLogServiceClient(conn).ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
	requireReason(t, err, codes.Unavailable, "OWNER_UNREACHABLE")
	in := &clusterInstance{id: "lonely", srv: srv}
	code, body := in.readyz(t)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "cluster: disconnected")
	// REST: 503 with the same reason.
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/v1/topics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", raw)
	require.Contains(t, string(raw), `"reason":"OWNER_UNREACHABLE"`)
}

// A write by another writer never interleaves with the active instance's:
// either the instance already followed it (its next append goes after it)
// or its append is fenced — then it answers NOT_OWNER and stops serving at
// once, and serves again only under a new lease, after the other record.
// Which of the two happens depends on whether the instance's stream
// consumer saw the other record first.
func TestClusterOtherWriterIsFencedOrFollowed(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	ctx := context.Background()
	createTopic(t, a.log, "t", 1)
	p := int32(0)
	produce := func() (*sharelogv1.ProduceResponse, error) {
		return a.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p, Records: []*sharelogv1.Record{{Value: []byte("a")}}})
	}
	_, err = produce()
	require.NoError(t, err)

	// Another writer (a second store on the same streams) appends.
	nc := js.Connect(t)
	other, err := jslog.Open(ctx, nc, jslog.Options{Prefix: prefix, Replicas: 3})
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Append(ctx, "t", 0, []logstore.Record{{Value: []byte("other")}})
	require.NoError(t, err)

	resp, err := produce()
	if err != nil {
		t.Log("fenced")
		requireReason(t, err, codes.Unavailable, "NOT_OWNER")
		code, body := a.readyz(t)
		require.Equal(t, http.StatusServiceUnavailable, code, body)
		_, err = a.log.ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
		requireReason(t, err, codes.Unavailable, "NOT_OWNER")
		// Its own lease expires; it takes a new one and serves after the
		// other writer's record.
		a.waitReadyz(t, "cluster: active", 5*time.Second)
		require.Eventually(t, func() bool { resp, err = produce(); return err == nil }, 5*time.Second, 50*time.Millisecond)
	} else {
		t.Log("followed")
	}
	require.Equal(t, int64(2), resp.GetResults()[0].GetOffset())
	fr, err := a.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Partition: 0, Offset: 0})
	require.NoError(t, err)
	var got []string
	for _, r := range fr.GetRecords() {
		got = append(got, string(r.GetValue()))
	}
	require.Equal(t, []string{"a", "other", "a"}, got)
}

// A share-state write refused by its compare-and-set (another writer
// changed the snapshot) fences the active instance as an append does.
func TestClusterShareStateConflictDeposes(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	ctx := context.Background()
	createTopic(t, a.log, "t", 1)
	p := int32(0)
	_, err = a.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p,
		Records: []*sharelogv1.Record{{Value: []byte("1")}, {Value: []byte("2")}}})
	require.NoError(t, err)
	sg := sharelogv1.NewShareGroupServiceClient(a.conn)
	earliest := "earliest"
	_, err = sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: &earliest}})
	require.NoError(t, err)
	fetch := func(epoch int32, acks ...*sharelogv1.AcknowledgementBatch) (*sharelogv1.ShareFetchResponse, error) {
		return sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: epoch,
			Topics: []*sharelogv1.ShareFetchTopic{{Topic: "t", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0, AcknowledgementBatches: acks}}}}})
	}
	resp, err := fetch(0)
	require.NoError(t, err)
	require.NotEmpty(t, resp.GetResponses()[0].GetPartitions()[0].GetAcquiredRecords())

	// Another writer replaces the share state (an empty startup snapshot
	// deletes every key a writes).
	nc := js.Connect(t)
	other, err := jsstate.Open(ctx, nc, jsstate.Options{Prefix: prefix, Replicas: 3})
	require.NoError(t, err)
	require.NoError(t, other.Start(func() error { return nil }))
	require.NoError(t, other.Close())

	accept := &sharelogv1.AcknowledgementBatch{FirstOffset: 0, LastOffset: 0,
		AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}}
	resp, err = fetch(1, accept)
	if err == nil {
		require.NotEqual(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, resp.GetResponses()[0].GetPartitions()[0].GetAcknowledgeErrorCode(),
			"the acknowledgement's write conflicted: it must not be confirmed")
	}
	_, err = a.log.ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
	requireReason(t, err, codes.Unavailable, "NOT_OWNER")
}
