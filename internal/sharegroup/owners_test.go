package sharegroup

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// owners is a test cluster's placement: who owns each partition of topic
// "t" and who coordinates testGroup.
type owners struct {
	mu          sync.Mutex
	parts       map[int32]string
	coordinator string
	config      GroupConfig // the coordinator's explicit config, for followers
}

func (o *owners) set(part int32, who string) {
	o.mu.Lock()
	o.parts[part] = who
	o.mu.Unlock()
}

// ownerEnv opens a manager for instance self over store, placed by o.
func ownerEnv(t *testing.T, store logstore.Store, st sharestate.Store, self string, o *owners, mut ...func(*Options)) *env {
	t.Helper()
	opts := testOpts{Options: Options{Logger: slog.New(slog.DiscardHandler),
		Owner: func(topic string, part int32) string {
			o.mu.Lock()
			defer o.mu.Unlock()
			if who := o.parts[part]; who != self {
				return "instance " + who
			}
			return ""
		},
		Coordinates: func(string) bool {
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.coordinator == self
		},
		FollowedConfig: func(string) (GroupConfig, bool) {
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.config, true
		},
	}}
	for _, f := range mut {
		f(&opts.Options)
	}
	m, err := Open(store, st, opts.Options)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return &env{t: t, store: store, m: m, opts: opts, epochs: map[string]int32{}}
}

// partitionStates is what a partition-scoped store adopting topic's
// partition reads: each group's state of that one partition, as st holds
// it durably.
func partitionStates(t *testing.T, st sharestate.Store, topicID string, part int32) []sharestate.GroupState {
	t.Helper()
	var out []sharestate.GroupState
	rec := sharestate.OpenMem(st.(*sharestate.Mem).Medium().Crash()).Recovered()
	for _, g := range rec.Groups {
		for _, p := range g.Partitions {
			if p.TopicID == topicID && p.Partition == part {
				out = append(out, sharestate.GroupState{ID: g.ID, Partitions: []sharestate.PartitionState{p}})
			}
		}
	}
	return out
}

// Each instance serves the share-partitions of the partitions it owns and
// answers NOT_LEADER_OR_FOLLOWER, naming the owner, for the others, in
// ShareFetch and ShareAcknowledge alike; an instance that does not
// coordinate the group follows its config and writes none of the group's
// own state.
func TestOwnersServeTheirPartitions(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	o := &owners{parts: map[int32]string{0: "A", 1: "B"}, coordinator: "A", config: GroupConfig{DeliveryCountLimit: i32(3)}}
	stB := &recordingState{Store: sharestate.NewMem()}
	a, b := ownerEnv(t, store, sharestate.NewMem(), "A", o), ownerEnv(t, store, stB, "B", o)
	info := a.topic("t", 2)
	require.NoError(t, a.m.AdoptPartition(info.ID, 0, nil))
	require.NoError(t, b.m.AdoptPartition(info.ID, 1, nil))
	x0, x1 := tp("t", 0), tp("t", 1)
	a.update(GroupConfig{DeliveryCountLimit: i32(3)})

	resp := a.open("m", x0, x1)
	require.Equal(t, apierr.NotOwner, part(t, resp, x1).ErrorCode)
	require.Contains(t, part(t, resp, x1).ErrorMessage, "instance B")
	require.Equal(t, apierr.None, part(t, resp, x0).ErrorCode)
	resp = b.open("m", x0, x1)
	require.Equal(t, apierr.NotOwner, part(t, resp, x0).ErrorCode)
	require.Contains(t, part(t, resp, x0).ErrorMessage, "instance A")
	require.Equal(t, apierr.None, part(t, resp, x1).ErrorCode)

	a.produce("t", 0, 10, 10)
	a.produce("t", 1, 20, 10)
	resp = a.fetch("m", FetchRequest{})
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, resp, x0))
	require.False(t, hasPart(resp, x1), "a partition served elsewhere is not in the session")
	resp = b.fetch("m", FetchRequest{})
	require.Equal(t, []AcquiredRange{rng(0, 19, 1)}, acquired(t, resp, x1))
	require.False(t, hasPart(resp, x0), "a partition served elsewhere is not in the session")

	// Acknowledgements go to the owner; elsewhere they are refused.
	ack := a.ack("m", ackEntry(x1, batch(0, 19, AckAccept)))
	require.Equal(t, apierr.NotOwner, ack.Partitions[0].ErrorCode)
	ack = b.ack("m", ackEntry(x1, batch(0, 19, AckAccept)))
	require.Equal(t, apierr.None, ack.Partitions[0].ErrorCode)
	require.Equal(t, "spso=20", b.state(x1))

	// B follows the coordinator's config and writes nothing of the group's own.
	cfg, err := b.m.GetConfig(context.Background(), testGroup)
	require.NoError(t, err)
	require.Equal(t, int32(3), *cfg.DeliveryCountLimit)
	b.m.FollowConfig(testGroup, GroupConfig{DeliveryCountLimit: i32(5)})
	cfg, err = b.m.GetConfig(context.Background(), testGroup)
	require.NoError(t, err)
	require.Equal(t, int32(5), *cfg.DeliveryCountLimit)
	a.m.FollowConfig(testGroup, GroupConfig{DeliveryCountLimit: i32(7)})
	cfg, err = a.m.GetConfig(context.Background(), testGroup)
	require.NoError(t, err)
	require.Equal(t, int32(3), *cfg.DeliveryCountLimit, "the coordinator's own config is not followed")
	stB.mu.Lock()
	for _, e := range stB.written {
		require.NotEqual(t, sharestate.KindGroup, e.Kind, "a follower wrote the group's entry")
		require.Equal(t, int32(1), e.Partition, "B wrote state of a partition it does not own")
	}
	stB.mu.Unlock()
	la, err := a.m.ListGroups(context.Background(), StateUnknown)
	require.NoError(t, err)
	require.Len(t, la, 1)
	lb, err := b.m.ListGroups(context.Background(), StateUnknown)
	require.NoError(t, err)
	require.Empty(t, lb, "only the coordinator lists the group")
}

