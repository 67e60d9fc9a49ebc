package httpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/gen/openapi"
)

// restRoutes is the REST surface as the generated OpenAPI document
// describes it (make generate writes it from the protos' HTTP rules): each
// path template with its methods and the query parameters each accepts. It
// is read from the document rather than listed here, so that it cannot
// drift from the gateway when a route or a request field is added.
type restRoutes struct {
	routes []restRoute
}

type restRoute struct {
	template string         // as in the document: /v1/topics/{topic}/records
	match    *regexp.Regexp // one path segment per {param}
	// query maps each method to the query parameters it accepts (JSON
	// names, as the document lists them).
	query map[string]map[string]bool
}

var paramRE = regexp.MustCompile(`\{[^}]*\}`)

// loadRESTRoutes reads the route table from an OpenAPI 3 document.
func loadRESTRoutes(doc []byte) (*restRoutes, error) {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	rt := &restRoutes{}
	for tmpl, ops := range d.Paths {
		r := restRoute{template: tmpl, query: map[string]map[string]bool{}}
		lit := paramRE.Split(tmpl, -1)
		for i := range lit {
			lit[i] = regexp.QuoteMeta(lit[i])
		}
		// A segment may be empty: the gateway matches /v1/topics/ to
		// /v1/topics/{name} with an empty name (and the handler refuses
		// it), so the table must know that path too, or a wrong method on
		// it would fall through to the gateway's 501.
		r.match = regexp.MustCompile("^" + strings.Join(lit, "[^/]*") + "$")
		for method, raw := range ops {
			m := strings.ToUpper(method)
			switch m {
			case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			default:
				continue // path-level "parameters" and the like
			}
			var op struct {
				Parameters []struct {
					Name string `json:"name"`
					In   string `json:"in"`
				} `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("openapi document: %s %s: %w", m, tmpl, err)
			}
			q := map[string]bool{}
			for _, p := range op.Parameters {
				if p.In == "query" {
					q[p.Name] = true
				}
			}
			r.query[m] = q
		}
		rt.routes = append(rt.routes, r)
	}
	slices.SortFunc(rt.routes, func(a, b restRoute) int { return strings.Compare(a.template, b.template) })
	return rt, nil
}

// allowed returns the methods the routes matching path accept, sorted
// (none: the path is unknown).
func (rt *restRoutes) allowed(path string) []string {
	var out []string
	for _, r := range rt.routes {
		if r.match.MatchString(path) {
			for m := range r.query {
				if !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// find returns the route serving method on path, nil if none. Where two
// templates match (/v1/share-groups/{groupId} also matches
// "g:fetch"), the one with more literal text wins, as the gateway's verb
// matching does.
func (rt *restRoutes) find(method, path string) *restRoute {
	var best *restRoute
	for i := range rt.routes {
		r := &rt.routes[i]
		if _, ok := r.query[method]; !ok || !r.match.MatchString(path) {
			continue
		}
		if best == nil || literalLen(r.template) > literalLen(best.template) {
			best = r
		}
	}
	return best
}

func literalLen(template string) int { return len(paramRE.ReplaceAllString(template, "")) }

// unknownQuery returns the first query parameter of q the route's method
// does not accept, in sorted order ("" if none). A parameter may be named
// by its JSON name or by its proto field name, as the gateway accepts both.
func (r *restRoute) unknownQuery(method string, q url.Values) string {
	accepted := r.query[method]
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !accepted[k] && !accepted[jsonFieldPath(k)] {
			return k
		}
	}
	return ""
}

// jsonFieldPath turns a dotted path of proto field names into JSON names
// (max_wait_ms -> maxWaitMs), as protoc derives them.
func jsonFieldPath(path string) string {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		var b strings.Builder
		upper := false
		for _, c := range p {
			if c == '_' {
				upper = true
				continue
			}
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			upper = false
			b.WriteRune(c)
		}
		parts[i] = b.String()
	}
	return strings.Join(parts, ".")
}

// checkQuery is a gateway middleware: a query parameter the matched route
// does not accept is 400 INVALID_REQUEST (a misspelt ?ofset=100 would
// otherwise read from offset 0). It also names the route for metrics and
// spans (see labelRoutes).
func (rt *restRoutes) checkQuery(next runtime.HandlerFunc) runtime.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request, params map[string]string) {
		route := rt.find(r.Method, r.URL.Path)
		if route == nil {
			// The gateway serves it, the document does not list it: a
			// stale document (make check-generate catches that).
			grpclog.Warningf("gateway route %s %s is not in the OpenAPI document", r.Method, r.URL.Path)
			next(w, r, params)
			return
		}
		if rl, ok := r.Context().Value(routeLabelKey{}).(*routeLabel); ok {
			rl.route = route.template
		}
		if what := invalidUTF8(r, params); what != "" {
			// Every path and query parameter is a proto string, which
			// must be UTF-8: the gateway's call would fail to marshal
			// (a 500), so the request is the client's error.
			writeStatus(w, r, http.StatusBadRequest,
				status.New(codes.InvalidArgument, what+" is not valid UTF-8"), "INVALID_REQUEST")
			return
		}
		if k := route.unknownQuery(r.Method, r.URL.Query()); k != "" {
			writeStatus(w, r, http.StatusBadRequest,
				status.New(codes.InvalidArgument, fmt.Sprintf("unknown query parameter %q for %s %s", k, r.Method, route.template)),
				"INVALID_REQUEST")
			return
		}
		next(w, r, params)
	}
}

// invalidUTF8 names the first path or query parameter of a request that
// is not valid UTF-8 once unescaped ("" if none).
func invalidUTF8(r *http.Request, params map[string]string) string {
	if !utf8.ValidString(r.URL.Path) {
		return "the path"
	}
	for name, v := range params {
		if !utf8.ValidString(v) {
			return fmt.Sprintf("path parameter %q", name)
		}
	}
	q := r.URL.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !utf8.ValidString(k) {
			return "a query parameter name"
		}
		for _, v := range q[k] {
			if !utf8.ValidString(v) {
				return fmt.Sprintf("query parameter %q", k)
			}
		}
	}
	return ""
}

// routingError is the gateway's routing error handler: a known path with
// a method it does not serve is 405 with Allow (the gateway's default
// answers 501), the rest as the gateway does.
func (rt *restRoutes) routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if httpStatus == http.StatusMethodNotAllowed {
		// The gateway found the path under another method: 405 whether or
		// not the table lists it (a stale document, say), never the
		// gateway's 501.
		allow := rt.allowed(r.URL.Path)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeStatus(w, r, http.StatusMethodNotAllowed,
			status.New(codes.InvalidArgument, fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))),
			"INVALID_REQUEST")
		return
	}
	runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
}

// restRouteTable is the route table of the embedded document.
var restRouteTable = func() *restRoutes {
	rt, err := loadRESTRoutes(openapi.JSON)
	if err != nil {
		panic(err) // the embedded document is generated: a test loads it too
	}
	return rt
}()
