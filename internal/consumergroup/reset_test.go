package consumergroup

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
)

// fakeLog is topic "t" with two partitions: partition 0 holds offsets
// [10, 20) with the timestamp 1000+offset, partition 1 is empty at 5.
type fakeLog struct{ calls int }

func (f *fakeLog) listOffsets(_ context.Context, topic string, p int32, q OffsetQuery, ts int64) (int64, error) {
	f.calls++
	if topic != "t" || p < 0 || p > 1 {
		return 0, apierr.New(apierr.UnknownTopicOrPartition, "no %s-%d", topic, p)
	}
	start, end := int64(10), int64(20)
	if p == 1 {
		start, end = 5, 5
	}
	switch q {
	case OffsetEarliest:
		return start, nil
	case OffsetLatest:
		return end, nil
	}
	if off := ts - 1000; off < end {
		return max(off, start), nil
	}
	return -1, nil
}

func openWithLog(t *testing.T) (*Coordinator, *fakeLog) {
	f := &fakeLog{}
	return open(t, Options{Partitions: partitions, ListOffsets: f.listOffsets}), f
}

func plan(topic string, p int32, prev, off int64) PlannedOffset {
	return PlannedOffset{Topic: topic, Partition: p, Previous: prev, Offset: off}
}

// Each kind of reset, clamped into [log start, log end]; a dry run writes
// nothing and creates no group, --execute writes and creates it.
func TestAlterOffsetsKinds(t *testing.T) {
	c, _ := openWithLog(t)
	ctx := context.Background()
	cases := []struct {
		name string
		rt   ResetTopic
		want []PlannedOffset
	}{
		{"earliest", ResetTopic{Topic: "t", Kind: ResetToEarliest}, []PlannedOffset{plan("t", 0, -1, 10), plan("t", 1, -1, 5)}},
		{"latest", ResetTopic{Topic: "t", Kind: ResetToLatest}, []PlannedOffset{plan("t", 0, -1, 20), plan("t", 1, -1, 5)}},
		{"timestamp", ResetTopic{Topic: "t", Partitions: []int32{0}, Kind: ResetToTimestamp, Value: 1013}, []PlannedOffset{plan("t", 0, -1, 13)}},
		{"timestamp after every record", ResetTopic{Topic: "t", Partitions: []int32{0}, Kind: ResetToTimestamp, Value: 5000}, []PlannedOffset{plan("t", 0, -1, 20)}},
		{"offset", ResetTopic{Topic: "t", Partitions: []int32{0}, Kind: ResetToOffset, Value: 15}, []PlannedOffset{plan("t", 0, -1, 15)}},
		{"offset below the log start", ResetTopic{Topic: "t", Partitions: []int32{0}, Kind: ResetToOffset, Value: 3}, []PlannedOffset{plan("t", 0, -1, 10)}},
		{"offset past the end", ResetTopic{Topic: "t", Partitions: []int32{1, 0}, Kind: ResetToOffset, Value: 99}, []PlannedOffset{plan("t", 0, -1, 20), plan("t", 1, -1, 5)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.AlterOffsets(ctx, AlterRequest{Group: "g", Topics: []ResetTopic{tc.rt}, DryRun: true})
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.False(t, c.Has("g"), "a dry run creates no group")
		})
	}

	got, err := c.AlterOffsets(ctx, AlterRequest{Group: "g", Topics: []ResetTopic{{Topic: "t", Partitions: []int32{0}, Kind: ResetToOffset, Value: 12}}})
	require.NoError(t, err)
	assert.Equal(t, []PlannedOffset{plan("t", 0, -1, 12)}, got)
	fetched, err := c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}})
	require.NoError(t, err)
	assert.Equal(t, []CommittedOffset{{Partition: 0, Offset: 12, LeaderEpoch: -1}, {Partition: 1, Offset: -1, LeaderEpoch: -1}}, fetched[0].Partitions)

	// A shift moves the committed offset (clamped); a partition without
	// one cannot be shifted, and only it fails.
	got, err = c.AlterOffsets(ctx, AlterRequest{Group: "g", Topics: []ResetTopic{{Topic: "t", Kind: ResetShiftBy, Value: -5}}})
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, plan("t", 0, 12, 10), got[0])
	assert.Equal(t, apierr.InvalidRequest, reason(got[1].Err))
	assert.Equal(t, int64(-1), got[1].Offset)
	fetched, err = c.Fetch(ctx, "g", []TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}})
	require.NoError(t, err)
	assert.Equal(t, int64(10), fetched[0].Partitions[0].Offset)
	assert.Equal(t, int64(-1), fetched[0].Partitions[1].Offset, "the failed partition is not written")
}

