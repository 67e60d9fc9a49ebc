package edge

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CallLogger logs every finished gRPC call at a level chosen by its status code
// (successes at debug, client errors at info, server faults at error). It
// checks the level before building any field, so that at the default level a
// successful call costs one Enabled check: the generic logging middleware
// built its fields for every call, a measurable share of a small RPC.
type CallLogger struct{ Log *slog.Logger }

func levelFor(code codes.Code) slog.Level {
	switch code {
	case codes.OK, codes.Canceled:
		return slog.LevelDebug
	case codes.Internal, codes.DataLoss, codes.Unknown:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (l CallLogger) finished(ctx context.Context, method string, start time.Time, err error) {
	code := status.Code(err)
	level := levelFor(code)
	if !l.Log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("grpc.method", method),
		slog.String("grpc.code", code.String()),
		slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000),
	}
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", status.Convert(err).Message()))
	}
	l.Log.LogAttrs(ctx, level, "finished call", attrs...)
}

// Unary is the logger as a unary server interceptor.
func (l CallLogger) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	l.finished(ctx, info.FullMethod, start, err)
	return resp, err
}

// Stream is the logger as a stream server interceptor.
func (l CallLogger) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	l.finished(ss.Context(), info.FullMethod, start, err)
	return err
}
