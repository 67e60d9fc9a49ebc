// Package httpgw is the REST transport: the grpc-gateway in front of the
// gRPC server (which it dials over a real client connection, so that
// server streaming works: a change stream becomes NDJSON), and the plain
// HTTP endpoints beside it — /healthz, /readyz, /openapi.json, /metrics
// and the web console (docs/console.md). NewHandler builds it all.
//
//   - http.go: the handler, body limits and deadlines, probe rate limits,
//     the gateway's error mapping (a body it cannot decode is
//     INVALID_REQUEST with ErrorInfo, as the server's errors are) and the
//     headers it passes on. Authentication of gateway calls is the gRPC
//     server's (edge.Gate, fed by edge.GatewayMetadata); the plain
//     endpoints authenticate with edge.Authenticator.HTTPPrincipal.
//   - restroutes.go, httproute.go: the REST route table read from the
//     generated OpenAPI document (405 with Allow, unknown query parameters
//     refused) and the bounded http_route label of metrics and spans.
//   - restjson.go: the fast JSON decoder of Produce bodies, which decides
//     nothing protojson would not.
package httpgw
