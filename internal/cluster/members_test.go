package cluster

import (
	"context"
	"sync"
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

// Kafka node ids: distinct for every instance ID even when allocated at
// the same moment, the same on every later call and from another
// connection (a restart), and an id taken before a crash that kept the
// instance from recording it is found again.
func TestKafkaNodeIDsDistinctAndStable(t *testing.T) {
	prefix := testCluster.Prefix()
	ids := []string{"a", "b", "c", "d", "e"}
	leases := map[string]*Lease{}
	for _, id := range ids {
		leases[id] = openLease(t, prefix, id)
	}
	got := make([]int32, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { got[i], errs[i] = leases[id].KafkaNodeID(context.Background(), id) })
	}
	wg.Wait()
	seen := map[int32]string{}
	for i, id := range ids {
		require.NoError(t, errs[i])
		require.GreaterOrEqual(t, got[i], int32(0))
		require.NotContains(t, seen, got[i], "%s and %s share node id %d", id, seen[got[i]], got[i])
		seen[got[i]] = id
		require.Less(t, got[i], int32(len(ids)), "the smallest free ids")
	}
	for i, id := range ids {
		again, err := openLease(t, prefix, id).KafkaNodeID(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, got[i], again, "%s after a restart", id)
	}
	// f took id 5 and crashed before writing its own key.
	l := openLease(t, prefix, "f")
	_, err := l.kv.Create(context.Background(), kafkaNodePrefix+"5", []byte("f"))
	require.NoError(t, err)
	n, err := l.KafkaNodeID(context.Background(), "f")
	require.NoError(t, err)
	require.Equal(t, int32(5), n)
	n, err = openLease(t, prefix, "g").KafkaNodeID(context.Background(), "g")
	require.NoError(t, err)
	require.Equal(t, int32(6), n)
}

func TestKafkaClusterIDIsTheFirstOffered(t *testing.T) {
	prefix := testCluster.Prefix()
	a, b := openLease(t, prefix, "a"), openLease(t, prefix, "b")
	id, err := a.KafkaClusterID(context.Background(), "first")
	require.NoError(t, err)
	require.Equal(t, "first", id)
	id, err = b.KafkaClusterID(context.Background(), "second")
	require.NoError(t, err)
	require.Equal(t, "first", id)
}
