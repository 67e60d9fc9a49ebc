package sharegroup

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// fakeCluster routes a test cluster's share-group calls: o names every
// group's coordinator, and an instance's Peers call the other instances'
// managers directly, marked forwarded as the transports mark them.
type fakeCluster struct {
	o *owners

	mu    sync.Mutex
	ms    map[string]*Manager
	calls []string // "from->to Method", in call order
	err   error    // when set, every Coordinator answers it
	term  context.Context
}

func newFakeCluster(o *owners) *fakeCluster {
	return &fakeCluster{o: o, ms: map[string]*Manager{}, term: context.Background()}
}

// node is instance self's Coordinators and Peers, for ownerEnv.
func (c *fakeCluster) node(self string) func(*Options) {
	return func(o *Options) {
		n := fakeNode{c: c, self: self}
		o.Coordinators, o.Peers = n, n
	}
}

func (c *fakeCluster) add(self string, e *env) {
	c.mu.Lock()
	c.ms[self] = e.m
	c.mu.Unlock()
}

func (c *fakeCluster) called() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

type fakeNode struct {
	c    *fakeCluster
	self string
}

type fakeHold struct{ term context.Context }

func (h fakeHold) Term() context.Context { return h.term }
func (fakeHold) Release()                {}

func (n fakeNode) Coordinator(_ context.Context, _ string, _ bool) (Coordinator, error) {
	n.c.mu.Lock()
	err, term := n.c.err, n.c.term
	n.c.mu.Unlock()
	if err != nil {
		return Coordinator{}, err
	}
	n.c.o.mu.Lock()
	who := n.c.o.coordinator
	n.c.o.mu.Unlock()
	if who == n.self {
		return Coordinator{Hold: fakeHold{term}}, nil
	}
	return Coordinator{Peer: who}, nil
}

// at records the call and returns the peer's manager and the context it
// receives the call with.
func (n fakeNode) at(ctx context.Context, peer, method string) (*Manager, context.Context) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	call := n.self + "->" + peer + " " + method
	if IsOwnedOnly(ctx) {
		call += " owned-only"
	}
	n.c.calls = append(n.c.calls, call)
	return n.c.ms[peer], broker.WithForwardedBy(ctx, n.self)
}

