package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMembersHeartbeatsExpireAndLeave(t *testing.T) {
	prefix := testCluster.Prefix()
	a, b := openLease(t, prefix, "a"), openLease(t, prefix, "b")
	ctx := context.Background()
	ms, err := a.Members(ctx)
	require.NoError(t, err)
	require.Empty(t, ms)

	ma := Member{ID: "host-a:9090", Addr: "a:9090", HTTPAddr: "a:8080"}
	mb := Member{ID: "b", Addr: "b:9090"}
	require.NoError(t, a.Heartbeat(ctx, ma))
	require.NoError(t, b.Heartbeat(ctx, mb))
	require.NoError(t, a.Heartbeat(ctx, ma)) // a renewal is not a second member
	ms, err = b.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []Member{mb, ma}, ms)

	// A clean leave is seen at once.
	require.NoError(t, b.Leave(ctx, mb.ID))
	ms, err = a.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []Member{ma}, ms)

	// A heartbeat not renewed expires after the TTL (1 s here).
	require.Eventually(t, func() bool {
		ms, err := b.Members(ctx)
		return err == nil && len(ms) == 0
	}, 5*time.Second, 100*time.Millisecond)
}

func TestMembersRunHeartbeatDeletesOnStop(t *testing.T) {
	prefix := testCluster.Prefix()
	a := openLease(t, prefix, "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	m := Member{ID: "a", Addr: "a:9090"}
	go func() { a.RunHeartbeat(ctx, m); close(done) }()
	require.Eventually(t, func() bool {
		ms, err := a.Members(context.Background())
		return err == nil && len(ms) == 1 && ms[0] == m
	}, 5*time.Second, 20*time.Millisecond)
	cancel()
	<-done
	ms, err := a.Members(context.Background())
	require.NoError(t, err)
	require.Empty(t, ms)
}
