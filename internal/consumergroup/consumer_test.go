package consumergroup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
)

func counts(m map[string]int32) func(context.Context, string) (int32, error) {
	return func(_ context.Context, t string) (int32, error) {
		n, ok := m[t]
		if !ok {
			return 0, apierr.New(apierr.UnknownTopicOrPartition, "no topic %s", t)
		}
		return n, nil
	}
}

func str(s string) *string { return &s }

// hb is one consumer member as a client runs it: it sends what it owns
// and adopts each assignment it is given.
type hb struct {
	t     *testing.T
	c     *Coordinator
	id    string
	epoch int32
	owned []TopicPartitions
	inst  *string
}

func (h *hb) join(topics ...string) {
	h.t.Helper()
	r, err := h.c.ConsumerHeartbeat(context.Background(), ConsumerHeartbeatRequest{Group: "g", MemberID: h.id, InstanceID: h.inst,
		RebalanceTimeout: 10 * time.Second, SubscribedTopics: topics, Owned: []TopicPartitions{}})
	require.NoError(h.t, err)
	h.id, h.epoch = r.MemberID, r.MemberEpoch
	require.NotNil(h.t, r.Assignment, "a join answers the assignment")
	h.owned = r.Assignment
}

func (h *hb) beat() error {
	h.t.Helper()
	owned := append([]TopicPartitions{}, h.owned...)
	r, err := h.c.ConsumerHeartbeat(context.Background(), ConsumerHeartbeatRequest{Group: "g", MemberID: h.id, MemberEpoch: h.epoch,
		RebalanceTimeout: -1, Owned: owned})
	if err != nil {
		return err
	}
	h.epoch = r.MemberEpoch
	if r.Assignment != nil {
		h.owned = r.Assignment
	}
	return nil
}

func ownedSet(hs ...*hb) (map[string]string, error) {
	out := map[string]string{}
	for _, h := range hs {
		for _, t := range h.owned {
			for _, p := range t.Partitions {
				k := fmt.Sprintf("%s-%d", t.Topic, p)
				if o, ok := out[k]; ok {
					return nil, fmt.Errorf("%s owned by %s and %s", k, o, h.id)
				}
				out[k] = h.id
			}
		}
	}
	return out, nil
}

func total(h *hb) int {
	n := 0
	for _, t := range h.owned {
		n += len(t.Partitions)
	}
	return n
}

// TestConsumerProtocolRebalance: a second member joins a group whose first
// member owns every partition; the first revokes before the second gets
// anything, no partition is ever owned twice, and they end balanced at the
// same epoch. The first leaving hands everything back.
func TestConsumerProtocolRebalance(t *testing.T) {
	c := open(t, Options{Partitions: counts(map[string]int32{"t": 6})})
	a := &hb{t: t, c: c, id: "a"}
	a.join("t")
	assert.Equal(t, 6, total(a))
	assert.Equal(t, int32(1), a.epoch)

	b := &hb{t: t, c: c, id: "b"}
	b.join("t")
	assert.Equal(t, 0, total(b), "b gets nothing a still owns")
	for range 4 {
		require.NoError(t, a.beat())
		_, err := ownedSet(a, b)
		require.NoError(t, err)
		require.NoError(t, b.beat())
		_, err = ownedSet(a, b)
		require.NoError(t, err)
	}
	assert.Equal(t, 3, total(a))
	assert.Equal(t, 3, total(b))
	assert.Equal(t, a.epoch, b.epoch)
	d, err := c.ConsumerDescribe(context.Background(), "g")
	require.NoError(t, err)
	assert.Equal(t, "Stable", d.State)
	assert.Len(t, d.Members, 2)

	_, err = c.ConsumerHeartbeat(context.Background(), ConsumerHeartbeatRequest{Group: "g", MemberID: "a", MemberEpoch: -1, RebalanceTimeout: -1})
	require.NoError(t, err)
	require.NoError(t, b.beat())
	assert.Equal(t, 6, total(b))

	// A classic join is refused while consumer members are there.
	_, err = c.Join(context.Background(), joinReq(""))
	assert.Equal(t, apierr.GroupIDNotFound, reason(err))
}

