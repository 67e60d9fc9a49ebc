package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/principal"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// mdForwardedBy marks a call forwarded by another instance (its instance
// ID). A forwarded call is never forwarded again.
const mdForwardedBy = grpcapi.MDForwardedBy

// method is what a cluster node needs to serve or forward one RPC without
// knowing its types: the request and response message types and the
// generated handler, called with the current backend's implementation.
type method struct {
	service string
	in, out protoreflect.MessageType
	unary   func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error)
	stream  grpc.StreamHandler
	desc    grpc.StreamDesc
}

// methods maps every routed full method name (/pkg.Service/Method).
var methods = func() map[string]method {
	m := map[string]method{}
	for _, sd := range []grpc.ServiceDesc{sharelogv1.LogService_ServiceDesc, sharelogv1.ShareGroupService_ServiceDesc,
		sharelogv1.ChangeStreamService_ServiceDesc, sharelogv1.ConsumerGroupService_ServiceDesc} {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		if err != nil {
			panic(fmt.Sprintf("service %s is not registered: %v", sd.ServiceName, err))
		}
		svc := d.(protoreflect.ServiceDescriptor)
		types := func(name string) (protoreflect.MessageType, protoreflect.MessageType) {
			md := svc.Methods().ByName(protoreflect.Name(name))
			in, err1 := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
			out, err2 := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
			if err := errors.Join(err1, err2); err != nil {
				panic(fmt.Sprintf("%s/%s: %v", sd.ServiceName, name, err))
			}
			return in, out
		}
		for _, md := range sd.Methods {
			in, out := types(md.MethodName)
			m["/"+sd.ServiceName+"/"+md.MethodName] = method{service: sd.ServiceName, in: in, out: out, unary: md.Handler}
		}
		for _, st := range sd.Streams {
			in, out := types(st.StreamName)
			m["/"+sd.ServiceName+"/"+st.StreamName] = method{service: sd.ServiceName, in: in, out: out, stream: st.Handler,
				desc: grpc.StreamDesc{StreamName: st.StreamName, ServerStreams: st.ServerStreams, ClientStreams: st.ClientStreams}}
		}
	}
	return m
}()

// impl is b's implementation of service.
func (b *activeBackend) impl(svc string) any { return implOf(b.backend, svc) }

// implOf is b's implementation of service.
func implOf(b *backend, svc string) any {
	switch svc {
	case sharelogv1.LogService_ServiceDesc.ServiceName:
		return b.logSvc
	case sharelogv1.ShareGroupService_ServiceDesc.ServiceName:
		return b.shareSv
	case sharelogv1.ConsumerGroupService_ServiceDesc.ServiceName:
		return b.cgSvc
	}
	return b.change
}

// withCluster appends the cluster node's routing to the unary chain (last,
// after authentication, so a standby refuses what the active instance
// would), after the mark of a forwarded call for the log domain. Without
// a cluster node the chain is unchanged.
func (s *Server) withCluster(chain []grpc.UnaryServerInterceptor) []grpc.UnaryServerInterceptor {
	switch {
	case s.cluster == nil:
		return chain
	case s.cluster.part != nil:
		return append(chain, grpcapi.MarkForwarded, s.cluster.punary)
	}
	return append(chain, grpcapi.MarkForwarded, s.cluster.unary)
}

// withClusterStream is withCluster for streaming calls.
func (s *Server) withClusterStream(chain []grpc.StreamServerInterceptor) []grpc.StreamServerInterceptor {
	switch {
	case s.cluster == nil:
		return chain
	case s.cluster.part != nil:
		return append(chain, grpcapi.MarkForwardedStream, s.cluster.pstream)
	}
	return append(chain, grpcapi.MarkForwardedStream, s.cluster.stream)
}

func (n *clusterNode) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, ok := methods[info.FullMethod]
	if !ok || m.unary == nil {
		return handler(ctx, req)
	}
	b, cc, err := n.route(ctx)
	if err != nil {
		return nil, err
	}
	if b != nil {
		defer b.calls.Done()
		return m.unary(b.impl(m.service), ctx, func(v any) error {
			proto.Merge(v.(proto.Message), req.(proto.Message))
			return nil
		}, nil)
	}
	return n.forwardUnary(ctx, cc, info.FullMethod, m, req)
}

// forwardUnary sends a unary call on to another instance over cc.
func (n *clusterNode) forwardUnary(ctx context.Context, cc *grpc.ClientConn, fullMethod string, m method, req any) (any, error) {
	out := m.out.New().Interface()
	var hdr, trl metadata.MD
	err := cc.Invoke(n.outgoing(ctx), fullMethod, req, out, grpc.Header(&hdr), grpc.Trailer(&trl))
	if len(hdr) > 0 {
		_ = grpc.SetHeader(ctx, hdr)
	}
	if len(trl) > 0 {
		grpc.SetTrailer(ctx, trl)
	}
	if err != nil {
		return nil, forwardErr(cc.Target(), err)
	}
	return out, nil
}

func (n *clusterNode) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	m, ok := methods[info.FullMethod]
	if !ok || m.stream == nil {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	b, cc, err := n.route(ctx)
	if err != nil {
		return err
	}
	if b != nil {
		defer b.calls.Done()
		return m.stream(b.impl(m.service), ss)
	}
	return n.forwardStream(ctx, cc, info.FullMethod, m, ss, nil)
}