func (n fakeNode) Others(context.Context) ([]string, error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	var out []string
	for name := range n.c.ms {
		if name != n.self {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (n fakeNode) Heartbeat(ctx context.Context, peer string, req HeartbeatRequest) (HeartbeatResponse, error) {
	m, ctx := n.at(ctx, peer, "Heartbeat")
	return m.Heartbeat(ctx, req)
}

func (n fakeNode) GetConfig(ctx context.Context, peer, groupID string) (GroupConfig, error) {
	m, ctx := n.at(ctx, peer, "GetConfig")
	return m.GetConfig(ctx, groupID)
}

func (n fakeNode) UpdateConfig(ctx context.Context, peer, groupID string, c GroupConfig) (GroupConfig, error) {
	m, ctx := n.at(ctx, peer, "UpdateConfig")
	return m.UpdateConfig(ctx, groupID, c)
}

func (n fakeNode) DescribeGroup(ctx context.Context, peer, groupID string) (GroupDescription, error) {
	m, ctx := n.at(ctx, peer, "DescribeGroup")
	return m.DescribeGroup(ctx, groupID)
}

func (n fakeNode) DescribeOffsets(ctx context.Context, peer, groupID string, topics []TopicPartitions) ([]TopicOffsets, error) {
	m, ctx := n.at(ctx, peer, "DescribeOffsets")
	return m.DescribeOffsets(ctx, groupID, topics)
}

func (n fakeNode) DescribePartitionState(ctx context.Context, peer, groupID string, topics []TopicPartitions, maxRanges int) ([]TopicState, error) {
	m, ctx := n.at(ctx, peer, "DescribePartitionState")
	return m.DescribePartitionState(ctx, groupID, topics, maxRanges)
}

func (n fakeNode) AlterOffsets(ctx context.Context, peer, groupID string, topics []TopicStartOffsets) ([]TopicPartitionResults, error) {
	m, ctx := n.at(ctx, peer, "AlterOffsets")
	return m.AlterOffsets(ctx, groupID, topics)
}

func (n fakeNode) DeleteOffsets(ctx context.Context, peer, groupID string, topics []string) ([]TopicResult, error) {
	m, ctx := n.at(ctx, peer, "DeleteOffsets")
	return m.DeleteOffsets(ctx, groupID, topics)
}

func (n fakeNode) DeleteGroup(ctx context.Context, peer, groupID string) error {
	m, ctx := n.at(ctx, peer, "DeleteGroup")
	return m.DeleteGroup(ctx, groupID)
}

func (n fakeNode) ListGroups(ctx context.Context, peer string, filter GroupState) ([]GroupListing, error) {
	m, ctx := n.at(ctx, peer, "ListGroups")
	return m.ListGroups(ctx, filter)
}

// routedPair is instances A and B of a test cluster over one log store,
// A owning partition 0 of the topics, B partition 1, and A coordinating
// testGroup.
func routedPair(t *testing.T) (a, b *env, c *fakeCluster) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	o := &owners{parts: map[int32]string{0: "A", 1: "B"}, coordinator: "A", config: GroupConfig{AutoOffsetReset: str("earliest")}}
	c = newFakeCluster(o)
	a = ownerEnv(t, store, sharestate.NewMem(), "A", o, c.node("A"))
	b = ownerEnv(t, store, sharestate.NewMem(), "B", o, c.node("B"))
	c.add("A", a)
	c.add("B", b)
	return a, b, c
}

// A call naming a group goes to the group's coordinator, once: the
// instance that received it keeps nothing of the group, and its
// coordinator lists it for every instance.
func TestCallGoesToTheCoordinator(t *testing.T) {
	a, b, c := routedPair(t)
	b.topic("t", 2)
	ctx := context.Background()

	cfg, err := b.m.UpdateConfig(ctx, testGroup, GroupConfig{DeliveryCountLimit: i32(3)})
	require.NoError(t, err)
	assert.Equal(t, int32(3), *cfg.DeliveryCountLimit)
	assert.Equal(t, []string{"B->A UpdateConfig"}, c.called())
	assert.True(t, a.m.HasGroup(testGroup), "created at its coordinator")
	assert.False(t, b.m.HasGroup(testGroup), "not where the call arrived")

	hb, err := b.m.Heartbeat(ctx, HeartbeatRequest{GroupID: testGroup, MemberID: "m1", SubscribedTopicNames: []string{"t"}})
	require.NoError(t, err)
	assert.Equal(t, int32(1), hb.MemberEpoch)
	d, err := b.m.DescribeGroup(ctx, testGroup)
	require.NoError(t, err)
	require.Len(t, d.Members, 1)
	assert.Equal(t, "m1", d.Members[0].MemberID)
	got, err := b.m.GetConfig(ctx, testGroup)
	require.NoError(t, err)
	assert.Equal(t, int32(3), *got.DeliveryCountLimit)

	la, err := a.m.ListGroups(ctx, StateUnknown)
	require.NoError(t, err)
	lb, err := b.m.ListGroups(ctx, StateUnknown)
	require.NoError(t, err)
	assert.Equal(t, []GroupListing{{GroupID: testGroup, State: StateStable}}, la)
	assert.Equal(t, la, lb, "every instance lists every instance's groups")
	assert.Equal(t, []string{"B->A UpdateConfig", "B->A Heartbeat", "B->A DescribeGroup", "B->A GetConfig",
		"A->B ListGroups", "B->A ListGroups"}, c.called(), "one hop each; a forwarded ListGroups lists its own")

	// Served at the coordinator: no hop.
	_, err = a.m.GetConfig(ctx, testGroup)
	require.NoError(t, err)
	assert.Len(t, c.called(), 6)

	// An invalid group ID is answered where the call arrived.
	_, err = b.m.UpdateConfig(ctx, "", GroupConfig{})
	assert.Equal(t, apierr.InvalidRequest, apierr.ReasonOf(err))
	assert.Len(t, c.called(), 6)
}

// A forwarded call that finds its group coordinated elsewhere answers
// NOT_OWNER (retryable) rather than travelling on; so does a call that
// finds nobody coordinating the group, and the Coordinators' own error
// is the call's.
func TestForwardedCallNotCoordinatedHereIsNotOwner(t *testing.T) {
	_, b, c := routedPair(t)
	fwd := broker.WithForwardedBy(context.Background(), "C")

	_, err := b.m.GetConfig(fwd, testGroup)
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err))
	_, err = b.m.Heartbeat(fwd, HeartbeatRequest{GroupID: testGroup, MemberID: "m", SubscribedTopicNames: []string{"t"}})
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err))
	err = b.m.DeleteGroup(fwd, testGroup)
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err))
	assert.Empty(t, c.called(), "nothing forwarded twice")
	_, err = b.m.ListGroups(fwd, StateUnknown)
	require.NoError(t, err)
	assert.Empty(t, c.called(), "a forwarded ListGroups answers for this instance only")

	c.o.mu.Lock()
	c.o.coordinator = "" // nobody
	c.o.mu.Unlock()
	_, err = b.m.GetConfig(context.Background(), testGroup)
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err))

	unreachable := apierr.New(apierr.OwnerUnreachable, "cannot read the leases")
	c.mu.Lock()
	c.err = unreachable
	c.mu.Unlock()
	_, err = b.m.GetConfig(context.Background(), testGroup)
	assert.ErrorIs(t, err, unreachable)
	assert.Empty(t, c.called())
}