// Request-level refusals, and per-partition errors for what does not
// exist.
func TestAlterOffsetsRefusals(t *testing.T) {
	ctx := context.Background()
	taken := func(g string) bool { return g == "share" }
	f := &fakeLog{}
	c := open(t, Options{Partitions: partitions, ListOffsets: f.listOffsets, Taken: taken})
	for name, tc := range map[string]struct {
		req  AlterRequest
		want apierr.Reason
	}{
		"no group":       {AlterRequest{Topics: []ResetTopic{{Topic: "t", Kind: ResetToLatest}}}, apierr.InvalidGroupID},
		"no topics":      {AlterRequest{Group: "g"}, apierr.InvalidRequest},
		"no kind":        {AlterRequest{Group: "g", Topics: []ResetTopic{{Topic: "t"}}}, apierr.InvalidRequest},
		"negative time":  {AlterRequest{Group: "g", Topics: []ResetTopic{{Topic: "t", Kind: ResetToTimestamp, Value: -1}}}, apierr.InvalidRequest},
		"named twice":    {AlterRequest{Group: "g", Topics: []ResetTopic{{Topic: "t", Kind: ResetToLatest}, {Topic: "t", Partitions: []int32{1}, Kind: ResetToEarliest}}}, apierr.InvalidRequest},
		"a share group":  {AlterRequest{Group: "share", Topics: []ResetTopic{{Topic: "t", Kind: ResetToLatest}}}, apierr.GroupIDNotFound},
		"empty topic":    {AlterRequest{Group: "g", Topics: []ResetTopic{{Kind: ResetToLatest}}}, apierr.InvalidRequest},
		"kind too large": {AlterRequest{Group: "g", Topics: []ResetTopic{{Topic: "t", Kind: ResetShiftBy + 1}}}, apierr.InvalidRequest},
	} {
		_, err := c.AlterOffsets(ctx, tc.req)
		assert.Equal(t, tc.want, reason(err), name)
	}

	got, err := c.AlterOffsets(ctx, AlterRequest{Group: "g", Topics: []ResetTopic{
		{Topic: "nope", Kind: ResetToLatest}, {Topic: "t", Partitions: []int32{7, 1}, Kind: ResetToLatest}}})
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(got[0].Err))
	assert.Equal(t, int32(-1), got[0].Partition)
	assert.Equal(t, plan("t", 1, -1, 5), got[1])
	assert.Equal(t, int32(7), got[2].Partition)
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(got[2].Err))

	noLog := open(t, Options{Partitions: partitions})
	_, err = noLog.AlterOffsets(ctx, AlterRequest{Group: "g", Topics: []ResetTopic{{Topic: "t", Kind: ResetToLatest}}})
	assert.Equal(t, apierr.Unavailable, reason(err))
}

// A group with members refuses the reset, dry run or not, without looking
// at the log, as kafka-consumer-groups.sh --reset-offsets; once the member
// left, the reset goes through.
func TestAlterOffsetsNeedsInactiveGroup(t *testing.T) {
	c, f := openWithLog(t)
	ctx := context.Background()
	a := stableAlone(t, c)
	for _, dry := range []bool{true, false} {
		_, err := c.AlterOffsets(ctx, AlterRequest{Group: "g", DryRun: dry, Topics: []ResetTopic{{Topic: "t", Kind: ResetToEarliest}}})
		require.Equal(t, apierr.NonEmptyGroup, reason(err), "dry run %v: %v", dry, err)
		var ae *apierr.Error
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, "Stable", ae.Metadata["state"])
		assert.Equal(t, "1", ae.Metadata["members"])
	}
	assert.Zero(t, f.calls, "an active group is refused before the log is asked")

	_, err := c.Leave(ctx, "g", []LeavingMember{{MemberID: a}})
	require.NoError(t, err)
	got, err := c.AlterOffsets(ctx, AlterRequest{Group: "g", Topics: []ResetTopic{{Topic: "t", Partitions: []int32{0}, Kind: ResetToEarliest}}})
	require.NoError(t, err)
	assert.Equal(t, []PlannedOffset{plan("t", 0, -1, 10)}, got)
}

// A consumer-protocol (KIP-848) group with a member is active too.
func TestAlterOffsetsRefusesConsumerProtocolMembers(t *testing.T) {
	c, _ := openWithLog(t)
	ctx := context.Background()
	_, err := c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "g", MemberID: "m1", MemberEpoch: 0,
		RebalanceTimeout: time.Second, SubscribedTopics: []string{"t"}, Owned: []TopicPartitions{}})
	require.NoError(t, err)
	_, err = c.AlterOffsets(ctx, AlterRequest{Group: "g", DryRun: true, Topics: []ResetTopic{{Topic: "t", Kind: ResetToEarliest}}})
	assert.Equal(t, apierr.NonEmptyGroup, reason(err))
}

