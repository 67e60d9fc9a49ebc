package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sharelog/sharelog/gen/openapi"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

type httpDeps struct {
	maxRequestBytes int64
	metrics         http.Handler
	ready           func() bool
	auth            *authenticator
	tracer          trace.TracerProvider
	meter           metric.MeterProvider
}

// jsonMarshaler is the gateway's JSON: protobuf JSON mapping, zero values
// included (an offset 0 is shown, not omitted), unknown request fields
// rejected (a misspelt field is an error, not silently ignored).
var jsonMarshaler = &runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{EmitDefaultValues: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}

// newHTTPHandler builds the HTTP surface: the gateway (over conn, a real gRPC
// client connection, so server streaming works), /openapi.json, /healthz,
// /readyz and /metrics, all traced by otelhttp.
func newHTTPHandler(ctx context.Context, conn *grpc.ClientConn, d httpDeps) (http.Handler, error) {
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: jsonMarshaler}),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
	)
	for _, register := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		sharelogv1.RegisterLogServiceHandler,
		sharelogv1.RegisterShareGroupServiceHandler,
		sharelogv1.RegisterChangeStreamServiceHandler,
	} {
		if err := register(ctx, gw, conn); err != nil {
			return nil, fmt.Errorf("register gateway: %w", err)
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !d.ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	// The OpenAPI 3 document generated from the protos (make generate). It
	// is public like /healthz: it describes the API and holds no data.
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(openapi.JSON)))
		w.Write(openapi.JSON)
	})
	mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !d.auth.httpAllowed(r) {
			writeStatus(w, r, http.StatusUnauthorized, status.New(codes.Unauthenticated, "a valid bearer token is required"), "UNAUTHENTICATED")
			return
		}
		d.metrics.ServeHTTP(w, r)
	}))
	mux.Handle("/", limitBody(d.maxRequestBytes, gw))

	return otelhttp.NewHandler(mux, "http",
		otelhttp.WithTracerProvider(d.tracer),
		otelhttp.WithMeterProvider(d.meter),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }),
	), nil
}

// incomingHeader forwards the X-Client-Id header as the x-client-id
// metadata ShareGroupHeartbeat reads (as gRPC clients send it), besides
// the gateway's defaults (Grpc-Metadata-* and permanent HTTP headers).
func incomingHeader(key string) (string, bool) {
	if strings.EqualFold(key, "X-Client-Id") {
		return "x-client-id", true
	}
	return runtime.DefaultHeaderMatcher(key)
}

// limitBody refuses bodies above --max-request-bytes with 413 and a
// google.rpc.Status body, and caps bodies of unknown length.
func limitBody(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			msg := fmt.Sprintf("request body is %d bytes; the limit is %d (--max-request-bytes)", r.ContentLength, limit)
			writeStatus(w, r, http.StatusRequestEntityTooLarge, status.New(codes.ResourceExhausted, msg), "INVALID_REQUEST")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

func writeStatus(w http.ResponseWriter, _ *http.Request, httpCode int, st *status.Status, reason string) {
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "sharelog"}); err == nil {
		st = withInfo
	}
	body, err := jsonMarshaler.Marshal(st.Proto())
	if err != nil {
		body = []byte(`{"code":13,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(httpCode)
	w.Write(body)
}
