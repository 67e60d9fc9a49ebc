package httpgw

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// routeLabelKey carries a *routeLabel from labelRoutes to the gateway's
// middleware (restRoutes.checkQuery), which fills it in.
type routeLabelKey struct{}

// routeLabel is the path template the gateway matched ("" if none).
type routeLabel struct{ route string }

// labelRoutes runs directly under otelhttp, which labels the request's
// metrics with http_route and names its span from the request's Pattern
// once the handler returns. net/http's mux sets Pattern to "/" for every
// gateway call; labelRoutes replaces it with the template the gateway
// matched (POST /v1/topics/{topic}/records), or clears it when the gateway
// matched nothing, so that the label set stays bounded by the routes and
// names them. It also returns the request's trace context to the client
// (traceparent and X-Trace-Id) when the request has a trace id, so a
// client can quote it.
func labelRoutes(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); sc.HasTraceID() {
			propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(w.Header()))
			w.Header().Set("X-Trace-Id", sc.TraceID().String())
		}
		rl := &routeLabel{}
		inner := r.WithContext(context.WithValue(r.Context(), routeLabelKey{}, rl))
		mux.ServeHTTP(w, inner)
		// otelhttp reads its own request, r, after we return: the mux set
		// the pattern on inner.
		switch {
		case rl.route != "":
			r.Pattern = r.Method + " " + rl.route
		case inner.Pattern == "/":
			r.Pattern = ""
		default:
			r.Pattern = inner.Pattern
		}
	})
}

// spanName names an HTTP server span "METHOD route", or "METHOD" while
// (or if) no route is known, never by the raw path (unbounded).
func spanName(_ string, r *http.Request) string {
	if r.Pattern == "" {
		return r.Method
	}
	if strings.Contains(r.Pattern, " ") {
		return r.Pattern
	}
	return r.Method + " " + r.Pattern
}
