package sharegroup

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/principal"
)

var (
	alice = principal.WithUser(context.Background(), "User:alice")
	bob   = principal.WithUser(context.Background(), "User:bob")
)

// A member id belongs to the principal that first used it: another
// principal's heartbeat, ShareFetch or ShareAcknowledge with it fails as if
// the member and its session did not exist, at the owner's epoch, at 0 and
// at -1, and changes nothing the owner holds.
func TestMemberIDBoundToPrincipal(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.produce("t", 0, 5, 10)
	x := tp("t", 0)

	hb := func(ctx context.Context, epoch int32) (HeartbeatResponse, error) {
		return e.m.Heartbeat(ctx, HeartbeatRequest{GroupID: testGroup, MemberID: "m", MemberEpoch: epoch, SubscribedTopicNames: []string{"t"}})
	}
	joined, err := hb(alice, 0)
	require.NoError(t, err)
	open, err := e.m.ShareFetch(alice, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 0, Partitions: entries(x)})
	require.NoError(t, err)
	require.Equal(t, []AcquiredRange{rng(0, 4, 1)}, acquired(t, open, x))
	before := e.state(x)

	for _, epoch := range []int32{joined.MemberEpoch, 0, -1} {
		_, err := hb(bob, epoch)
		ae := requireReason(t, err, apierr.UnknownMemberID)
		assert.Equal(t, `member "m" is not in share group "g"`, ae.Message, "the message of an absent member")
		assert.Empty(t, ae.Metadata, "no expected_epoch")
	}
	for _, epoch := range []int32{1, 0, -1} {
		req := FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: epoch}
		switch epoch {
		case 0:
			req.Partitions = entries(x)
		case 1:
			req.Partitions = []PartitionEntry{ackEntry(x, batch(0, 4, AckReject))}
		}
		_, err := e.m.ShareFetch(bob, req)
		ae := requireReason(t, err, apierr.ShareSessionNotFound)
		assert.Empty(t, ae.Metadata, "no expected_epoch")
	}
	for _, epoch := range []int32{1, -1} {
		_, err := e.m.ShareAcknowledge(bob, AckRequest{GroupID: testGroup, MemberID: "m", Epoch: epoch,
			Partitions: []PartitionEntry{ackEntry(x, batch(0, 4, AckReject))}})
		requireReason(t, err, apierr.ShareSessionNotFound)
	}
	assert.Equal(t, before, e.state(x), "the owner's records untouched")
	d := e.describe()
	require.Len(t, d.Members, 1)
	assert.Equal(t, joined.MemberEpoch, d.Members[0].MemberEpoch)

	// The owner carries on at the epochs it had.
	again, err := hb(alice, joined.MemberEpoch)
	require.NoError(t, err)
	assert.Equal(t, joined.MemberEpoch, again.MemberEpoch)
	acked, err := e.m.ShareAcknowledge(alice, AckRequest{GroupID: testGroup, MemberID: "m", Epoch: 1,
		Partitions: []PartitionEntry{ackEntry(x, batch(0, 4, AckAccept))}})
	require.NoError(t, err)
	assert.Equal(t, apierr.None, acked.Partitions[0].ErrorCode)
	assert.Equal(t, int64(5), e.spso(x))

	// Released when the member left and its session ended: then the id is
	// anyone's.
	_, err = hb(alice, -1)
	require.NoError(t, err)
	_, err = hb(bob, 0)
	requireReason(t, err, apierr.UnknownMemberID) // alice's session still holds it
	_, err = e.m.ShareFetch(alice, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: -1})
	require.NoError(t, err)
	_, err = hb(bob, 0)
	require.NoError(t, err, "a released id can be taken")
	_, err = hb(alice, 0)
	requireReason(t, err, apierr.UnknownMemberID)
}

// A session binds the id too: a member id first used by a share session
// cannot be joined by another principal; within one principal an epoch-0
// ShareFetch replaces the session as in Kafka.
func TestSessionBindsMemberID(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.produce("t", 0, 3, 10)
	x := tp("t", 0)

	first, err := e.m.ShareFetch(bob, FetchRequest{GroupID: testGroup, MemberID: "s", Epoch: 0, Partitions: entries(x)})
	require.NoError(t, err)
	require.Equal(t, []AcquiredRange{rng(0, 2, 1)}, acquired(t, first, x))
	_, err = e.m.Heartbeat(alice, HeartbeatRequest{GroupID: testGroup, MemberID: "s", MemberEpoch: 0, SubscribedTopicNames: []string{"t"}})
	requireReason(t, err, apierr.UnknownMemberID)
	assert.Empty(t, e.describe().Members, "the refused join added no member")

	// Bob replaces his own session: its records are released and
	// delivered again to the new one.
	second, err := e.m.ShareFetch(bob, FetchRequest{GroupID: testGroup, MemberID: "s", Epoch: 0, Partitions: entries(x)})
	require.NoError(t, err)
	assert.Equal(t, []AcquiredRange{rng(0, 2, 1)}, acquired(t, second, x))
	_, err = e.m.Heartbeat(bob, HeartbeatRequest{GroupID: testGroup, MemberID: "s", MemberEpoch: 0, SubscribedTopicNames: []string{"t"}})
	require.NoError(t, err, "the owner joins with its session's id")
}
