package consumergroup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
)

// Two members: each is given its id (MEMBER_ID_REQUIRED), both end up in
// one generation, the leader gets both members' metadata and its
// assignment reaches the follower through SyncGroup.
func TestJoinSyncTwoMembers(t *testing.T) {
	c := open(t, Options{})
	ctx := context.Background()
	a := memberID(t, c, joinReq(""))
	b := memberID(t, c, joinReq(""))
	assert.NotEqual(t, a, b)

	ja := joinAsync(c, joinReq(a))
	pending(t, ja, 50*time.Millisecond) // b is still to come
	jb := joinAsync(c, joinReq(b))
	ra, rb := await(t, ja, 5*time.Second), await(t, jb, 5*time.Second)
	require.NoError(t, ra.err)
	require.NoError(t, rb.err)
	assert.Equal(t, int32(1), ra.resp.Generation)
	assert.Equal(t, ra.resp.Generation, rb.resp.Generation)
	assert.Equal(t, "range", ra.resp.Protocol)
	assert.Equal(t, a, ra.resp.LeaderID, "the earliest member leads")
	assert.Len(t, ra.resp.Members, 2)
	assert.Empty(t, rb.resp.Members, "only the leader gets the metadata")
	assert.Equal(t, []byte(b+"/range"), ra.resp.Members[1].Metadata)

	// The follower's sync waits for the leader's.
	fs := make(chan SyncResponse, 1)
	go func() {
		r, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: 1, MemberID: b})
		assert.NoError(t, err)
		fs <- r
	}()
	time.Sleep(30 * time.Millisecond)
	d, _ := c.Describe(ctx, "g")
	assert.Equal(t, CompletingRebalance, d.State)
	lr, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: 1, MemberID: a,
		Assignments: []Assignment{{a, []byte("A")}, {b, []byte("B")}}})
	require.NoError(t, err)
	assert.Equal(t, []byte("A"), lr.Assignment)
	select {
	case r := <-fs:
		assert.Equal(t, []byte("B"), r.Assignment)
	case <-time.After(5 * time.Second):
		t.Fatal("the follower's SyncGroup was not answered")
	}
	d, _ = c.Describe(ctx, "g")
	assert.Equal(t, Stable, d.State)
	assert.Equal(t, "range", d.Protocol)
	require.NoError(t, c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: b}))
	assert.Equal(t, apierr.IllegalGeneration, reason(c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 0, MemberID: b})))
	assert.Equal(t, apierr.UnknownMemberID, reason(c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: "nobody"})))
	assert.Equal(t, apierr.IllegalGeneration, reason(errOf(c.Sync(ctx, SyncRequest{Group: "g", Generation: 7, MemberID: b}))))
}

func errOf[T any](_ T, err error) error { return err }

// Stable group, a new member joins: the others' heartbeats answer
// REBALANCE_IN_PROGRESS, they join again, and the new generation has all.
func TestNewMemberRebalancesStableGroup(t *testing.T) {
	c := open(t, Options{})
	ctx := context.Background()
	a := stableAlone(t, c)
	b := memberID(t, c, joinReq(""))
	jb := joinAsync(c, joinReq(b))
	eventually(t, func() bool {
		return reason(c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: a})) == apierr.RebalanceInProgress
	}, "a hears of the rebalance")
	ra := await(t, joinAsync(c, joinReq(a)), 5*time.Second)
	rb := await(t, jb, 5*time.Second)
	require.NoError(t, ra.err)
	require.NoError(t, rb.err)
	assert.Equal(t, int32(2), ra.resp.Generation)
	assert.Equal(t, a, ra.resp.LeaderID, "the leader stays")
	assert.Len(t, ra.resp.Members, 2)
}

// stableAlone makes one member's group Stable at generation 1.
func stableAlone(t *testing.T, c *Coordinator) string {
	t.Helper()
	a := memberID(t, c, joinReq(""))
	r := await(t, joinAsync(c, joinReq(a)), 5*time.Second)
	require.NoError(t, r.err)
	_, err := c.Sync(context.Background(), SyncRequest{Group: "g", Generation: r.resp.Generation, MemberID: a,
		Assignments: []Assignment{{a, []byte("all")}}})
	require.NoError(t, err)
	return a
}

// A member that stops heartbeating is removed after its session timeout
// and the group rebalances without it.
func TestSessionExpiry(t *testing.T) {
	c := open(t, Options{})
	ctx := context.Background()
	short := func(r JoinRequest) JoinRequest { r.SessionTimeout = 300 * time.Millisecond; return r }
	a := memberID(t, c, short(joinReq("")))
	b := memberID(t, c, short(joinReq("")))
	ja, jb := joinAsync(c, short(joinReq(a))), joinAsync(c, short(joinReq(b)))
	ra, rb := await(t, ja, 5*time.Second), await(t, jb, 5*time.Second)
	require.NoError(t, ra.err)
	require.NoError(t, rb.err)
	go func() { _, _ = c.Sync(ctx, SyncRequest{Group: "g", Generation: 1, MemberID: b}) }()
	_, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: 1, MemberID: a})
	require.NoError(t, err)

	// Only a heartbeats; b's session ends.
	stop := time.Now().Add(20 * time.Second)
	for time.Now().Before(stop) {
		err := c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: a})
		if reason(err) == apierr.RebalanceInProgress {
			break
		}
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
	}
	r := await(t, joinAsync(c, short(joinReq(a))), 5*time.Second)
	require.NoError(t, r.err)
	assert.Equal(t, int32(2), r.resp.Generation)
	require.Len(t, r.resp.Members, 1, "b was removed")
	assert.Equal(t, a, r.resp.Members[0].MemberID)
	assert.Equal(t, apierr.UnknownMemberID, reason(c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: b})))
}

