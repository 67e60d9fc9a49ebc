package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// stack is the real server in-process (testsupport.NewStack): gRPC over
// bufconn, the REST gateway over httptest (the gateway itself dials the
// gRPC server), a file store in t.TempDir().
type stack struct {
	srv     *app.Server
	conn    *grpc.ClientConn
	log     sharelogv1.LogServiceClient
	http    *httptest.Server
	dataDir string
}

func newStack(t testing.TB, opts app.Options, mutate ...func(*app.Config)) *stack {
	t.Helper()
	return stackOf(testsupport.NewStack(t, testsupport.StackOptions{App: opts}, mutate...))
}

func stackOf(s *testsupport.Stack) *stack {
	return &stack{srv: s.Srv, conn: s.Conn, log: s.Log, http: s.HTTP, dataDir: s.DataDir}
}

// requireReason asserts a gRPC error's code and ErrorInfo reason.
func requireReason(t *testing.T, err error, code codes.Code, reason string) *errdetails.ErrorInfo {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	require.Equal(t, code, st.Code(), "status: %v", st)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			require.Equal(t, reason, info.GetReason(), "status: %v", st)
			require.Equal(t, "sharelog", info.GetDomain())
			return info
		}
	}
	t.Fatalf("no ErrorInfo in %v", st)
	return nil
}

// restResponse is one REST call's outcome.
type restResponse struct {
	Status int
	Body   map[string]any
	Raw    string
}

func (s *stack) rest(t *testing.T, method, path, body string) restResponse {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.http.URL+path, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := restResponse{Status: resp.StatusCode, Raw: string(raw)}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &out.Body), "body: %s", raw)
	}
	return out
}

// requireRESTError asserts an HTTP status and the google.rpc.Status body's reason.
func requireRESTError(t *testing.T, r restResponse, httpStatus int, reason string) {
	t.Helper()
	require.Equal(t, httpStatus, r.Status, "body: %s", r.Raw)
	details, _ := r.Body["details"].([]any)
	for _, d := range details {
		m := d.(map[string]any)
		if m["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" {
			require.Equal(t, reason, m["reason"], "body: %s", r.Raw)
			require.NotEmpty(t, r.Body["message"])
			return
		}
	}
	t.Fatalf("no ErrorInfo in body %s", r.Raw)
}

func (s *stack) createTopic(t testing.TB, name string, partitions int32, cfg *sharelogv1.TopicConfig) *sharelogv1.Topic {
	t.Helper()
	topic, err := s.log.CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: name, Partitions: partitions, Config: cfg})
	require.NoError(t, err)
	return topic
}

func (s *stack) produce(t testing.TB, topic string, partition int32, values ...string) []*sharelogv1.ProduceResult {
	t.Helper()
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &partition}
	for _, v := range values {
		req.Records = append(req.Records, &sharelogv1.Record{Value: []byte(v)})
	}
	resp, err := s.log.Produce(context.Background(), req)
	require.NoError(t, err)
	return resp.GetResults()
}

// metricsText returns the /metrics page, or "" if it cannot be read. It
// does not fail the test, so it may run off the test's goroutine (as
// require.Eventually's condition does).
func (s *stack) metricsText() string { return testsupport.MetricsText(s.http.Client(), s.http.URL) }

// awaitLongPolls waits until n Fetch or ShareFetch calls hold a long-poll
// slot: a Fetch takes its slot after subscribing to appends, so from then
// on a produce wakes it.
func (s *stack) awaitLongPolls(t *testing.T, n int) {
	t.Helper()
	re := testsupport.LongPollsWaiting(n)
	require.Eventually(t, func() bool { return re.MatchString(s.metricsText()) }, 10*time.Second, pollTick,
		"%d calls wait for records", n)
}
