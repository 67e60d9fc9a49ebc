package e2e

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/telemetry"
)

// One REST produce is one trace: the HTTP server span, the gRPC server span
// of the call the gateway makes, and the log-store append span under it.
func TestRESTProduceIsOneTrace(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	var console bytes.Buffer
	s := newStack(t, app.Options{
		SpanProcessors: []sdktrace.SpanProcessor{recorder},
		Telemetry: telemetry.Options{
			Getenv:  func(k string) string { return map[string]string{"OTEL_TRACES_EXPORTER": "console"}[k] },
			Console: &console,
		},
	})
	s.createTopic(t, "traced", 1, nil)
	before := len(recorder.Ended())

	r := s.rest(t, http.MethodPost, "/v1/topics/traced/records", `{"records":[{"value":"aGk="}]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)

	var httpSpan, grpcServer, appendSpan sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, sp := range recorder.Ended()[before:] {
			switch {
			case sp.SpanKind() == trace.SpanKindServer && sp.Name() == "POST /v1/topics/{topic}/records":
				httpSpan = sp
			case sp.SpanKind() == trace.SpanKindServer && sp.Name() == "sharelog.v1.LogService/Produce":
				grpcServer = sp
			case sp.Name() == "logstore.Append":
				appendSpan = sp
			}
		}
		return httpSpan != nil && grpcServer != nil && appendSpan != nil
	}, 5_000_000_000, 10_000_000)

	traceID := httpSpan.SpanContext().TraceID()
	assert.Equal(t, traceID, grpcServer.SpanContext().TraceID(), "the gRPC call is in the HTTP call's trace")
	assert.Equal(t, traceID, appendSpan.SpanContext().TraceID(), "the log-store span is in the same trace")
	assert.Equal(t, grpcServer.SpanContext().SpanID(), appendSpan.Parent().SpanID(), "the append is a child of the gRPC server span")

	// The console exporter prints the trace once the batcher flushes (on Close).
	require.NoError(t, s.srv.Close())
	out := console.String()
	assert.Contains(t, out, traceID.String())
	assert.Contains(t, out, "logstore.Append")
}

// A change stream's reads through the real server are log-store spans of
// the call: an ordered snapshot's record reads (logstore.Read) and an OSO
// snapshot's key scan (logstore.ScanKeys), each a child of the
// StreamChanges server span. The server hands change streams the traced
// store and the traced key index, never the unwrapped store.
func TestChangeStreamReadsAreTraced(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	s := newStack(t, app.Options{SpanProcessors: []sdktrace.SpanProcessor{recorder}}, osoEnabled)
	s.exampleTopic(t, "ct")

	call := func(req *sharelogv1.StreamChangesRequest, want string) {
		t.Helper()
		before := len(recorder.Ended())
		s.streamAll(t, req)
		var callSpan, readSpan sdktrace.ReadOnlySpan
		require.Eventually(t, func() bool {
			for _, sp := range recorder.Ended()[before:] {
				switch {
				case sp.SpanKind() == trace.SpanKindServer && sp.Name() == "sharelog.v1.ChangeStreamService/StreamChanges":
					callSpan = sp
				case sp.Name() == want && readSpan == nil:
					readSpan = sp
				}
			}
			return callSpan != nil && readSpan != nil
		}, 5*time.Second, 10*time.Millisecond, "no %s span", want)
		assert.Equal(t, callSpan.SpanContext().TraceID(), readSpan.SpanContext().TraceID(), "%s is in the call's trace", want)
		assert.Equal(t, callSpan.SpanContext().SpanID(), readSpan.Parent().SpanID(), "%s is a child of the call's span", want)
	}
	call(streamReq("ct", 0, withEnd(8), withOSO(osoOff)), "logstore.Read")
	call(streamReq("ct", 0, withEnd(8), withOSO(osoOn)), "logstore.ScanKeys")
}
