// Package service holds the gRPC handlers of sharelog's three services.
//
// A handler validates its request, translates protobuf messages to domain
// types, calls the domain packages (logstore, and later sharegroup and
// changestream) and translates the result back. It holds no logic of its own
// beyond that. Every error leaves through [toStatus], the single place where
// domain errors become gRPC statuses carrying a google.rpc.ErrorInfo whose
// reason is the Kafka error name of api.md §7. Internal errors are logged with
// the trace id and masked: clients never see file paths or stack traces.
//
// [LongPolls] bounds the Fetch and ShareFetch calls waiting for records at
// once (--max-long-polls); it lives here, around the domain calls, so that
// the domain packages stay unaware of server-wide limits.
package service
