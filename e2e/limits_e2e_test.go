package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// rawCodec sends bytes as they are, to put malformed protobuf on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (rawCodec) Name() string                         { return "proto" }

// A request body that does not decode is INVALID_REQUEST, not INTERNAL,
// for unary and streaming calls alike, and the server keeps serving.
func TestMalformedProtobufIsInvalidRequest(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	bad := []byte{0x0a, 0xff} // field 1, length-delimited, truncated length
	var out []byte
	err := s.conn.Invoke(ctx, sharelogv1.LogService_CreateTopic_FullMethodName, bad, &out, grpc.ForceCodecV2(rawCodec{}))
	info := requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
	assert.Empty(t, info.GetMetadata())
	assert.Contains(t, status.Convert(err).Message(), "sharelog.v1.CreateTopicRequest")

	st, err := s.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, sharelogv1.ChangeStreamService_StreamChanges_FullMethodName,
		grpc.ForceCodecV2(rawCodec{}))
	require.NoError(t, err)
	require.NoError(t, st.SendMsg([]byte{0x0a, 0x02, 0xff, 0xfe})) // topic: invalid UTF-8
	require.NoError(t, st.CloseSend())
	requireReason(t, st.RecvMsg(&out), codes.InvalidArgument, "INVALID_REQUEST")

	s.createTopic(t, "ok", 1, nil) // well-formed calls are unaffected
}

// A REST body that is not JSON is a 400 INVALID_REQUEST with an ErrorInfo;
// a chunked body over --max-request-bytes is 413 like a declared one.
func TestMalformedJSONIsInvalidRequest(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, func(c *app.Config) { c.MaxRequestBytes = 4096 })
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/topics", `{"name": "x", "partitions": `), http.StatusBadRequest, "INVALID_REQUEST")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/topics", `not json`), http.StatusBadRequest, "INVALID_REQUEST")
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/topics/x/partitions/zero/records", ""), http.StatusBadRequest, "INVALID_REQUEST")

	s.createTopic(t, "big", 1, nil)
	body := `{"records":[{"value":"` + strings.Repeat("A", 8000) + `"}]}`
	req, err := http.NewRequest(http.MethodPost, s.http.URL+"/v1/topics/big/records", io.MultiReader(strings.NewReader(body))) // unknown length: chunked
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Client().Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "body: %s", raw)
	assert.Contains(t, string(raw), "--max-request-bytes")
}

// With --max-long-polls 2, a third Fetch that would wait answers at once,
// empty, while the two others keep waiting; a freed slot waits again.
func TestLongPollCap(t *testing.T) {
	t.Parallel()
	// One client here: its share is the whole cap (TestLongPollFairShare in
	// cmd/server covers the per-client share).
	s := newStack(t, app.Options{}, func(c *app.Config) { c.MaxLongPolls, c.MaxLongPollsPerPrincipal = 2, 2 })
	s.createTopic(t, "lp", 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitReq := &sharelogv1.FetchRequest{Topic: "lp", Offset: 0, MaxWaitMs: 30000}
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.log.Fetch(ctx, waitReq)
			done <- err
		}()
	}
	s.awaitLongPolls(t, 2)

	start := time.Now()
	resp, err := s.log.Fetch(context.Background(), waitReq)
	require.NoError(t, err, "over the cap is not an error")
	assert.Empty(t, resp.GetRecords())
	assert.Less(t, time.Since(start), 5*time.Second, "answered at once, not after max_wait_ms")

	cancel()
	for range 2 {
		assert.Equal(t, codes.Canceled, status.Code(<-done))
	}
	s.awaitLongPolls(t, 0) // the server released the cancelled calls' slots
	// The slots are free again: a waiting Fetch gets the record produced
	// while it waits.
	got := make(chan *sharelogv1.FetchResponse, 1)
	go func() {
		r, err := s.log.Fetch(context.Background(), waitReq)
		assert.NoError(t, err)
		got <- r
	}()
	s.awaitLongPolls(t, 1)
	s.produce(t, "lp", 0, "x")
	select {
	case r := <-got:
		require.Len(t, r.GetRecords(), 1)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Fetch did not get the record")
	}
}

