package httpgw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/gen/openapi"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/budget"
	"github.com/sharelog/sharelog/internal/console"
	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/principal"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// Deps are what the HTTP surface serves and checks with.
type Deps struct {
	MaxRequestBytes int64         // --max-request-bytes, for request bodies
	ReadTimeout     time.Duration // --http-read-timeout, for request bodies
	Metrics         http.Handler  // the Prometheus scrape, served at /metrics
	// Readyz is /readyz's answer: ok, or why not (and a ready server's
	// notes).
	Readyz  func() (reasons []string, ok bool)
	Health  *edge.IPLimiter // rate of /healthz and /readyz per client IP
	Auth    *edge.Authenticator
	Guard   *authz.Guard        // /metrics needs DESCRIBE on the cluster (with --authorizer acl)
	Audit   *authz.Audit        // refused credentials on /metrics
	Trusted edge.TrustedProxies // --trusted-proxies
	Tracer  trace.TracerProvider
	Meter   metric.MeterProvider
	// Tickets hand each request's response budget (internal/budget) to the
	// gRPC server behind the gateway, so that it is held until the body is
	// written; nil = not budgeted here.
	Tickets *budget.Tickets
}

// jsonMarshaler is the gateway's JSON: protobuf JSON mapping, zero values
// included (an offset 0 is shown, not omitted), unknown request fields
// rejected (a misspelt field is an error, not silently ignored).
var jsonMarshaler = &runtime.JSONPb{
	MarshalOptions:   protojson.MarshalOptions{EmitDefaultValues: true},
	UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
}

// ndjsonStreams is the gateway's marshaler; a server-streaming call (the
// change stream) is newline-delimited JSON, one event per line, and is
// labelled so.
type ndjsonStreams struct{ *runtime.HTTPBodyMarshaler }

// StreamContentType implements runtime.StreamContentType.
func (ndjsonStreams) StreamContentType(any) string { return "application/x-ndjson" }

// Marshal implements runtime.Marshaler. The gateway marshals each message
// of a stream as one line {"result": message}; a change-stream message
// carries several events, and becomes one line {"result": event} per
// event, so NDJSON clients see one event per line however the server
// grouped them (the gateway ends the last line).
func (m ndjsonStreams) Marshal(v any) ([]byte, error) {
	if line, ok := v.(map[string]any); ok && len(line) == 1 {
		if resp, ok := line["result"].(*sharelogv1.StreamChangesResponse); ok {
			var out []byte
			for i, ev := range resp.GetEvents() {
				b, err := m.HTTPBodyMarshaler.Marshal(map[string]any{"result": ev})
				if err != nil {
					return nil, err
				}
				if i > 0 {
					out = append(out, '\n')
				}
				out = append(out, b...)
			}
			return out, nil
		}
	}
	return m.HTTPBodyMarshaler.Marshal(v)
}

