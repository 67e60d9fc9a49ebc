package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLiveViewFollowsTheBucket: LiveMembers and LiveOwners follow
// heartbeats, leaves, expiries (JetStream's markers, not the view's own
// backstop of twice the TTL) and item leases, as Members and Owners read
// them.
func TestLiveViewFollowsTheBucket(t *testing.T) {
	prefix := testCluster.Prefix()
	a, b := openLease(t, prefix, "a"), openLease(t, prefix, "b")
	ctx := context.Background()
	ms, err := a.LiveMembers(ctx)
	require.NoError(t, err)
	require.Empty(t, ms)
	require.Eventually(t, func() bool { _, _, ok := a.view.snapshot(); return ok }, 5*time.Second, 10*time.Millisecond)

	ma, mb := Member{ID: "a", Addr: "a:9090"}, Member{ID: "b", Addr: "b:9090", Mode: "partitioned"}
	require.NoError(t, a.Heartbeat(ctx, ma))
	require.NoError(t, b.Heartbeat(ctx, mb))
	live := func(want ...Member) func() bool {
		return func() bool {
			ms, err := a.LiveMembers(ctx)
			if err != nil || len(ms) != len(want) {
				return false
			}
			for i := range ms {
				if ms[i] != want[i] {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, live(ma, mb), time.Second, 5*time.Millisecond)
	require.NoError(t, b.Leave(ctx, mb.ID))
	require.Eventually(t, live(ma), time.Second, 5*time.Millisecond)
	// a stops heartbeating: its key expires after the TTL (1 s), and the
	// marker JetStream places takes it out of the view before the
	// backstop (2 s after the last heartbeat) would.
	start := time.Now()
	require.Eventually(t, live(), 5*time.Second, 5*time.Millisecond)
	t.Logf("expired heartbeat left the view after %v", time.Since(start))
	require.Less(t, time.Since(start), 2*time.Second-100*time.Millisecond, "left by the backstop, not by a marker")

	// Item leases: b takes two, a sees them with their epochs; a handover
	// removes one.
	items := []string{PartitionItem("t1", 0), GroupItem("g1")}
	bi := b.Items(mb, ItemHooks{})
	require.NoError(t, b.Heartbeat(ctx, mb))
	require.NoError(t, bi.Step(ctx, items))
	require.Len(t, bi.Held(), 2)
	require.Eventually(t, func() bool {
		owners, err := a.LiveOwners(ctx)
		if err != nil || len(owners) != 2 {
			return false
		}
		for item, e := range bi.Held() {
			if owners[item].Owner.ID != "b" || owners[item].Epoch != e {
				return false
			}
		}
		return true
	}, time.Second, 5*time.Millisecond)
	fresh, _, err := a.Owners(ctx)
	require.NoError(t, err)
	cached, err := a.LiveOwners(ctx)
	require.NoError(t, err)
	require.Equal(t, fresh, cached)
	bi.handover(ctx, GroupItem("g1"))
	require.Eventually(t, func() bool {
		owners, err := a.LiveOwners(ctx)
		_, has := owners[GroupItem("g1")]
		return err == nil && len(owners) == 1 && !has
	}, time.Second, 5*time.Millisecond)
}