// A partition that moves keeps every acknowledgement: the old owner
// releases it (writing nothing), its sessions report NOT_LEADER_OR_FOLLOWER
// once and forget it, a fetch waiting on it returns at once, and the new
// owner adopts the durable state and delivers only what was not
// acknowledged.
func TestPartitionMovesBetweenOwners(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	o := &owners{parts: map[int32]string{0: "A"}, coordinator: "A"}
	stA := sharestate.NewMem()
	a, b := ownerEnv(t, store, stA, "A", o), ownerEnv(t, store, sharestate.NewMem(), "B", o)
	info := a.topic("t", 1)
	require.NoError(t, a.m.AdoptPartition(info.ID, 0, nil))
	x := tp("t", 0)
	a.open("m", x)
	a.produce("t", 0, 10, 10)
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, a.fetch("m", FetchRequest{}), x))
	ack := a.ack("m", ackEntry(x, batch(0, 4, AckAccept)))
	require.Equal(t, apierr.None, ack.Partitions[0].ErrorCode)

	// A second member waits on the partition when it moves.
	a.open("w", x)
	waiting := make(chan FetchResponse, 1)
	go func() {
		resp, err := a.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "w", Epoch: a.next("w"), MaxWaitMs: 30000})
		assert.NoError(t, err)
		waiting <- resp
	}()
	time.Sleep(100 * time.Millisecond) // let it wait (a slow machine only makes the test weaker)

	o.set(0, "B")
	a.m.ReleasePartition(info.ID, 0, "instance B")
	select {
	case resp := <-waiting:
		require.Equal(t, apierr.NotOwner, part(t, resp, x).ErrorCode)
		require.Contains(t, part(t, resp, x).ErrorMessage, "instance B")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting fetch did not return when its partition moved")
	}

	resp := a.fetch("m", FetchRequest{})
	require.Equal(t, apierr.NotOwner, part(t, resp, x).ErrorCode)
	require.False(t, hasPart(a.fetch("m", FetchRequest{}), x), "reported once, then gone from the session")
	ack = a.ack("m", ackEntry(x, batch(5, 9, AckAccept)))
	require.Equal(t, apierr.NotOwner, ack.Partitions[0].ErrorCode, "an acknowledgement after the move is refused")

	states := partitionStates(t, stA, info.ID, 0)
	require.Len(t, states, 1)
	require.Error(t, b.m.AdoptPartition(info.ID, 0, append(states, sharestate.GroupState{ID: "other"})),
		"a state that is not of exactly the partition fails the adoption")
	require.NoError(t, b.m.AdoptPartition(info.ID, 0, states), "and leaves nothing behind: adopted again")
	require.Error(t, b.m.AdoptPartition(info.ID, 0, states), "adopting a served partition")
	require.Equal(t, []AcquiredRange{rng(5, 9, 1)}, acquired(t, b.open("n", x), x))
}

