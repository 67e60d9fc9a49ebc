package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sharelog/sharelog/internal/app"
)

// gRPC health needs no credential, and a Watch stays open: without a bound
// one address could hold any number of them (a goroutine and buffers
// each), 20 new ones a second under the probe rate limit. One address
// holds at most app.HealthWatchesPerIP without a credential; closing
// one frees its slot; callers with a valid token are not counted.
func TestHealthWatchesBoundedPerAddress(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("ops s3cret\n"), 0o600))
	s := newStack(t, app.Options{}, func(c *app.Config) {
		c.AuthTokensFile = tokens
		c.HealthProbesPerSec = 0 // the rate limit is another test's
	})
	hc := healthpb.NewHealthClient(s.conn)
	authed := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	cancels := make([]context.CancelFunc, 0, app.HealthWatchesPerIP)
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
	for range app.HealthWatchesPerIP {
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

	for range 3 {
		ctx, cancel := context.WithCancel(authed)
		cancels = append(cancels, cancel)
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = w.Recv()
		require.NoError(t, err, "a caller with a credential is not counted")
	}
}
