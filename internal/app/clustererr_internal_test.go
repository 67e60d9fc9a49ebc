package app

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
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
