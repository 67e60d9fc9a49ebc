package sharegroup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
)

func TestDescribePartitionState(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	_, err := e.m.DescribePartitionState(ctx, "nope", nil, 0)
	requireReason(t, err, apierr.GroupIDNotFound)

	e.topic("t", 2)
	x := tp("t", 0)
	e.produce("t", 0, 10, 1)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	for _, bad := range []int{-1, MaxStateRanges + 1} {
		_, err = e.m.DescribePartitionState(ctx, testGroup, nil, bad)
		requireReason(t, err, apierr.InvalidRequest)
	}
	got, err := e.m.DescribePartitionState(ctx, testGroup, nil, 0)
	require.NoError(t, err)
	assert.Empty(t, got, "no share state yet")

	before := time.Now()
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, e.open("m", x), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 2, AckAccept), batch(5, 6, AckReject))).Partitions[0].ErrorCode)

	got, err = e.m.DescribePartitionState(ctx, testGroup, []TopicPartitions{tps("t"), tps("gone", 0)}, 0)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Len(t, got[0].Partitions, 2)
	p0 := got[0].Partitions[0]
	assert.Equal(t, int64(3), p0.StartOffset)
	assert.Equal(t, int64(9), p0.EndOffset)
	assert.Equal(t, int64(5), p0.Lag, "as DescribeOffsets: 10 - 3 - 2 terminal")
	assert.False(t, p0.Truncated)
	require.Len(t, p0.Ranges, 3)
	for i, want := range []struct {
		first, last int64
		state       string
		count       int32
	}{{3, 4, "ACQUIRED", 1}, {5, 6, "ARCHIVED", 0}, {7, 9, "ACQUIRED", 1}} {
		r := p0.Ranges[i]
		assert.Equal(t, want.first, r.FirstOffset, "range %d", i)
		assert.Equal(t, want.last, r.LastOffset, "range %d", i)
		assert.Equal(t, want.state, r.State, "range %d", i)
		assert.Equal(t, want.count, r.DeliveryCount, "range %d", i)
		if want.state == "ACQUIRED" {
			assert.Equal(t, "m", r.Owner, "range %d", i)
			// The default lock is 30 s: the deadline is that far from the acquisition.
			assert.WithinRange(t, r.LockDeadline, before.Add(29*time.Second), time.Now().Add(31*time.Second), "range %d", i)
		} else {
			assert.Empty(t, r.Owner)
			assert.True(t, r.LockDeadline.IsZero())
		}
	}
	assert.Equal(t, PartitionState{Partition: 1, StartOffset: -1, EndOffset: -1, Lag: -1, OldestKeyWaiting: -1}, got[0].Partitions[1])
	assert.Equal(t, apierr.UnknownTopicOrPartition, got[1].Partitions[0].ErrorCode)

	// The bound: two ranges of three, flagged.
	got, err = e.m.DescribePartitionState(ctx, testGroup, []TopicPartitions{tps("t", 0)}, 2)
	require.NoError(t, err)
	assert.Len(t, got[0].Partitions[0].Ranges, 2)
	assert.True(t, got[0].Partitions[0].Truncated)

	// Released records are AVAILABLE again, delivery count kept, no owner.
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(3, 4, AckRelease))).Partitions[0].ErrorCode)
	got, err = e.m.DescribePartitionState(ctx, testGroup, []TopicPartitions{tps("t", 0)}, 0)
	require.NoError(t, err)
	r := got[0].Partitions[0].Ranges[0]
	assert.Equal(t, InFlightRange{FirstOffset: 3, LastOffset: 4, State: "AVAILABLE", DeliveryCount: 1}, r)
}
