package app

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// The cluster-mode errors the domain passes on reach every transport with
// their reason: gRPC sees the same status as before (UNAVAILABLE with
// sharelog's ErrorInfo), the Kafka listener the reason behind it
// (broker.ReasonOf, which gives its Kafka code) — a peer's answer too.
func TestClusterErrorsKeepTheirReason(t *testing.T) {
	for _, c := range []struct {
		err    error
		reason apierr.Reason
	}{
		{notOwnerErr("group g has no coordinator at the moment; retry"), apierr.NotOwner},
		{ownerUnreachableErr("the owner did not answer"), apierr.OwnerUnreachable},
		{forwardErr("peer:1", grpcapi.Status(apierr.New(apierr.UnknownMemberID, "no member m")).Err()), apierr.UnknownMemberID},
		{forwardErr("peer:1", grpcapi.Status(apierr.New(apierr.NotOwner, "elsewhere")).Err()), apierr.NotOwner},
	} {
		require.Equal(t, c.reason, broker.ReasonOf(c.err), "%v", c.err)
		st, ok := status.FromError(c.err)
		require.True(t, ok)
		want := grpcapi.Status(broker.ErrorOf(c.err))
		require.Equal(t, want.Code(), st.Code())
		require.Equal(t, want.Message(), st.Message())
		require.Equal(t, want.Proto().GetDetails(), st.Proto().GetDetails())
	}
	// A peer that did not answer as an instance does is OWNER_UNREACHABLE.
	err := forwardErr("peer:1", status.Error(codes.Unavailable, "connection refused"))
	require.Equal(t, apierr.OwnerUnreachable, broker.ReasonOf(err))
}

// appliedThenCut is a LogService whose Produce is applied, then the
// connection it came on is cut before the answer leaves: the caller's
// outcome is unknown although the produce took effect.
type appliedThenCut struct {
	sharelogv1.UnimplementedLogServiceServer
	applied chan struct{}
	cut     chan struct{}
}

func (s *appliedThenCut) Produce(context.Context, *sharelogv1.ProduceRequest) (*sharelogv1.ProduceResponse, error) {
	close(s.applied)
	<-s.cut
	return &sharelogv1.ProduceResponse{}, nil
}

// A forwarded call whose connection broke after it was sent is
// OUTCOME_UNKNOWN (it may have been applied, and here it was); one that
// could not be delivered at all is OWNER_UNREACHABLE (docs/errors.md).
// Real gRPC transports, so the classification sees grpc-go's own errors.
func TestForwardOutcomeUnknownVersusUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	svc := &appliedThenCut{applied: make(chan struct{}), cut: make(chan struct{})}
	sharelogv1.RegisterLogServiceServer(srv, svc)
	// The server's connections, so the test can cut them mid-call.
	conns := make(chan net.Conn, 4)
	go func() { _ = srv.Serve(&recordingListener{Listener: lis, conns: conns}) }()
	t.Cleanup(srv.Stop)

	cc, err := newForwardConn(lis.Addr().String(), nil, 1<<20)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := sharelogv1.NewLogServiceClient(cc).Produce(context.Background(), &sharelogv1.ProduceRequest{Topic: "t"})
		done <- err
	}()
	<-svc.applied
	(<-conns).Close() // the answer is lost
	err = <-done
	close(svc.cut)
	require.Error(t, err)
	got := forwardErr(cc.Target(), err)
	require.Equal(t, apierr.OutcomeUnknown, broker.ReasonOf(got), "sent, applied, answer lost: %v (from %v)", got, err)
	require.Equal(t, codes.Unavailable, status.Code(got))

	// Nothing listens: the call cannot be delivered.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := dead.Addr().String()
	require.NoError(t, dead.Close())
	cc2, err := newForwardConn(addr, nil, 1<<20)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc2.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = sharelogv1.NewLogServiceClient(cc2).Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t"})
	require.Error(t, err)
	got = forwardErr(cc2.Target(), err)
	require.Equal(t, apierr.OwnerUnreachable, broker.ReasonOf(got), "never delivered: %v (from %v)", got, err)
}

type recordingListener struct {
	net.Listener
	conns chan net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		select {
		case l.conns <- c:
		default:
		}
	}
	return c, err
}
