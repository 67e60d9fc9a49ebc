package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// More share-session, fetch and acknowledgement rules through the real gRPC server.

func TestShareIncrementalSessionAndShaping(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "a", 2, nil)
	s.createTopic(t, "b", 1, nil)
	s.earliestGroup(t, "g", nil)
	s.produceN(t, "b", 0, 3)

	// Epoch 0: one entry per named partition, empty ones included.
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: topicReq("a", part(0), part(1))})
	require.NotNil(t, partitionOf(r, "a", 0))
	require.NotNil(t, partitionOf(r, "a", 1))

	// Incremental: add b/0, forget a/1; only partitions with something to say appear.
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1, Topics: topicReq("b", part(0)),
		ForgottenTopicsData: []*sharelogv1.TopicPartitions{{Topic: "a", Partitions: []int32{1}}}})
	assert.Equal(t, []rng{{0, 2, 1}}, acquired(partitionOf(r, "b", 0)), "an added partition is fetched at once")
	assert.Nil(t, partitionOf(r, "a", 0), "a session partition with nothing to report is left out")
	assert.Nil(t, partitionOf(r, "a", 1))

	// A forgotten partition is no longer fetched.
	s.produceN(t, "a", 1, 2)
	s.produceN(t, "a", 0, 1)
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 2})
	assert.Nil(t, partitionOf(r, "a", 1), "forgotten")
	assert.Equal(t, []rng{{0, 0, 1}}, acquired(partitionOf(r, "a", 0)))

	// A partition carrying acks appears with its acknowledge_error_code, NONE included.
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 3,
		Topics: topicReq("b", part(0, batch(0, 2, accept)))})
	pr := partitionOf(r, "b", 0)
	require.NotNil(t, pr)
	assert.Equal(t, none, pr.GetAcknowledgeErrorCode())
	assert.Empty(t, pr.GetAcquiredRecords())
}

func TestShareCloseReleasesWithoutCharging(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "q", 1, nil)
	s.earliestGroup(t, "g", nil)
	s.produceN(t, "q", 0, 4)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{0, 3, 1}}, acquired(partitionOf(r, "q", 0)))
	// Close with a final ack of 0: the rest is released with its count decreased.
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", ShareSessionEpoch: -1, Topics: topicReq("q", part(0, batch(0, 0, accept)))})
	require.Equal(t, none, partitionOf(r, "q", 0).GetAcknowledgeErrorCode())
	assert.Empty(t, partitionOf(r, "q", 0).GetAcquiredRecords(), "a closing fetch fetches nothing")
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m2", Topics: topicReq("q", part(0))})
	assert.Equal(t, []rng{{1, 3, 1}}, acquired(partitionOf(r, "q", 0)))
	_, err := s.sg.ShareFetch(context.Background(), &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", ShareSessionEpoch: 1})
	requireReason(t, err, codes.NotFound, "SHARE_SESSION_NOT_FOUND")
}

func TestShareIdleEviction(t *testing.T) {
	t.Parallel()
	s := newShareStack(t, func(c *app.Config) { c.ShareSessionIdleTimeout = 200 * time.Millisecond })
	s.createTopic(t, "q", 1, nil)
	s.earliestGroup(t, "g", nil)
	s.produceN(t, "q", 0, 2)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "idle", Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{0, 1, 1}}, acquired(partitionOf(r, "q", 0)))
	// Another member waits; the idle session's eviction releases its records and wakes it.
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "other", MaxWaitMs: 5000, Topics: topicReq("q", part(0))})
	assert.Equal(t, []rng{{0, 1, 1}}, acquired(partitionOf(r, "q", 0)), "released by eviction, not charged")
	_, err := s.sg.ShareFetch(context.Background(), &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "idle", ShareSessionEpoch: 1})
	requireReason(t, err, codes.NotFound, "SHARE_SESSION_NOT_FOUND")
}