// The group's coordination moves without touching its share-partitions:
// the old coordinator keeps serving the partitions it owns, to the
// sessions it holds, as a follower; the new one takes the group's config
// and epoch.
func TestCoordinationMovesKeepSessions(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	o := &owners{parts: map[int32]string{0: "A"}, coordinator: "A"}
	a, b := ownerEnv(t, store, sharestate.NewMem(), "A", o), ownerEnv(t, store, sharestate.NewMem(), "B", o)
	info := a.topic("t", 1)
	require.NoError(t, a.m.AdoptPartition(info.ID, 0, nil))
	x := tp("t", 0)
	a.update(GroupConfig{DeliveryCountLimit: i32(4)})
	a.open("m", x)
	a.produce("t", 0, 10, 10)
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, a.fetch("m", FetchRequest{}), x))

	o.mu.Lock()
	o.coordinator, o.config = "B", GroupConfig{DeliveryCountLimit: i32(4)}
	o.mu.Unlock()
	a.m.ReleaseGroup(testGroup)
	require.NoError(t, b.m.AdoptGroup(&sharestate.GroupState{ID: testGroup, Config: sharestate.GroupConfig{DeliveryCountLimit: i32(4)}, GroupEpoch: 3}))

	ack := a.ack("m", ackEntry(x, batch(0, 9, AckAccept)))
	require.Equal(t, apierr.None, ack.Partitions[0].ErrorCode, "the session outlives the coordination")
	require.Equal(t, "spso=10", a.state(x))
	la, err := a.m.ListGroups(context.Background(), StateUnknown)
	require.NoError(t, err)
	require.Empty(t, la)
	lb, err := b.m.ListGroups(context.Background(), StateUnknown)
	require.NoError(t, err)
	require.Len(t, lb, 1)
	cfg, err := b.m.GetConfig(context.Background(), testGroup)
	require.NoError(t, err)
	require.Equal(t, int32(4), *cfg.DeliveryCountLimit)
	require.Error(t, b.m.AdoptGroup(&sharestate.GroupState{ID: testGroup, Partitions: []sharestate.PartitionState{{TopicID: info.ID}}}),
		"a coordinator adopts no share-partition in owner mode")
}

