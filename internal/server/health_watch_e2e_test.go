package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sharelog/sharelog/internal/server"
)

// gRPC health needs no credential, and a Watch stays open: without a bound
// one address could hold any number of them (a goroutine and buffers
// each), 20 new ones a second under the probe rate limit. One address
// holds at most server.HealthWatchesPerIP; closing one frees its slot.
func TestHealthWatchesBoundedPerAddress(t *testing.T) {
	t.Parallel()
	s := newStack(t, server.Options{})
	hc := healthpb.NewHealthClient(s.conn)
	cancels := make([]context.CancelFunc, 0, server.HealthWatchesPerIP)
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
	})
	watch := func() (healthpb.Health_WatchClient, context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		return w, cancel, err
	}
	for range server.HealthWatchesPerIP {
		_, cancel, err := watch()
		require.NoError(t, err)
		cancels = append(cancels, cancel)
	}
	_, cancel, err := watch()
	cancel()
	requireReason(t, err, codes.ResourceExhausted, "THROTTLING_QUOTA_EXCEEDED")

	cancels[0]()
	cancels = cancels[1:]
	require.Eventually(t, func() bool {
		_, cancel, err := watch()
		if err != nil {
			cancel()
			return false
		}
		cancels = append(cancels, cancel)
		return true
	}, 5*time.Second, 50*time.Millisecond, "a closed watch frees its slot")
	_, err = hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "Check is not a watch")
}