func TestShareBudgetsAndLimits(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	p := int32(0)
	big := make([]byte, 4000)
	_, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "q", Partition: &p, Records: []*sharelogv1.Record{{Value: big}, {Value: big}, {Value: []byte("x")}}})
	require.NoError(t, err)
	s.produceN(t, "q", 0, 300)

	t.Run("first record even above max_bytes, then stop", func(t *testing.T) {
		s.earliestGroup(t, "bytes", nil)
		r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "bytes", MemberId: "m", MaxBytes: proto.Int32(100), Topics: topicReq("q", part(0))})
		assert.Equal(t, []rng{{0, 0, 1}}, acquired(partitionOf(r, "q", 0)))
	})
	t.Run("record-lock limit", func(t *testing.T) {
		s.earliestGroup(t, "locks", &sharelogv1.ShareGroupConfig{PartitionMaxRecordLocks: proto.Int32(100)})
		r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "locks", MemberId: "m", Topics: topicReq("q", part(0))})
		assert.Equal(t, []rng{{0, 99, 1}}, acquired(partitionOf(r, "q", 0)), "at most partition_max_record_locks in flight")
		r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "locks", MemberId: "m2", Topics: topicReq("q", part(0))})
		assert.Empty(t, partitionOf(r, "q", 0).GetAcquiredRecords())
	})
	t.Run("reject and the delivery limit", func(t *testing.T) {
		s.earliestGroup(t, "limit", &sharelogv1.ShareGroupConfig{DeliveryCountLimit: proto.Int32(2)})
		r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "limit", MemberId: "m", MaxRecords: proto.Int32(2), Topics: topicReq("q", part(0))})
		require.Equal(t, []rng{{0, 1, 1}}, acquired(partitionOf(r, "q", 0)))
		// Reject 0, release 1 → 1 comes back (count 2) with the next offset.
		r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "limit", MemberId: "m", ShareSessionEpoch: 1, MaxRecords: proto.Int32(2),
			Topics: topicReq("q", part(0, batch(0, 1, reject, release)))})
		require.Equal(t, []rng{{1, 1, 2}, {2, 2, 1}}, acquired(partitionOf(r, "q", 0)))
		// Releasing 1 at the limit archives it: it is never sent again.
		r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "limit", MemberId: "m", ShareSessionEpoch: 2, MaxRecords: proto.Int32(1),
			Topics: topicReq("q", part(0, batch(1, 2, release)))})
		assert.Equal(t, []rng{{2, 2, 2}}, acquired(partitionOf(r, "q", 0)))
	})
	t.Run("min_bytes waits for enough data", func(t *testing.T) {
		s.createTopic(t, "mb", 1, nil)
		s.earliestGroup(t, "minbytes", nil)
		s.produce(t, "mb", 0, "tiny")
		start := time.Now()
		r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "minbytes", MemberId: "m", MinBytes: 1000, MaxWaitMs: 200, Topics: topicReq("mb", part(0))})
		assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "held until max_wait_ms")
		assert.Equal(t, []rng{{0, 0, 1}}, acquired(partitionOf(r, "mb", 0)), "then takes what there is")
	})
}

func TestShareTopicDeletedFromSession(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "gone", 1, nil)
	s.createTopic(t, "stays", 1, nil)
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: []*sharelogv1.ShareFetchTopic{
		{Topic: "gone", Partitions: []*sharelogv1.ShareFetchPartition{part(0)}},
		{Topic: "stays", Partitions: []*sharelogv1.ShareFetchPartition{part(0)}},
	}})
	_, err := s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "gone"})
	require.NoError(t, err)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1})
	require.NotNil(t, partitionOf(r, "gone", 0))
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, partitionOf(r, "gone", 0).GetErrorCode(), "reported once")
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 2})
	assert.Nil(t, partitionOf(r, "gone", 0), "and removed from the session")

	// Re-created under the same name: no share state carries over.
	s.createTopic(t, "gone", 1, nil)
	s.produce(t, "gone", 0, "new")
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 3, Topics: topicReq("gone", part(0))})
	assert.Empty(t, partitionOf(r, "gone", 0).GetAcquiredRecords(), "a new share-partition starts at latest")
}

func TestShareOffsetResetByDuration(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	p := int32(0)
	old := time.Now().Add(-2 * time.Hour).UnixMilli()
	recent := time.Now().Add(-10 * time.Minute).UnixMilli()
	_, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "q", Partition: &p, Records: []*sharelogv1.Record{
		{Timestamp: old}, {Timestamp: old}, {Timestamp: recent}, {Timestamp: recent}}})
	require.NoError(t, err)
	_, err = s.sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("by_duration:PT1H")}})
	require.NoError(t, err)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: topicReq("q", part(0))})
	assert.Equal(t, []rng{{2, 3, 1}}, acquired(partitionOf(r, "q", 0)), "starts at the first record of the last hour")
}
