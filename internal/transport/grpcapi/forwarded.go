package grpcapi

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sharelog/sharelog/internal/broker"
)

// MDForwardedBy is the metadata key that marks a call forwarded by
// another instance of a cluster (its value: that instance's ID). A
// forwarded call is never forwarded again (docs/cluster.md).
const MDForwardedBy = "sharelog-forwarded-by"

// MarkForwarded is the unary interceptor that tells the log domain a call
// was forwarded by another instance (broker.WithForwardedBy), from
// MDForwardedBy: a partition this instance does not serve then answers
// NOT_OWNER rather than travelling on.
func MarkForwarded(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if v := metadata.ValueFromIncomingContext(ctx, MDForwardedBy); len(v) > 0 {
		ctx = broker.WithForwardedBy(ctx, v[0])
	}
	return handler(ctx, req)
}

// MarkForwardedStream is MarkForwarded for streaming calls (a change
// stream of a partition served elsewhere is streamed from its owner).
func MarkForwardedStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if v := metadata.ValueFromIncomingContext(ss.Context(), MDForwardedBy); len(v) > 0 {
		ss = forwardedStream{ServerStream: ss, ctx: broker.WithForwardedBy(ss.Context(), v[0])}
	}
	return handler(srv, ss)
}

type forwardedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s forwardedStream) Context() context.Context { return s.ctx }