// With --max-long-polls 0 no ShareFetch waits: it answers at once, empty.
func TestLongPollCapShareFetch(t *testing.T) {
	t.Parallel()
	s := newShareStack(t, func(c *app.Config) { c.MaxLongPolls = 0 })
	s.createTopic(t, "q", 1, nil)
	start := time.Now()
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", MaxWaitMs: 20000, Topics: topicReq("q", part(0))})
	assert.Empty(t, acquired(partitionOf(r, "q", 0)))
	assert.Less(t, time.Since(start), 10*time.Second, "answered at once, not after max_wait_ms")
}

// Per-client shares: with auth, each token is a client; client A at its
// share is refused while client B still opens sessions and streams.
func TestPerClientShares(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("# clients\ntoken-of-a\ntoken-of-b\n"), 0o600))
	s := newShareStack(t, func(c *app.Config) {
		c.AuthTokensFile = tokens
		c.MaxChangeStreams, c.MaxShareSessions, c.ShareGroupMaxSize = 4, 4, 4 // shares: 2 each
	})
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	a, b := as("token-of-a"), as("token-of-b")
	_, err := s.log.CreateTopic(a, &sharelogv1.CreateTopicRequest{Name: "q", Partitions: 1})
	require.NoError(t, err)
	p := int32(0)
	_, err = s.log.Produce(a, &sharelogv1.ProduceRequest{Topic: "q", Partition: &p, Records: []*sharelogv1.Record{{Value: []byte("x")}}})
	require.NoError(t, err)

	cs := sharelogv1.NewChangeStreamServiceClient(s.conn)
	open := func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		st, err := cs.StreamChanges(ctx, streamReq("q", 0))
		require.NoError(t, err)
		_, err = st.Recv() // the first event (the topic holds a record), or the refusal
		return err
	}
	require.NoError(t, open(a))
	require.NoError(t, open(a))
	requireReason(t, open(a), codes.ResourceExhausted, "THROTTLING_QUOTA_EXCEEDED")
	require.NoError(t, open(b), "client B keeps its share of change streams")

	fetch := func(ctx context.Context, member string) error {
		_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: member, Topics: topicReq("q", part(0))})
		return err
	}
	require.NoError(t, fetch(a, "a1"))
	require.NoError(t, fetch(a, "a2"))
	requireReason(t, fetch(a, "a3"), codes.ResourceExhausted, "SHARE_SESSION_LIMIT_REACHED")
	require.NoError(t, fetch(b, "b1"), "client B keeps its share of share sessions")
}

// Without auth the client is its IP; a REST client is known by its own IP
// (not the gateway's), and cannot pose as another by forging the metadata
// the gateway uses to forward it.
func TestPerClientSharesByIP(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, func(c *app.Config) { c.MaxChangeStreams = 3 }) // share: 1
	s.createTopic(t, "q", 1, nil)
	s.produce(t, "q", 0, "x")           // so that a stream answers (and the gateway sends headers) at once
	s.openChanges(t, streamReq("q", 0)) // the bufconn client holds its share
	requireReason(t, requireRecvError(t, s.openChanges(t, streamReq("q", 0))), codes.ResourceExhausted, "THROTTLING_QUOTA_EXCEEDED")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.http.URL+"/v1/topics/q/partitions/0/changes", nil)
	require.NoError(t, err)
	req.Header.Set("Grpc-Metadata-Sharelog-Client-Addr", "bufconn") // forged: ignored
	resp, err := s.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the REST client (127.0.0.1) has a share of its own")
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, first, "snapshotMarker")

	r := s.rest(t, http.MethodGet, "/v1/topics/q/partitions/0/changes", "")
	require.Equal(t, http.StatusTooManyRequests, r.Status, "a second REST stream from 127.0.0.1 is over its share: %s", r.Raw)
	assert.Contains(t, r.Raw, "THROTTLING_QUOTA_EXCEEDED")
}

