package consumergroup

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

func partitions(ctx context.Context, topic string) (int32, error) {
	if topic == "t" {
		return 2, nil
	}
	return 0, apierr.New(apierr.UnknownTopicOrPartition, "no topic %q", topic)
}

func commitTopic(offsets ...int64) []CommitTopic {
	ct := CommitTopic{Topic: "t"}
	for p, o := range offsets {
		ct.Partitions = append(ct.Partitions, CommitPartition{Partition: int32(p), Offset: o, LeaderEpoch: -1, Metadata: "md"})
	}
	return []CommitTopic{ct}
}

// Simple commits (generation -1, no member) are allowed while the group
// is empty; a commit with a generation needs the member and generation;
// per-partition errors leave the other partitions committed.
func TestCommitRules(t *testing.T) {
	c := open(t, Options{Partitions: partitions})
	ctx := context.Background()

	_, err := c.Commit(ctx, CommitRequest{Group: "g", Generation: 3, MemberID: "m", Topics: commitTopic(1)})
	assert.Equal(t, apierr.IllegalGeneration, reason(err), "unknown group, old version")
	_, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: 3, MemberID: "m", Topics: commitTopic(1), UnknownGroupNotFound: true})
	assert.Equal(t, apierr.GroupIDNotFound, reason(err), "unknown group, v9+")
	assert.False(t, c.Has("g"), "a refused commit creates no group")

	res, err := c.Commit(ctx, CommitRequest{Group: "g", Generation: -1, Topics: append(commitTopic(5, 7),
		CommitTopic{Topic: "nope", Partitions: []CommitPartition{{Partition: 0, Offset: 1}}},
		CommitTopic{Topic: "t", Partitions: []CommitPartition{{Partition: 9, Offset: 1}, {Partition: 0, Offset: 6, Metadata: string(make([]byte, 5000))}}})})
	require.NoError(t, err)
	assert.NoError(t, res[0].Partitions[0].Err)
	assert.NoError(t, res[0].Partitions[1].Err)
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(res[1].Partitions[0].Err))
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(res[2].Partitions[0].Err))
	assert.Equal(t, apierr.OffsetMetadataTooLarge, reason(res[2].Partitions[1].Err))

	got, err := c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}, {Topic: "x", Partitions: []int32{0}}})
	require.NoError(t, err)
	assert.Equal(t, []TopicOffsets{
		{Topic: "t", Partitions: []CommittedOffset{{Partition: 0, Offset: 5, LeaderEpoch: -1, Metadata: "md"}, {Partition: 1, Offset: 7, LeaderEpoch: -1, Metadata: "md"}}},
		{Topic: "x", Partitions: []CommittedOffset{{Partition: 0, Offset: -1, LeaderEpoch: -1}}},
	}, got)
	all, err := c.Fetch(ctx, "g", nil)
	require.NoError(t, err)
	require.Len(t, all, 1)
	none, err := c.Fetch(ctx, "unknown", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	require.NoError(t, err)
	assert.Equal(t, int64(-1), none[0].Partitions[0].Offset)

	// With a member: simple commits are refused, the member's pass.
	a := stableAlone(t, c)
	_, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: -1, Topics: commitTopic(9)})
	assert.Equal(t, apierr.UnknownMemberID, reason(err))
	_, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: 0, MemberID: a, Topics: commitTopic(9)})
	assert.Equal(t, apierr.IllegalGeneration, reason(err))
	_, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: 1, MemberID: "x", Topics: commitTopic(9)})
	assert.Equal(t, apierr.UnknownMemberID, reason(err))
	res, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: 1, MemberID: a, Topics: commitTopic(10)})
	require.NoError(t, err)
	require.NoError(t, res[0].Partitions[0].Err)

	// During CompletingRebalance commits wait for the sync.
	b := memberID(t, c, joinReq(""))
	jb := joinAsync(c, joinReq(b))
	ja := joinAsync(c, joinReq(a))
	require.NoError(t, await(t, ja, 5*time.Second).err)
	require.NoError(t, await(t, jb, 5*time.Second).err)
	_, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: 2, MemberID: a, Topics: commitTopic(11)})
	assert.Equal(t, apierr.RebalanceInProgress, reason(err))

	// DeleteGroups refuses a group with members; OffsetDelete refuses the
	// subscribed topics of a consumer group with members.
	assert.Equal(t, apierr.NonEmptyGroup, reason(c.Delete(ctx, "g")))
	assert.Equal(t, apierr.GroupIDNotFound, reason(c.Delete(ctx, "nope")))
}

