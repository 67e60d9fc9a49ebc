package jslog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// An append to a stream that cannot commit (two of its three servers
// down: no quorum, no leader) fails within WriteTimeout with a storage
// error — not at the call's own, longer deadline — and Unwritable names
// the partition until an append succeeds again (docs/cluster.md,
// --nats-write-timeout). A cluster of its own: the package's is shared.
func TestAppendFailsFastWithoutQuorum(t *testing.T) {
	js, err := jstest.Start(jstest.Options{SyncAlways: true})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	nc := js.Connect(t)
	s := openStore(t, nc, Options{Prefix: js.Prefix(), Replicas: 3, WriteTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	_, err = s.CreateTopic(ctx, "t", 1, logstore.TopicConfig{})
	require.NoError(t, err)
	rec := []logstore.Record{{Value: []byte("v")}}
	_, err = s.Append(ctx, "t", 0, rec)
	require.NoError(t, err)
	require.Empty(t, s.Unwritable())

	js.Stop(1)
	js.Stop(2)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	start := time.Now()
	_, err = s.Append(cctx, "t", 0, rec)
	took := time.Since(start)
	cancel()
	require.Error(t, err)
	require.True(t, errors.Is(err, logstore.ErrStorage), "a storage error (retryable): %v", err)
	require.Less(t, took, 3*time.Second, "failed after %v, bounded by WriteTimeout, not the call's 20 s", took)
	un := s.Unwritable()
	require.Len(t, un, 1)
	require.Contains(t, un[0].Err.Error(), "t-0")

	require.NoError(t, js.Restart(1))
	require.NoError(t, js.Restart(2))
	require.Eventually(t, func() bool {
		_, err := s.Append(ctx, "t", 0, rec)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "appends resume once the stream has a leader")
	require.Empty(t, s.Unwritable(), "written again: no longer listed")
}