// A call running under the group's hold ends when the instance gives the
// group up, and answers NOT_OWNER.
func TestGroupGivenUpDuringTheCall(t *testing.T) {
	term, end := context.WithCancel(context.Background())
	released := 0
	h := funcHold{term: term, release: func() { released++ }}
	started := make(chan struct{})
	go func() { <-started; end() }()
	_, err := underHold(context.Background(), testGroup, h, func(ctx context.Context) (int, error) {
		close(started)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Second):
			return 0, errors.New("the call was not cancelled")
		}
	})
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err))
	assert.Contains(t, err.Error(), "moved to another instance")
	assert.Equal(t, 1, released)
}

type funcHold struct {
	term    context.Context
	release func()
}

func (h funcHold) Term() context.Context { return h.term }
func (h funcHold) Release()              { h.release() }

// The admin calls about share-partitions are answered by the coordinator
// merged with every owner's owned-only answer, partition by partition and
// in request order, whichever instance receives them.
func TestAdminCallsMergeTheOwnersAnswersInRequestOrder(t *testing.T) {
	a, b, c := routedPair(t)
	info := a.topic("t", 2)
	require.NoError(t, a.m.AdoptPartition(info.ID, 0, nil))
	require.NoError(t, b.m.AdoptPartition(info.ID, 1, nil))
	x0, x1 := tp("t", 0), tp("t", 1)
	a.update(GroupConfig{AutoOffsetReset: str("earliest")})
	a.produce("t", 0, 10, 10)
	a.produce("t", 1, 20, 10)
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, a.open("m", x0), x0))
	require.Equal(t, apierr.None, a.ack("m", ackEntry(x0, batch(0, 3, AckAccept))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(0, 19, 1)}, acquired(t, b.open("m", x1), x1))
	require.Equal(t, apierr.None, b.ack("m", ackEntry(x1, batch(0, 5, AckAccept))).Partitions[0].ErrorCode)
	ctx := context.Background()

	req := []TopicPartitions{{Topic: "t", Partitions: []int32{1, 0}}, {Topic: "nope"}, {Topic: "t", Partitions: []int32{1}}}
	want := []TopicOffsets{
		{Topic: "t", Partitions: []PartitionOffsets{{Partition: 1, StartOffset: 6, Lag: 14}, {Partition: 0, StartOffset: 4, Lag: 6}}},
		{Topic: "nope", Partitions: []PartitionOffsets{{Partition: -1, StartOffset: -1, Lag: -1,
			ErrorCode: apierr.UnknownTopicOrPartition, ErrorMessage: "topic does not exist"}}},
		{Topic: "t", Partitions: []PartitionOffsets{{Partition: 1, StartOffset: 6, Lag: 14}}},
	}
	for _, at := range []*env{a, b} {
		got, err := at.m.DescribeOffsets(ctx, testGroup, req)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	all, err := b.m.DescribeOffsets(ctx, testGroup, nil)
	require.NoError(t, err)
	assert.Equal(t, []TopicOffsets{{Topic: "t", Partitions: []PartitionOffsets{
		{Partition: 0, StartOffset: 4, Lag: 6}, {Partition: 1, StartOffset: 6, Lag: 14}}}}, all,
		"no topics: those with state at any owner")
	assert.Equal(t, []string{"A->B DescribeOffsets owned-only", "B->A DescribeOffsets", "A->B DescribeOffsets owned-only",
		"B->A DescribeOffsets", "A->B DescribeOffsets owned-only", "A->B DescribeOffsets owned-only"}, c.called())

	st, err := b.m.DescribePartitionState(ctx, testGroup, []TopicPartitions{{Topic: "t", Partitions: []int32{1, 0}}}, 0)
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Len(t, st[0].Partitions, 2)
	assert.Equal(t, int32(1), st[0].Partitions[0].Partition)
	assert.Equal(t, int64(6), st[0].Partitions[0].StartOffset, "B's share-partition")
	assert.Equal(t, "m", st[0].Partitions[0].Ranges[0].Owner, "the owner names the member")
	assert.Equal(t, int64(4), st[0].Partitions[1].StartOffset, "A's share-partition")

	res, err := b.m.AlterOffsets(ctx, testGroup, []TopicStartOffsets{{Topic: "t", Partitions: []PartitionStartOffset{
		{Partition: 1, StartOffset: 2}, {Partition: 0, StartOffset: 11}, {Partition: 0, StartOffset: 1}}}})
	require.Equal(t, apierr.InvalidRequest, apierr.ReasonOf(err), "a partition twice: %v", res)
	res, err = b.m.AlterOffsets(ctx, testGroup, []TopicStartOffsets{
		{Topic: "t", Partitions: []PartitionStartOffset{{Partition: 1, StartOffset: 2}, {Partition: 0, StartOffset: 11}}},
		{Topic: "nope", Partitions: []PartitionStartOffset{{Partition: 0, StartOffset: 0}}}})
	require.NoError(t, err)
	require.Len(t, res, 2)
	assert.Equal(t, apierr.None, res[0].Partitions[0].ErrorCode, "B's partition, answered by B")
	assert.Equal(t, int32(0), res[0].Partitions[1].Partition)
	assert.Equal(t, apierr.OffsetOutOfRange, res[0].Partitions[1].ErrorCode, "A's partition, answered by A")
	assert.Equal(t, apierr.UnknownTopicOrPartition, res[1].Partitions[0].ErrorCode)
	assert.Equal(t, "spso=2", b.state(x1))

	del, err := b.m.DeleteOffsets(ctx, testGroup, []string{"nope", "t"})
	require.NoError(t, err)
	assert.Equal(t, []TopicResult{{Topic: "nope", ErrorCode: apierr.UnknownTopicOrPartition,
		ErrorMessage: "there is no offset information to delete for this topic"}, {Topic: "t"}}, del)

	require.NoError(t, b.m.DeleteGroup(ctx, testGroup))
	assert.False(t, a.m.HasGroup(testGroup))
	assert.False(t, b.m.HasGroup(testGroup), "its share-partitions at B went too")
	calls := c.called()
	assert.Equal(t, []string{"B->A DescribePartitionState", "A->B DescribePartitionState owned-only",
		"B->A AlterOffsets", "B->A AlterOffsets", "A->B AlterOffsets owned-only",
		"B->A DeleteOffsets", "A->B DeleteOffsets owned-only", "B->A DeleteGroup", "A->B DeleteGroup owned-only"}, calls[6:])
}