// forwardStream relays a streaming call to another instance over cc; first,
// when not nil, is a request already received from ss, sent ahead of the
// rest.
func (n *clusterNode) forwardStream(ctx context.Context, cc *grpc.ClientConn, fullMethod string, m method, ss grpc.ServerStream, first proto.Message) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := cc.NewStream(n.outgoing(ctx), &m.desc, fullMethod)
	if err != nil {
		return forwardErr(cc.Target(), err)
	}
	if first != nil {
		if err := cs.SendMsg(first); err != nil && !errors.Is(err, io.EOF) {
			return forwardErr(cc.Target(), err)
		}
	}
	// Requests: client → this instance → active instance.
	go func() {
		for {
			in := m.in.New().Interface()
			if err := ss.RecvMsg(in); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := cs.SendMsg(in); err != nil {
				return // RecvMsg below sees the stream's error
			}
		}
	}()
	// Responses: active instance → this instance → client.
	hdr, err := cs.Header()
	if err == nil && len(hdr) > 0 {
		_ = ss.SendHeader(hdr)
	}
	for {
		out := m.out.New().Interface()
		if err := cs.RecvMsg(out); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return forwardErr(cc.Target(), err)
		}
		if err := ss.SendMsg(out); err != nil {
			return err
		}
	}
}

// outgoing is ctx with the caller's metadata (authorization included),
// this instance's forwarding mark and the caller's principal, for the call
// to the active instance.
func (n *clusterNode) outgoing(ctx context.Context) context.Context {
	in, incoming := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	if !incoming {
		// A call this instance makes on its own behalf (a dead-letter
		// copy appended at another partition's owner), not a caller's
		// call passed on: it presents the cluster's instance secret.
		n.mu.RLock()
		secret := n.secret
		n.mu.RUnlock()
		if secret != "" {
			out.Set("authorization", "Bearer "+secret)
		}
	}
	for k, v := range in {
		switch {
		case strings.HasPrefix(k, ":"), strings.HasPrefix(k, "grpc-"), k == "content-type", k == "user-agent", k == "te",
			k == mdForwardedBy, k == mdOwnedOnly:
			continue
		}
		out[k] = v
	}
	out.Set(mdForwardedBy, n.s.cfg.Cluster.instanceID(n.s.GRPCAddr()))
	// The forwarding connection presents this instance's certificate, so
	// the active instance would see that, not the caller's: name the
	// caller (a token in the metadata still wins there).
	if user := principal.User(ctx); user != principal.Anonymous {
		out.Set(edge.MDForwardedPrincipal, user)
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// forwardedFrom is the instance that forwarded this call, or "".
func forwardedFrom(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, mdForwardedBy); len(v) > 0 {
		return v[0]
	}
	return ""
}

// forwardErr passes the owner's own errors (the active instance's, a
// partition owner's) through unchanged and turns a failure to reach it
// (UNAVAILABLE without a sharelog reason) into OWNER_UNREACHABLE.
func forwardErr(target string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return ownerUnreachableErr(fmt.Sprintf("forwarding to the owner at %s failed: %v", target, err))
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == apierr.Domain {
			// The peer's answer, with its reason for every transport.
			if e, ok := grpcapi.FromStatus(err).(*apierr.Error); ok {
				return clusterError{e: e, st: st}
			}
			return err
		}
	}
	if st.Code() == codes.Unavailable {
		if undelivered(st.Message()) {
			return ownerUnreachableErr(fmt.Sprintf("the owner at %s could not be reached: %s; nothing was applied, retry", target, st.Message()))
		}
		return outcomeUnknownErr(fmt.Sprintf("the call was sent to the owner at %s but its answer was lost: %s; it may have been applied", target, st.Message()))
	}
	return err
}

// undelivered reports whether a forwarded call's UNAVAILABLE (without a
// sharelog reason: the transport's) says the call never reached the
// owner: no connection could be made. grpc-go retries by itself the
// calls a connection refused before they were sent (a GOAWAY, a closing
// transport), so any other UNAVAILABLE may have been delivered and
// applied (docs/errors.md OUTCOME_UNKNOWN).
func undelivered(msg string) bool {
	for _, s := range []string{"while dialing", "connection refused", "no such host", "produced zero addresses", "network is unreachable"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// newForwardConn dials the active instance at addr. A connection that
// cannot be made fails the call at once (no wait for readiness), so a dead
// owner gives OWNER_UNREACHABLE rather than a hang.
func newForwardConn(addr string, tlsCfg *tls.Config, maxRequestBytes int, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	return grpc.NewClient(addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second,
			Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxRequestBytes+4096), grpc.MaxCallRecvMsgSize(1<<30)),
	}, extra...)...)
}

// notOwnerErr and ownerUnreachableErr are the retryable cluster-mode errors
// (UNAVAILABLE; docs/errors.md), as gRPC statuses so that they keep their
// reason wherever in the interceptor chain they are returned.
func outcomeUnknownErr(msg string) error {
	return newClusterError(apierr.New(apierr.OutcomeUnknown, "%s", msg))
}

func notOwnerErr(msg string) error {
	return newClusterError(apierr.New(apierr.NotOwner, "%s", msg))
}

func ownerUnreachableErr(msg string) error {
	return newClusterError(apierr.New(apierr.OwnerUnreachable, "%s", msg))
}

// clusterError is a cluster-mode error the domain passes on to any
// transport: a gRPC status to the gRPC interceptors (and to status.Code
// and status.FromError), and the *apierr.Error it was made from to
// errors.As, through which the Kafka listener finds its reason
// (NOT_OWNER: NOT_LEADER_OR_FOLLOWER or NOT_COORDINATOR).
type clusterError struct {
	e  *apierr.Error
	st *status.Status
}

func newClusterError(e *apierr.Error) error {
	return clusterError{e: e, st: grpcapi.Status(e)}
}

func (c clusterError) Error() string              { return c.st.Err().Error() }
func (c clusterError) GRPCStatus() *status.Status { return c.st }
func (c clusterError) Unwrap() error              { return c.e }
