// Package grpcapi holds the gRPC handlers of sharelog's three services.
//
// A handler validates what only the protobuf message can get wrong,
// translates the message to the domain packages' types (internal/broker,
// internal/sharegroup, internal/changestream), calls them and translates
// the result back. It holds no rule of its own.
//
// Handlers return domain errors as they are: [Errors], installed as the
// unary and stream interceptor, is the single place where they become gRPC
// statuses carrying a google.rpc.ErrorInfo whose reason is an apierr.Reason
// (the domain names the reason of a sentinel, broker.ErrorOf; the table from
// reason to gRPC code and HTTP status is in status.go, and docs/errors.md
// documents it). A per-partition ErrorCode is a cast of the outcome's
// reason (codeToProto). Internal errors are logged with the trace
// id and masked: clients never see file paths or stack traces.
//
// The long-poll slots (--max-long-polls) are taken by the domain, not
// here: the broker for Fetch, the share-group manager for ShareFetch, so
// that every transport is bound by the same slots.
package grpcapi
