// Package edge is what every listener of the process (gRPC, the REST
// gateway, Kafka) shares to decide who is calling and how much it may
// open, before any handler runs:
//
//   - auth.go: the Authenticator names the principal of a call
//     (docs/principals.md) from a bearer token of --auth-tokens-file
//     (reloaded when the file changes, or on Reload), a verified client
//     certificate (--tls-client-ca, CertPrincipal) or the cluster's
//     instance secret. A gRPC server reaches it through the Gate, a plain
//     HTTP handler through HTTPPrincipal, any other listener through Token
//     (a token its protocol carried) and WithoutToken (a connection that
//     presented none). LoadTLS builds the servers' TLS configuration.
//   - bare.go: the record of the principals given to bare tokens
//     (<data-dir>/auth-principals.json, token SHA-256 → User:token-<n>),
//     so that no reload or restart renumbers a bare token and no name is
//     given twice (docs/principals.md "Bare tokens").
//   - gate.go, codec.go: the Gate, the gRPC interceptor that authenticates
//     every call, names the client for per-client limits
//     (internal/principal), rate-limits health checks, believes
//     x-forwarded-for only from --trusted-proxies, and fails an
//     undecodable request with INVALID_REQUEST. GatewayMetadata is the REST
//     gateway's half of that contract: the client's address, host and
//     certificate principal, for the Gate behind the gateway.
//   - connlimit.go, iplimit.go: the LimitListener caps connections at
//     accept, in total and per client IP (--max-connections,
//     --max-connections-per-ip); IPLimiter and IPSlots bound what needs no
//     credential, per client IP.
//   - exposure.go: the refusal to serve beyond loopback without TLS and
//     authentication, and the repeated warning under
//     --insecure-allow-remote (docs/server-flags.md "Limits and exposure").
//   - logging.go: the gRPC call logger.
//
// Errors are apierr reasons (Unauthenticated, ThrottlingQuotaExceeded,
// InvalidRequest); each transport turns them into its own status. The
// package holds no process state of its own beyond that record:
// internal/app builds one Authenticator and hands it, with the limits, to
// every listener.
package edge