// A slow member that keeps heartbeating but does not join again within
// the rebalance timeout is removed when it passes; the others go on.
func TestRebalanceTimeoutRemovesSlowMember(t *testing.T) {
	c := open(t, Options{})
	ctx := context.Background()
	slow := func(r JoinRequest) JoinRequest { r.RebalanceTimeout = 400 * time.Millisecond; return r }
	a := memberID(t, c, slow(joinReq("")))
	r := await(t, joinAsync(c, slow(joinReq(a))), 5*time.Second)
	require.NoError(t, r.err)
	_, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: 1, MemberID: a})
	require.NoError(t, err)

	b := memberID(t, c, slow(joinReq("")))
	start := time.Now()
	jb := joinAsync(c, slow(joinReq(b)))
	hb := make(chan struct{})
	go func() { // a heartbeats (REBALANCE_IN_PROGRESS) but never joins
		defer close(hb)
		for time.Since(start) < 2*time.Second {
			_ = c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: a})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	rb := await(t, jb, 10*time.Second)
	require.NoError(t, rb.err)
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "b waited for the rebalance timeout")
	assert.Equal(t, b, rb.resp.LeaderID, "a was removed, b leads")
	assert.Len(t, rb.resp.Members, 1)
	<-hb
	assert.Equal(t, apierr.UnknownMemberID, reason(c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: a})))
}

// A static member that comes back with its instance id and no member id
// replaces itself in a stable group without a rebalance; the old member id
// is fenced.
func TestStaticMemberReplacesWithoutRebalance(t *testing.T) {
	c := open(t, Options{})
	ctx := context.Background()
	inst := "instance-1"
	static := func(r JoinRequest) JoinRequest { r.InstanceID = &inst; return r }
	r := await(t, joinAsync(c, static(joinReq(""))), 5*time.Second)
	require.NoError(t, r.err, "a static member needs no MEMBER_ID_REQUIRED")
	old := r.resp.MemberID
	_, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: 1, MemberID: old, InstanceID: &inst,
		Assignments: []Assignment{{old, []byte("mine")}}})
	require.NoError(t, err)

	rejoin := static(joinReq(""))
	rejoin.Protocols[0].Metadata = []byte("restarted: other metadata, same protocol")
	again, err := c.Join(ctx, rejoin)
	require.NoError(t, err)
	assert.NotEqual(t, old, again.MemberID, "a new member id")
	assert.Equal(t, int32(1), again.Generation, "no rebalance")
	assert.True(t, again.SkipAssignment, "the leader keeps the assignment")
	d, _ := c.Describe(ctx, "g")
	assert.Equal(t, Stable, d.State)
	require.Len(t, d.Members, 1)
	assert.Equal(t, []byte("mine"), d.Members[0].Assignment, "the assignment carries over")

	sr, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: 1, MemberID: again.MemberID, InstanceID: &inst})
	require.NoError(t, err)
	assert.Equal(t, []byte("mine"), sr.Assignment)
	assert.Equal(t, apierr.FencedInstanceID, reason(c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: old, InstanceID: &inst})))
	require.NoError(t, c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: again.MemberID, InstanceID: &inst}))

	// Back with a protocol that changes the vote: a rebalance.
	other := static(joinReq("", "roundrobin", "range")) // roundrobin now wins the vote
	ch := joinAsync(c, other)
	changed := await(t, ch, 5*time.Second)
	require.NoError(t, changed.err)
	assert.Equal(t, int32(2), changed.resp.Generation, "the protocol changed: a new generation")
	assert.Equal(t, "roundrobin", changed.resp.Protocol)
	again = changed.resp
	_, err = c.Sync(ctx, SyncRequest{Group: "g", Generation: 2, MemberID: again.MemberID, InstanceID: &inst})
	require.NoError(t, err)

	// Leave by instance id.
	res, err := c.Leave(ctx, "g", []LeavingMember{{InstanceID: &inst}, {MemberID: "nobody"}})
	require.NoError(t, err)
	assert.NoError(t, res[0].Err)
	assert.Equal(t, again.MemberID, res[0].MemberID)
	assert.Equal(t, apierr.UnknownMemberID, reason(res[1].Err))
	d, _ = c.Describe(ctx, "g")
	assert.Equal(t, Empty, d.State)
}