// NewHandler builds the HTTP surface: the gateway (over conn, a real gRPC
// client connection, so server streaming works), /openapi.json, /healthz,
// /readyz, /metrics and the web console, all traced by otelhttp.
func NewHandler(ctx context.Context, conn *grpc.ClientConn, d Deps) (http.Handler, error) {
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, ndjsonStreams{&runtime.HTTPBodyMarshaler{Marshaler: fastJSON{jsonMarshaler}}}),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		// gRPC response metadata (content-type and the like) is the
		// transport's business, not the REST client's: no Grpc-Metadata-*
		// response headers.
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithMiddlewares(restRouteTable.checkQuery),
		runtime.WithRoutingErrorHandler(restRouteTable.routingError),
		// The gRPC server behind the gateway sees the gateway as its peer:
		// the real client's IP, host and certificate principal travel in
		// metadata only the gateway sets.
		runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD {
			md := edge.GatewayMetadata(r, d.Trusted)
			if id, ok := r.Context().Value(ticketKey{}).(string); ok {
				md = metadata.Join(md, metadata.Pairs(budget.MDTicket, id))
			}
			return md
		}),
		runtime.WithErrorHandler(gatewayError),
	)
	for _, register := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		sharelogv1.RegisterLogServiceHandler,
		sharelogv1.RegisterShareGroupServiceHandler,
		sharelogv1.RegisterChangeStreamServiceHandler,
		sharelogv1.RegisterAclServiceHandler,
		sharelogv1.RegisterUserServiceHandler,
		sharelogv1.RegisterConsumerGroupServiceHandler,
	} {
		if err := register(ctx, gw, conn); err != nil {
			return nil, fmt.Errorf("register gateway: %w", err)
		}
	}

	mux := http.NewServeMux()
	mux.Handle("GET /healthz", limitProbes(d.Health, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}))
	mux.Handle("GET /readyz", limitProbes(d.Health, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		reasons, ok := d.Readyz()
		if d.Auth.Enabled() && !d.Auth.HTTPAllowed(r) {
			// The probe needs no credential, but the reasons name
			// topics, groups, files and instances: with authentication
			// on, only a caller with a credential sees them.
			reasons = nil
		}
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			if len(reasons) == 0 {
				fmt.Fprintln(w, "not ready (send a credential to see why)")
				return
			}
			fmt.Fprintln(w, "not ready:", strings.Join(reasons, "; "))
			return
		}
		if len(reasons) > 0 { // a ready server's notes (the cluster role)
			fmt.Fprintln(w, "ready:", strings.Join(reasons, "; "))
			return
		}
		fmt.Fprintln(w, "ready")
	}))
	// The OpenAPI 3 document generated from the protos (make generate). It
	// is public like /healthz: it describes the API and holds no data.
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(openapi.JSON)))
		w.Write(openapi.JSON)
	})
	mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := d.Auth.HTTPPrincipal(r)
		if !ok {
			const msg = "a valid bearer token or client certificate is required"
			d.Audit.Unauthenticated(r.Context(), edge.HostOf(r.RemoteAddr), "GET /metrics", msg)
			writeError(w, r, apierr.New(apierr.Unauthenticated, msg))
			return
		}
		// The series are labelled with every topic and group name: only
		// a principal that may describe the cluster reads them.
		if err := d.Guard.Require(principal.WithUser(r.Context(), user), authz.Describe, authz.Cluster, authz.ClusterName); err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) {
				e = apierr.New(apierr.ClusterAuthorizationFailed, "%v", err)
			}
			writeError(w, r, e)
			return
		}
		d.Metrics.ServeHTTP(w, r)
	}))
	// The web console (docs/console.md): static files, public like
	// /openapi.json; its pages call the API above with the user's token.
	mux.Handle("GET /ui/", console.Handler("/ui/"))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	// A browser pointed at the server lands on the console rather than on the
	// gateway's JSON 404 (a 302: the root may serve something else one day).
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	mux.Handle("/", limitBody(d.MaxRequestBytes, holdBudget(d.Tickets, gw)))

	return bodyDeadline(d.ReadTimeout, otelhttp.NewHandler(labelRoutes(mux), "http",
		otelhttp.WithTracerProvider(d.Tracer),
		otelhttp.WithMeterProvider(d.Meter),
		otelhttp.WithSpanNameFormatter(spanName),
	)), nil
}

// limitProbes rate-limits an unauthenticated probe per client IP (429).
func limitProbes(l *edge.IPLimiter, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.Allow(edge.HostOf(r.RemoteAddr)) {
			writeError(w, r, apierr.New(apierr.ThrottlingQuotaExceeded, "%s", edge.HealthThrottledMsg))
			return
		}
		h(w, r)
	})
}

// bodyDeadline gives a request body --http-read-timeout to arrive. It is
// set per request rather than as http.Server.ReadTimeout: that deadline
// stays on the connection after the body is read, and when it passes, Go's
// server treats the connection as broken and cancels the request — it would
// cut long polls and NDJSON change-stream tails after the timeout. Here the
// deadline is cleared as soon as the body has been read to its end.
func bodyDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d <= 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		}
		next.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	io.ReadCloser
	clear func()
	once  sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		// Only a complete body lifts the deadline: after a timeout the
		// connection must not wait for the rest of a slow body.
		b.once.Do(b.clear)
	}
	return n, err
}

