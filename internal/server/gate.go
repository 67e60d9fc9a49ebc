package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/principal"
)

// mdClientAddr carries the REST client's IP from the gateway to the gRPC
// server behind it, whose own peer is the gateway's in-memory connection.
// Only that server trusts it, and the gateway drops the header a client
// could send to forge it (Grpc-Metadata-Sharelog-Client-Addr).
const mdClientAddr = "sharelog-client-addr"

const healthMethodPrefix = "/grpc.health.v1.Health/"

// gate is the first interceptor of every call after recovery and logging:
//   - health checks need no token but are rate-limited per client IP;
//   - any other call is authenticated (when --auth-tokens-file is set) and
//     carries its client identity (principal.Name: "token-<line>" or
//     "ip:<address>") for per-client limits;
//   - a request that did not decode fails with INVALID_REQUEST (see
//     requestCodec).
type gate struct {
	auth   *authenticator
	codec  *requestCodec
	health *ipLimiter
	// viaGateway: the server behind the REST gateway, whose client IP
	// comes from mdClientAddr.
	viaGateway bool
}

func (g *gate) clientIP(ctx context.Context) string {
	if g.viaGateway {
		if v := metadata.ValueFromIncomingContext(ctx, mdClientAddr); len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return hostOf(p.Addr.String())
	}
	return ""
}

func (g *gate) admit(ctx context.Context, method string) (context.Context, error) {
	ip := g.clientIP(ctx)
	if strings.HasPrefix(method, healthMethodPrefix) {
		if !g.health.allow(ip) {
			return ctx, apierr.New(apierr.ThrottlingQuotaExceeded, "%s", healthThrottledMsg)
		}
		return ctx, nil
	}
	name, err := g.auth.authorize(ctx)
	if err != nil {
		return ctx, err
	}
	if name != "" {
		ctx = principal.WithUser(ctx, "User:"+name)
	} else if ip != "" {
		name = "ip:" + ip
	}
	return principal.WithName(ctx, name), nil
}

func (g *gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	// Taken before anything can fail, so the codec forgets the message.
	decodeErr := g.codec.takeFailure(req)
	ctx, err := g.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if decodeErr != nil {
		return nil, decodeErr
	}
	return handler(ctx, req)
}

func (g *gate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := g.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &gatedStream{ServerStream: ss, ctx: ctx, codec: g.codec})
}

type gatedStream struct {
	grpc.ServerStream
	ctx   context.Context
	codec *requestCodec
}

func (s *gatedStream) Context() context.Context { return s.ctx }

func (s *gatedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if decodeErr := s.codec.takeFailure(m); decodeErr != nil {
		return decodeErr
	}
	return err
}