// A static member replaced while its JoinGroup waits is answered
// FENCED_INSTANCE_ID.
func TestStaticMemberFencedWhileWaiting(t *testing.T) {
	c := open(t, Options{})
	ctx := context.Background()
	inst := "i"
	static := func(r JoinRequest) JoinRequest { r.InstanceID = &inst; return r }
	a := stableAlone(t, c) // a dynamic member keeps the rebalance open
	_ = a
	first := joinAsync(c, static(joinReq("")))
	pending(t, first, 50*time.Millisecond)
	second := joinAsync(c, static(joinReq("")))
	f := await(t, first, 5*time.Second)
	assert.Equal(t, apierr.FencedInstanceID, reason(f.err), "%v", f.err)
	pending(t, second, 20*time.Millisecond)
	_, err := c.Leave(ctx, "g", []LeavingMember{{MemberID: a}})
	require.NoError(t, err)
	s := await(t, second, 5*time.Second)
	require.NoError(t, s.err)
	assert.Equal(t, s.resp.MemberID, s.resp.LeaderID)
}

// The first rebalance of an empty group waits the initial delay, so that
// members joining within it land in the first generation together.
func TestInitialRebalanceDelay(t *testing.T) {
	c := open(t, Options{InitialRebalanceDelay: 300 * time.Millisecond})
	start := time.Now()
	a := memberID(t, c, joinReq(""))
	ja := joinAsync(c, joinReq(a))
	time.Sleep(100 * time.Millisecond)
	b := memberID(t, c, joinReq(""))
	jb := joinAsync(c, joinReq(b))
	ra, rb := await(t, ja, 10*time.Second), await(t, jb, 10*time.Second)
	require.NoError(t, ra.err)
	require.NoError(t, rb.err)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	assert.Equal(t, int32(1), ra.resp.Generation, "one rebalance for both")
	assert.Len(t, ra.resp.Members, 2)
}

// Protocols: the vote, and a member sharing none with the group.
func TestProtocolSelectionAndInconsistency(t *testing.T) {
	c := open(t, Options{})
	a := memberID(t, c, joinReq("", "roundrobin", "range"))
	b := memberID(t, c, joinReq("", "range", "roundrobin"))
	x := memberID(t, c, joinReq("", "range"))
	ja, jb, jx := joinAsync(c, joinReq(a, "roundrobin", "range")), joinAsync(c, joinReq(b, "range", "roundrobin")), joinAsync(c, joinReq(x, "range"))
	r := await(t, ja, 5*time.Second)
	require.NoError(t, r.err)
	assert.Equal(t, "range", r.resp.Protocol, "the only protocol all support")
	await(t, jb, 5*time.Second)
	await(t, jx, 5*time.Second)

	_, err := c.Join(context.Background(), joinReq("", "sticky"))
	assert.Equal(t, apierr.InconsistentGroupProtocol, reason(err))
	other := joinReq("")
	other.ProtocolType = "connect"
	_, err = c.Join(context.Background(), other)
	assert.Equal(t, apierr.InconsistentGroupProtocol, reason(err))
	short := joinReq("")
	short.SessionTimeout = 0
	_, err = c.Join(context.Background(), short)
	assert.Equal(t, apierr.InvalidSessionTimeout, reason(err))
}

// Leaving during a rebalance completes it for the others.
func TestLeaveDuringRebalance(t *testing.T) {
	c := open(t, Options{})
	ctx := context.Background()
	a := stableAlone(t, c)
	b := memberID(t, c, joinReq(""))
	jb := joinAsync(c, joinReq(b))
	pending(t, jb, 50*time.Millisecond)
	res, err := c.Leave(ctx, "g", []LeavingMember{{MemberID: a}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	r := await(t, jb, 5*time.Second)
	require.NoError(t, r.err)
	assert.Equal(t, b, r.resp.LeaderID)
	assert.Equal(t, int32(2), r.resp.Generation)
}

// A member that joined but never sends SyncGroup is removed after the
// rebalance timeout, and the group rebalances without it.
func TestPendingSyncTimeout(t *testing.T) {
	c := open(t, Options{})
	ctx := context.Background()
	fast := func(r JoinRequest) JoinRequest { r.RebalanceTimeout = 300 * time.Millisecond; return r }
	a := memberID(t, c, fast(joinReq("")))
	b := memberID(t, c, fast(joinReq("")))
	ja, jb := joinAsync(c, fast(joinReq(a))), joinAsync(c, fast(joinReq(b)))
	require.NoError(t, await(t, ja, 5*time.Second).err)
	require.NoError(t, await(t, jb, 5*time.Second).err)
	_, err := c.Sync(ctx, SyncRequest{Group: "g", Generation: 1, MemberID: a})
	require.NoError(t, err) // b never syncs
	eventually(t, func() bool {
		return reason(c.Heartbeat(ctx, HeartbeatRequest{Group: "g", Generation: 1, MemberID: a})) == apierr.RebalanceInProgress
	}, "the group rebalances without b")
	r := await(t, joinAsync(c, fast(joinReq(a))), 5*time.Second)
	require.NoError(t, r.err)
	assert.Len(t, r.resp.Members, 1)
}