// Readiness follows the checks: while one fails, /readyz is 503 with its
// reason and gRPC health is NOT_SERVING for the server and the affected
// service (not the others); /healthz stays OK throughout.
func TestReadinessChecks(t *testing.T) {
	t.Parallel()
	var offline atomic.Bool
	s := newStack(t, app.Options{
		ReadinessInterval: 10 * time.Millisecond,
		ReadinessChecks: []app.ReadinessCheck{{
			Service: sharelogv1.LogService_ServiceDesc.ServiceName,
			Check: func() (string, bool) {
				if offline.Load() {
					return "partition orders/3 is offline: no space left on device", false
				}
				return "", true
			},
		}},
	})
	hc := healthpb.NewHealthClient(s.conn)
	ctx := context.Background()
	status := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		return r.GetStatus()
	}
	logSvc, shareSvc := sharelogv1.LogService_ServiceDesc.ServiceName, sharelogv1.ShareGroupService_ServiceDesc.ServiceName
	assert.Equal(t, 200, s.rest(t, http.MethodGet, "/readyz", "").Status)

	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: logSvc})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())

	offline.Store(true)
	next, err := watch.Recv() // pushed by the readiness loop
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus())
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, status(""))
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, status(shareSvc), "other services are unaffected")
	r := s.rest(t, http.MethodGet, "/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, r.Status)
	assert.Contains(t, r.Raw, "partition orders/3 is offline")
	assert.Equal(t, http.StatusOK, s.rest(t, http.MethodGet, "/healthz", "").Status, "liveness stays OK")

	offline.Store(false)
	next, err = watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, next.GetStatus())
	assert.Equal(t, http.StatusOK, s.rest(t, http.MethodGet, "/readyz", "").Status)
}

// Health probes need no token but are rate-limited per client IP.
func TestHealthRateLimited(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("secret\n"), 0o600))
	s := newStack(t, app.Options{}, func(c *app.Config) { c.AuthTokensFile = tokens })
	hc := healthpb.NewHealthClient(s.conn)
	var ok, limited int
	for range 200 {
		_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		switch status.Code(err) {
		case codes.OK:
			ok++
		case codes.ResourceExhausted:
			limited++
		default:
			t.Fatalf("health check: %v", err)
		}
	}
	assert.Positive(t, ok, "no token needed")
	assert.Positive(t, limited, "a flood is refused")

	var httpOK, http429 int
	for range 200 {
		r := s.rest(t, http.MethodGet, "/healthz", "")
		switch r.Status {
		case http.StatusOK:
			httpOK++
		case http.StatusTooManyRequests:
			http429++
			assert.Contains(t, r.Raw, "THROTTLING_QUOTA_EXCEEDED")
		default:
			t.Fatalf("/healthz: %d %s", r.Status, r.Raw)
		}
	}
	assert.Positive(t, httpOK)
	assert.Positive(t, http429)
}

// --health-probes-per-sec 0 lifts the limit (benchmarks use health.Check
// as their null call).
func TestHealthRateUnlimited(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, func(c *app.Config) { c.HealthProbesPerSec = 0 })
	hc := healthpb.NewHealthClient(s.conn)
	for i := range 200 {
		_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "probe %d", i)
	}
}

// Over the real HTTP listener: a body that does not arrive within
// --http-read-timeout is cut, while a long poll longer than that timeout
// (whose body arrived at once) is answered normally.
func TestHTTPReadTimeout(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, func(c *app.Config) { c.HTTPReadTimeout = 300 * time.Millisecond })
	s.createTopic(t, "rt", 1, nil)
	base := "http://" + s.srv.HTTPAddr()

	start := time.Now()
	resp, err := http.Get(base + "/v1/topics/rt/partitions/0/records?offset=0&maxWaitMs=800")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", raw)
	assert.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond, "the long poll waited")

	conn, err := net.Dial("tcp", s.srv.HTTPAddr())
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":")
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	start = time.Now()
	line, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err, "the server answers the stalled body")
	assert.Contains(t, line, " 400 ")
	assert.Less(t, time.Since(start), 5*time.Second)
}
