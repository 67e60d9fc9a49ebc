package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// In partitioned mode topics are created and deleted by the holder of
// the phase-1 lease: here while this instance serves as it, else the
// holder, else the answers of the phase-1 routing.
func TestTopicController(t *testing.T) {
	holder := cluster.Holder{ID: "b", Addr: "10.0.0.2:9090"}
	forwarded := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcapi.MDForwardedBy, "c"))
	cases := []struct {
		name    string
		ctx     context.Context
		node    clusterNode
		peer    string
		reason  apierr.Reason
		message string
	}{
		{name: "this instance holds the lease", node: clusterNode{role: cluster.Active, active: &activeBackend{}}},
		{name: "a forwarded call, this instance holding the lease", ctx: forwarded, node: clusterNode{role: cluster.Active, active: &activeBackend{}}},
		{name: "another holds it", node: clusterNode{role: cluster.Standby, holder: holder}, peer: holder.Addr},
		{name: "shutting down", node: clusterNode{role: cluster.Active, active: &activeBackend{}, closing: true}, reason: apierr.NotOwner,
			message: "shutting down"},
		{name: "taking over", node: clusterNode{role: cluster.Active}, reason: apierr.NotOwner, message: "taking over"},
		{name: "cut from NATS", node: clusterNode{role: cluster.Disconnected, holder: holder}, reason: apierr.OwnerUnreachable},
		{name: "no holder yet", node: clusterNode{role: cluster.Standby}, reason: apierr.NotOwner, message: "no instance holds the lease"},
		{name: "one hop only", ctx: forwarded, node: clusterNode{role: cluster.Standby, holder: holder}, reason: apierr.NotOwner,
			message: "the lease names b"},
	}
	for i := range cases {
		tc := &cases[i] // a clusterNode holds a lock: not copied
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			peer, err := topicController{&tc.node}.Controller(ctx)
			if tc.reason == "" {
				assert.NoError(t, err)
				assert.Equal(t, tc.peer, peer)
				return
			}
			assert.Equal(t, tc.reason, statusReason(err))
			assert.Contains(t, err.Error(), tc.message)
			assert.Empty(t, peer)
		})
	}
}

// statusReason is the sharelog reason of a gRPC status error.
func statusReason(err error) apierr.Reason {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == apierr.Domain {
			return apierr.Reason(info.Reason)
		}
	}
	return ""
}