// The admin calls as the owners answer them for the coordinator
// (OwnedOnly): only the partitions served here, NOT_LEADER_OR_FOLLOWER for
// the others, a group not live here answered as one with no state; an
// owned-only delete drops the share-partitions served here, durably.
func TestOwnedOnlyAdminCalls(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	o := &owners{parts: map[int32]string{0: "A", 1: "B"}, coordinator: "A", config: GroupConfig{AutoOffsetReset: str("earliest")}}
	stB := &recordingState{Store: sharestate.NewMem()}
	a, b := ownerEnv(t, store, sharestate.NewMem(), "A", o), ownerEnv(t, store, stB, "B", o)
	info := a.topic("t", 2)
	require.NoError(t, a.m.AdoptPartition(info.ID, 0, nil))
	require.NoError(t, b.m.AdoptPartition(info.ID, 1, nil))
	x0, x1 := tp("t", 0), tp("t", 1)
	ctx := OwnedOnly(context.Background())

	// No group on B yet: answered as a group without state.
	offs, err := b.m.DescribeOffsets(ctx, testGroup, []TopicPartitions{{Topic: "t"}})
	require.NoError(t, err)
	require.Equal(t, []PartitionOffsets{
		{Partition: 0, StartOffset: -1, Lag: -1, ErrorCode: apierr.NotOwner, ErrorMessage: notHere("instance A")},
		{Partition: 1, StartOffset: -1, Lag: -1}}, offs[0].Partitions)
	_, err = b.m.DescribeOffsets(context.Background(), testGroup, nil)
	require.Error(t, err, "without OwnedOnly a group not live here does not exist")
	all, err := b.m.DescribeOffsets(ctx, testGroup, nil)
	require.NoError(t, err)
	require.Empty(t, all, "no topic with state here")

	a.update(GroupConfig{AutoOffsetReset: str("earliest")})
	a.produce("t", 1, 10, 10)
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, b.open("m", x0, x1), x1), "the followed config: earliest")
	require.Equal(t, apierr.None, b.ack("m", ackEntry(x1, batch(0, 3, AckAccept))).Partitions[0].ErrorCode)
	offs, err = b.m.DescribeOffsets(ctx, testGroup, nil)
	require.NoError(t, err)
	require.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{
		{Partition: 0, StartOffset: -1, Lag: -1, ErrorCode: apierr.NotOwner, ErrorMessage: notHere("instance A")},
		{Partition: 1, StartOffset: 4, Lag: 6}}}}, offs)

	// The coordinator asks its peers after its checks, under the group's
	// lock: a failing peer fails the call, which changes nothing here.
	a.produce("t", 0, 5, 10)
	require.NotEmpty(t, acquired(t, a.open("n", x0), x0))
	asked := 0
	failing := func(context.Context) error { asked++; return errors.New("peer b did not answer") }
	require.ErrorContains(t, a.m.deleteGroup(context.Background(), testGroup, failing), "peer b did not answer")
	require.Equal(t, 1, asked)
	require.True(t, a.m.HasGroup(testGroup))

	// B's part of the deletion: its share-partition goes, durably.
	stB.mu.Lock()
	stB.written = nil
	stB.mu.Unlock()
	require.NoError(t, b.m.DeleteGroup(ctx, testGroup))
	require.False(t, b.m.HasGroup(testGroup))
	stB.mu.Lock()
	require.Len(t, stB.written, 1)
	require.Equal(t, sharestate.KindPartDelete, stB.written[0].Kind)
	require.Equal(t, int32(1), stB.written[0].Partition)
	stB.mu.Unlock()
	require.NoError(t, b.m.DeleteGroup(ctx, testGroup), "nothing left here: nothing to do")

	peers := func(context.Context) error { asked++; return nil }
	require.NoError(t, a.m.deleteGroup(context.Background(), testGroup, peers))
	require.Equal(t, 2, asked)
	require.False(t, a.m.HasGroup(testGroup))
}

// A partition whose lease is lost and taken back by the same instance
// (a renewal late under load) while a session holds it: the session
// reports NOT_LEADER_OR_FOLLOWER once and forgets the dropped
// share-partition; naming the partition again serves it, from its durable
// state, in the same session.
func TestPartitionServedHereAgainKeepsTheSession(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	o := &owners{parts: map[int32]string{0: "A"}, coordinator: "A"}
	stA := sharestate.NewMem()
	a := ownerEnv(t, store, stA, "A", o)
	info := a.topic("t", 1)
	require.NoError(t, a.m.AdoptPartition(info.ID, 0, nil))
	x := tp("t", 0)
	a.open("m", x)
	a.produce("t", 0, 10, 10)
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, a.fetch("m", FetchRequest{}), x))
	ack := a.ack("m", ackEntry(x, batch(0, 4, AckAccept)))
	require.Equal(t, apierr.None, ack.Partitions[0].ErrorCode)

	// The lease is lost (no owner known), then taken back here.
	a.m.ReleasePartition(info.ID, 0, "another instance")
	states := partitionStates(t, stA, info.ID, 0)
	require.NoError(t, a.m.AdoptPartition(info.ID, 0, states))

	resp := a.fetch("m", FetchRequest{})
	require.Equal(t, apierr.NotOwner, part(t, resp, x).ErrorCode, "the dropped share-partition is reported once")
	require.False(t, hasPart(a.fetch("m", FetchRequest{}), x), "then gone from the session")
	resp = a.fetch("m", FetchRequest{Partitions: []PartitionEntry{{TopicPartition: x}}})
	require.Equal(t, apierr.None, part(t, resp, x).ErrorCode)
	require.Equal(t, []AcquiredRange{rng(5, 9, 1)}, acquired(t, resp, x), "named again: served from the durable state (acquisitions are not durable)")
}