func TestDeleteOffsets(t *testing.T) {
	c := open(t, Options{Partitions: partitions})
	ctx := context.Background()
	_, err := c.Commit(ctx, CommitRequest{Group: "g", Generation: -1, Topics: commitTopic(1, 2)})
	require.NoError(t, err)
	_, err = c.DeleteOffsets(ctx, "nope", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	assert.Equal(t, apierr.GroupIDNotFound, reason(err))

	subscribed := joinReq("")
	subscribed.Topics = []string{"t"}
	a := memberID(t, c, subscribed)
	subscribed.MemberID = a
	require.NoError(t, await(t, joinAsync(c, subscribed), 5*time.Second).err)
	res, err := c.DeleteOffsets(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	require.NoError(t, err)
	assert.Equal(t, apierr.GroupSubscribedToTopic, reason(res[0].Partitions[0].Err))

	_, err = c.Leave(ctx, "g", []LeavingMember{{MemberID: a}})
	require.NoError(t, err)
	res, err = c.DeleteOffsets(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	require.NoError(t, err)
	assert.NoError(t, res[0].Partitions[0].Err)
	got, _ := c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}})
	assert.Equal(t, int64(-1), got[0].Partitions[0].Offset)
	assert.Equal(t, int64(2), got[0].Partitions[1].Offset)

	require.NoError(t, c.Delete(ctx, "g"))
	assert.False(t, c.Has("g"))
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeClock) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *fakeClock) Add(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// An empty group's offsets expire after the retention, counted from when
// it became empty; a group with members keeps its offsets.
func TestOffsetsRetention(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	c := open(t, Options{Partitions: partitions, OffsetsRetention: time.Hour, RetentionCheckInterval: time.Hour, Now: clock.Now})
	ctx := context.Background()
	a := stableAlone(t, c)
	_, err := c.Commit(ctx, CommitRequest{Group: "g", Generation: 1, MemberID: a, Topics: commitTopic(4)})
	require.NoError(t, err)
	clock.Add(2 * time.Hour)
	c.ExpireOffsets()
	got, _ := c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	assert.Equal(t, int64(4), got[0].Partitions[0].Offset, "kept while the group has members")

	_, err = c.Leave(ctx, "g", []LeavingMember{{MemberID: a}})
	require.NoError(t, err)
	clock.Add(59 * time.Minute)
	c.ExpireOffsets()
	got, _ = c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	assert.Equal(t, int64(4), got[0].Partitions[0].Offset, "within the retention since the group became empty")
	clock.Add(2 * time.Minute)
	c.ExpireOffsets()
	got, _ = c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	assert.Equal(t, int64(-1), got[0].Partitions[0].Offset, "expired")
	assert.False(t, c.Has("g"), "the empty group without offsets is gone")
}

// Committed offsets and the retention start survive a restart over the
// file store.
func TestOffsetsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	st, err := groupoffsets.Open(groupoffsets.Options{Dir: dir, Fsync: logstore.FsyncAlways})
	require.NoError(t, err)
	c, err := Open(Options{Store: st, Partitions: partitions, MinSessionTimeout: time.Millisecond, OffsetsRetention: time.Hour, RetentionCheckInterval: time.Hour, Now: clock.Now})
	require.NoError(t, err)
	ctx := context.Background()
	a := stableAlone(t, c)
	_, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: 1, MemberID: a, Topics: commitTopic(12, 13)})
	require.NoError(t, err)
	_, err = c.Leave(ctx, "g", []LeavingMember{{MemberID: a}})
	require.NoError(t, err)
	require.NoError(t, c.Close())

	clock.Add(50 * time.Minute)
	st, err = groupoffsets.Open(groupoffsets.Options{Dir: dir})
	require.NoError(t, err)
	c = open(t, Options{Store: st, Partitions: partitions, OffsetsRetention: time.Hour, RetentionCheckInterval: time.Hour, Now: clock.Now})
	got, err := c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}})
	require.NoError(t, err)
	assert.Equal(t, int64(12), got[0].Partitions[0].Offset)
	assert.Equal(t, int64(13), got[0].Partitions[1].Offset)
	d, _ := c.Describe(ctx, "g")
	assert.Equal(t, Empty, d.State)
	assert.Equal(t, "consumer", d.ProtocolType, "the protocol type is kept with the offsets")
	clock.Add(11 * time.Minute)
	c.ExpireOffsets()
	got, _ = c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	assert.Equal(t, int64(-1), got[0].Partitions[0].Offset, "the retention counted from before the restart")
}

// A failed store write fails the partitions it carried and changes
// nothing.
func TestCommitStorageFailure(t *testing.T) {
	mem := groupoffsets.NewMem()
	c := open(t, Options{Store: mem, Partitions: partitions})
	ctx := context.Background()
	_, err := c.Commit(ctx, CommitRequest{Group: "g", Generation: -1, Topics: commitTopic(1)})
	require.NoError(t, err)
	mem.SetFailing(assert.AnError)
	res, err := c.Commit(ctx, CommitRequest{Group: "g", Generation: -1, Topics: commitTopic(2)})
	require.NoError(t, err)
	assert.Equal(t, apierr.KafkaStorageError, reason(res[0].Partitions[0].Err))
	got, _ := c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0}}})
	assert.Equal(t, int64(1), got[0].Partitions[0].Offset)
}

func TestTopicDeletedDropsOffsets(t *testing.T) {
	c := open(t, Options{Partitions: partitions})
	ctx := context.Background()
	_, err := c.Commit(ctx, CommitRequest{Group: "g", Generation: -1, Topics: commitTopic(1)})
	require.NoError(t, err)
	c.TopicDeleted("t")
	got, _ := c.Fetch(ctx, "g", nil)
	assert.Empty(t, got)
}