func TestConsumerProtocolEpochsAndCommits(t *testing.T) {
	c := open(t, Options{Partitions: counts(map[string]int32{"t": 2})})
	a := &hb{t: t, c: c, id: "a"}
	a.join("t")
	ctx := context.Background()
	_, err := c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "a", MemberEpoch: a.epoch + 5, RebalanceTimeout: -1})
	assert.Equal(t, apierr.FencedMemberEpoch, reason(err))
	_, err = c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "nobody", MemberEpoch: 3, RebalanceTimeout: -1})
	assert.Equal(t, apierr.UnknownMemberID, reason(err))
	_, err = c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "x", RebalanceTimeout: time.Second,
		SubscribedTopics: []string{"t"}, Owned: []TopicPartitions{}, ServerAssignor: str("sticky")})
	assert.Equal(t, apierr.UnsupportedAssignor, reason(err))
	_, err = c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "x", RebalanceTimeout: time.Second,
		SubscribedRegex: str("("), Owned: []TopicPartitions{}})
	assert.Equal(t, apierr.InvalidRegularExpression, reason(err))

	commit := func(epoch int32) error {
		_, err := c.Commit(ctx, CommitRequest{Group: "g", MemberID: "a", Generation: epoch,
			Topics: []CommitTopic{{Topic: "t", Partitions: []CommitPartition{{Partition: 0, Offset: 5, LeaderEpoch: -1}}}}})
		return err
	}
	assert.Equal(t, apierr.StaleMemberEpoch, reason(commit(a.epoch-1)))
	require.NoError(t, commit(a.epoch))
	// A simple commit (no member) is refused while the group has members.
	_, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: -1,
		Topics: []CommitTopic{{Topic: "t", Partitions: []CommitPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}})
	assert.Equal(t, apierr.UnknownMemberID, reason(err))
	assert.Equal(t, apierr.NonEmptyGroup, reason(c.Delete(ctx, "g")))
	ls, err := c.List(ctx)
	require.NoError(t, err)
	require.Len(t, ls, 1)
	assert.Equal(t, "consumer", ls[0].Type)
}

// TestConsumerProtocolStaticRejoin: a static member that leaves with epoch
// -2 keeps its partitions for its instance's next member; a second member
// with the same instance id while the first is live is refused.
func TestConsumerProtocolStaticRejoin(t *testing.T) {
	c := open(t, Options{Partitions: counts(map[string]int32{"t": 4})})
	ctx := context.Background()
	a := &hb{t: t, c: c, id: "a1", inst: str("i-a")}
	a.join("t")
	b := &hb{t: t, c: c, id: "b", inst: str("i-b")}
	b.join("t")
	for range 3 {
		require.NoError(t, a.beat())
		require.NoError(t, b.beat())
	}
	before := fmt.Sprint(a.owned)
	require.Equal(t, 2, total(a))

	_, err := c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "a2", InstanceID: str("i-a"),
		RebalanceTimeout: time.Second, SubscribedTopics: []string{"t"}, Owned: []TopicPartitions{}})
	assert.Equal(t, apierr.UnreleasedInstanceID, reason(err))

	r, err := c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "a1", InstanceID: str("i-a"), MemberEpoch: -2, RebalanceTimeout: -1})
	require.NoError(t, err)
	assert.Equal(t, int32(-2), r.MemberEpoch)

	a2 := &hb{t: t, c: c, id: "a2", inst: str("i-a")}
	a2.join("t")
	for range 3 {
		require.NoError(t, b.beat())
		require.NoError(t, a2.beat())
	}
	assert.Equal(t, before, fmt.Sprint(a2.owned), "the instance's new member has its partitions back")
	_, err = ownedSet(a2, b)
	require.NoError(t, err)
}

// TestConsumerProtocolRegexAndNewPartitions: a regex subscription takes
// every matching topic, whole names only, and a topic that grows is
// reassigned.
func TestConsumerProtocolRegexAndNewPartitions(t *testing.T) {
	topics := map[string]int32{"orders": 1, "orders-v2": 1, "xorders": 1}
	c := open(t, Options{Partitions: counts(topics), Topics: func(context.Context) (map[string]int32, error) {
		out := map[string]int32{}
		for k, v := range topics {
			out[k] = v
		}
		return out, nil
	}})
	ctx := context.Background()
	r, err := c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "a", RebalanceTimeout: time.Second,
		SubscribedRegex: str("orders.*"), Owned: []TopicPartitions{}})
	require.NoError(t, err)
	assert.Equal(t, []TopicPartitions{{"orders", []int32{0}}, {"orders-v2", []int32{0}}}, r.Assignment)
	topics["orders"] = 3
	r, err = c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "a", MemberEpoch: r.MemberEpoch,
		RebalanceTimeout: -1, Owned: r.Assignment})
	require.NoError(t, err)
	assert.Equal(t, []TopicPartitions{{"orders", []int32{0, 1, 2}}, {"orders-v2", []int32{0}}}, r.Assignment)
}

func TestAssignRange(t *testing.T) {
	ms := []assignMember{{id: "b", sortBy: "b", topics: map[string]bool{"t": true}}, {id: "a", sortBy: "a", topics: map[string]bool{"t": true}}}
	got := assignRange(ms, map[string]int32{"t": 5})
	assert.Equal(t, []int32{0, 1, 2}, got["a"]["t"])
	assert.Equal(t, []int32{3, 4}, got["b"]["t"])
}