// Two owners disagreeing on the shape of the answer (the partitions
// changed meanwhile) make the call retryable.
func TestMergeOwnersRefusesAnswersOfAnotherShape(t *testing.T) {
	local := []TopicPartitionResults{{Topic: "t", Partitions: []PartitionResult{{Partition: 0, ErrorCode: apierr.NotOwner}}}}
	parts := func(t TopicPartitionResults) []PartitionResult { return t.Partitions }
	err := mergeOwners(local, [][]TopicPartitionResults{{}}, parts)
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err))
	err = mergeOwners(local, [][]TopicPartitionResults{{{Topic: "t", Partitions: []PartitionResult{{Partition: 1}}}}}, parts)
	assert.Equal(t, apierr.NotOwner, apierr.ReasonOf(err))
	require.NoError(t, mergeOwners(local, [][]TopicPartitionResults{
		{{Topic: "t", Partitions: []PartitionResult{{Partition: 0, ErrorCode: apierr.NotOwner}}}},
		{{Topic: "t", Partitions: []PartitionResult{{Partition: 0, ErrorCode: apierr.OffsetOutOfRange}}}}}, parts))
	assert.Equal(t, apierr.OffsetOutOfRange, local[0].Partitions[0].ErrorCode, "the owner's entry")

	// An owner refusing the caller the topic says nothing of it.
	local = []TopicPartitionResults{{Topic: "t", Partitions: []PartitionResult{{Partition: 0, ErrorCode: apierr.NotOwner}, {Partition: 1}}}}
	require.NoError(t, mergeOwners(local, [][]TopicPartitionResults{
		{{Topic: "t", Partitions: []PartitionResult{{Partition: -1, ErrorCode: apierr.TopicAuthorizationFailed}}}}}, parts))
	assert.Equal(t, []PartitionResult{{Partition: 0, ErrorCode: apierr.NotOwner}, {Partition: 1}}, local[0].Partitions)
}