// The committed offsets beside the log end: lag only where an offset is
// committed; with a topic named, every partition of it.
func TestOffsetsWithLag(t *testing.T) {
	c, _ := openWithLog(t)
	ctx := context.Background()
	_, err := c.OffsetsWithLag(ctx, "g", nil)
	assert.Equal(t, apierr.GroupIDNotFound, reason(err))

	_, err = c.Commit(ctx, CommitRequest{Group: "g", Generation: -1, Topics: []CommitTopic{{Topic: "t",
		Partitions: []CommitPartition{{Partition: 0, Offset: 14, LeaderEpoch: 3, Metadata: "m"}}}}})
	require.NoError(t, err)
	got, err := c.OffsetsWithLag(ctx, "g", nil)
	require.NoError(t, err)
	assert.Equal(t, []PartitionLag{{Topic: "t", Partition: 0, Offset: 14, LeaderEpoch: 3, Metadata: "m", LogEndOffset: 20, Lag: 6}}, got)

	got, err = c.OffsetsWithLag(ctx, "g", []string{"t", "nope", "t"})
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, PartitionLag{Topic: "t", Partition: 0, Offset: 14, LeaderEpoch: 3, Metadata: "m", LogEndOffset: 20, Lag: 6}, got[0])
	assert.Equal(t, PartitionLag{Topic: "t", Partition: 1, Offset: -1, LeaderEpoch: -1, LogEndOffset: 5, Lag: -1}, got[1])
	assert.Equal(t, apierr.UnknownTopicOrPartition, reason(got[2].Err))

	// An offset past the log end (the log was truncated) has no negative
	// lag.
	_, err = c.Commit(ctx, CommitRequest{Group: "h", Generation: -1, Topics: []CommitTopic{{Topic: "t",
		Partitions: []CommitPartition{{Partition: 1, Offset: 9, LeaderEpoch: -1}}}}})
	require.NoError(t, err)
	all := c.AllOffsetsWithLag(ctx)
	require.Len(t, all, 2)
	assert.Equal(t, "h", all[1].Group)
	assert.Equal(t, int64(0), all[1].Offsets[0].Lag)
}

// encodeAssignment is Kafka's ConsumerProtocolAssignment v0.
func encodeAssignment(topics map[string][]int32, order []string) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(order)))
	for _, t := range order {
		b = binary.BigEndian.AppendUint16(b, uint16(len(t)))
		b = append(b, t...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(topics[t])))
		for _, p := range topics[t] {
			b = binary.BigEndian.AppendUint32(b, uint32(p))
		}
	}
	return binary.BigEndian.AppendUint32(b, 0xffffffff) // null user data
}

func TestDecodeConsumerAssignment(t *testing.T) {
	b := encodeAssignment(map[string][]int32{"b": {2, 0}, "a": {1}}, []string{"b", "a"})
	got, err := DecodeConsumerAssignment(b)
	require.NoError(t, err)
	assert.Equal(t, []TopicPartitions{{Topic: "a", Partitions: []int32{1}}, {Topic: "b", Partitions: []int32{2, 0}}}, got)
	for i := range len(b) - 4 { // every cut before the user data
		_, err := DecodeConsumerAssignment(b[:i])
		assert.Error(t, err, "cut at %d", i)
	}
}

func FuzzDecodeConsumerAssignment(f *testing.F) {
	f.Add(encodeAssignment(map[string][]int32{"t": {0, 1}}, []string{"t"}))
	f.Add([]byte{0, 0, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeConsumerAssignment(b)
		if err == nil {
			n := 0
			for _, tp := range got {
				n += 6 + len(tp.Topic) + 4*len(tp.Partitions)
			}
			assert.LessOrEqual(t, n, len(b)+6*len(got), "decoded more than the input holds")
		}
	})
}

// The overview of a Stable classic consumer group decodes the members'
// assignments; a consumer-protocol group shows what its members own.
func TestOverview(t *testing.T) {
	c, _ := openWithLog(t)
	ctx := context.Background()
	_, err := c.Overview(ctx, "g")
	assert.Equal(t, apierr.GroupIDNotFound, reason(err))

	a := memberID(t, c, joinReq(""))
	r := await(t, joinAsync(c, joinReq(a)), 5*time.Second)
	require.NoError(t, r.err)
	_, err = c.Sync(ctx, SyncRequest{Group: "g", Generation: r.resp.Generation, MemberID: a,
		Assignments: []Assignment{{a, encodeAssignment(map[string][]int32{"t": {0, 1}}, []string{"t"})}}})
	require.NoError(t, err)
	o, err := c.Overview(ctx, "g")
	require.NoError(t, err)
	assert.Equal(t, GroupOverview{Group: "g", Type: "classic", State: "Stable", ProtocolType: "consumer", Protocol: "range", Epoch: 1,
		Members: []MemberOverview{{MemberID: a, ClientID: "c", Assignment: []TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}}}}}, o)
	ls, err := c.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, ls[0].Members)

	hr, err := c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "k", MemberID: "m1", ClientID: "cid",
		RebalanceTimeout: time.Second, SubscribedTopics: []string{"t"}, Owned: []TopicPartitions{}})
	require.NoError(t, err)
	_, err = c.ConsumerHeartbeat(ctx, ConsumerHeartbeatRequest{Group: "k", MemberID: "m1", MemberEpoch: hr.MemberEpoch,
		RebalanceTimeout: -1, Owned: hr.Assignment})
	require.NoError(t, err)
	o, err = c.Overview(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "consumer", o.Type)
	assert.Equal(t, "uniform", o.Protocol)
	require.Len(t, o.Members, 1)
	assert.Equal(t, "m1", o.Members[0].MemberID)
	assert.Equal(t, []TopicPartitions{{Topic: "t", Partitions: []int32{0, 1}}}, o.Members[0].Assignment)
}