// gatewayError is the gateway's error handler. The gateway itself fails a
// request whose JSON body, path or query does not decode with a plain
// InvalidArgument; such a request is INVALID_REQUEST like any other
// malformed input, so it gets the ErrorInfo the server's errors carry. A
// chunked body cut off by --max-request-bytes is 413, as a declared one is.
func gatewayError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if hit, _ := r.Context().Value(bodyLimitKey{}).(*bodyLimitHit); hit != nil && hit.hit.Load() {
		msg := fmt.Sprintf("request body exceeds the limit of %d bytes (--max-request-bytes)", hit.limit)
		writeStatus(w, r, http.StatusRequestEntityTooLarge, status.New(codes.ResourceExhausted, msg), apierr.InvalidRequest)
		return
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument && !hasErrorInfo(st) {
		if withInfo, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: string(apierr.InvalidRequest), Domain: apierr.Domain}); derr == nil {
			err = withInfo.Err()
		}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

func hasErrorInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return true
		}
	}
	return false
}

type bodyLimitKey struct{}

// bodyLimitHit records that a body reached --max-request-bytes.
type bodyLimitHit struct {
	limit int64
	hit   atomic.Bool
}

type limitedBody struct {
	io.ReadCloser
	hit *bodyLimitHit
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		b.hit.hit.Store(true)
	}
	return n, err
}

// forwardedHeaders are the only HTTP headers the gateway passes to the
// gRPC side, as the metadata named: trace context, the request id, and
// the client id ShareGroupHeartbeat reads (as gRPC clients send it).
// Authorization is passed by the gateway itself. Everything else —
// notably Grpc-Metadata-* headers, which would otherwise let a REST client
// set any metadata, and X-Forwarded-For, which edge.GatewayMetadata reads
// only from trusted proxies — is dropped.
var forwardedHeaders = map[string]string{
	"Traceparent":  "traceparent",
	"Tracestate":   "tracestate",
	"X-Request-Id": "x-request-id",
	"X-Client-Id":  "x-client-id",
}

// incomingHeader is the gateway's incoming header matcher (forwardedHeaders).
func incomingHeader(key string) (string, bool) {
	md, ok := forwardedHeaders[textproto.CanonicalMIMEHeaderKey(key)]
	return md, ok
}

// limitBody refuses bodies above --max-request-bytes with 413 and a
// google.rpc.Status body, and caps bodies of unknown length.
func limitBody(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			msg := fmt.Sprintf("request body is %d bytes; the limit is %d (--max-request-bytes)", r.ContentLength, limit)
			writeStatus(w, r, http.StatusRequestEntityTooLarge, status.New(codes.ResourceExhausted, msg), apierr.InvalidRequest)
			return
		}
		hit := &bodyLimitHit{limit: limit}
		r = r.WithContext(context.WithValue(r.Context(), bodyLimitKey{}, hit))
		r.Body = &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit), hit: hit}
		next.ServeHTTP(w, r)
	})
}

type ticketKey struct{}

// holdBudget opens a budget ticket for each request: what the gRPC server
// reserves for the response (a Fetch's records) is charged as JSON and held
// until the body is written, when ServeHTTP returns.
func holdBudget(t *budget.Tickets, next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := t.Open(budget.JSON)
		defer t.Close(id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, id)))
	})
}

// writeError answers with a request-level error: its gRPC code and HTTP
// status come from the one reason table (grpcapi.StatusOf).
func writeError(w http.ResponseWriter, r *http.Request, e *apierr.Error) {
	s, _ := grpcapi.StatusOf(e.Reason)
	writeStatus(w, r, s.HTTP, status.New(s.Code, e.Message), e.Reason)
}

// writeStatus answers with st and an ErrorInfo of reason, under httpCode
// (for the one exception to the reason table: a body too large is 413).
func writeStatus(w http.ResponseWriter, _ *http.Request, httpCode int, st *status.Status, reason apierr.Reason) {
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(reason), Domain: apierr.Domain}); err == nil {
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
