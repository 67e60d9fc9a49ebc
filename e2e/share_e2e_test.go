package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

const (
	accept  = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT
	release = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE
	reject  = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT
	renew   = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RENEW
	none    = sharelogv1.ErrorCode_ERROR_CODE_NONE
)

// shareStack is the real server with a share-group client and quick locks.
type shareStack struct {
	*stack
	sg sharelogv1.ShareGroupServiceClient
}

func newShareStack(t *testing.T, mutate ...func(*app.Config)) *shareStack {
	t.Helper()
	fast := func(c *app.Config) {
		c.ShareMinRecordLockDuration = 50 * time.Millisecond
	}
	s := newStack(t, app.Options{}, append([]func(*app.Config){fast}, mutate...)...)
	return &shareStack{stack: s, sg: sharelogv1.NewShareGroupServiceClient(s.conn)}
}

// earliestGroup configures a group to start at the log start (so records
// produced before the first fetch are delivered).
func (s *shareStack) earliestGroup(t *testing.T, group string, cfg *sharelogv1.ShareGroupConfig) {
	t.Helper()
	if cfg == nil {
		cfg = &sharelogv1.ShareGroupConfig{}
	}
	cfg.AutoOffsetReset = proto.String("earliest")
	_, err := s.sg.UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{GroupId: group, Config: cfg})
	require.NoError(t, err)
}

func topicReq(topic string, partitions ...*sharelogv1.ShareFetchPartition) []*sharelogv1.ShareFetchTopic {
	return []*sharelogv1.ShareFetchTopic{{Topic: topic, Partitions: partitions}}
}

func part(p int32, batches ...*sharelogv1.AcknowledgementBatch) *sharelogv1.ShareFetchPartition {
	return &sharelogv1.ShareFetchPartition{Partition: p, AcknowledgementBatches: batches}
}

func batch(first, last int64, types ...sharelogv1.AcknowledgeType) *sharelogv1.AcknowledgementBatch {
	return &sharelogv1.AcknowledgementBatch{FirstOffset: first, LastOffset: last, AcknowledgeTypes: types}
}

func (s *shareStack) fetch(t *testing.T, req *sharelogv1.ShareFetchRequest) *sharelogv1.ShareFetchResponse {
	t.Helper()
	resp, err := s.sg.ShareFetch(context.Background(), req)
	require.NoError(t, err)
	return resp
}

// partitionOf returns one partition's entry of a ShareFetch response.
func partitionOf(resp *sharelogv1.ShareFetchResponse, topic string, p int32) *sharelogv1.ShareFetchPartitionResponse {
	return testsupport.PartitionOf(resp, topic, p)
}

type rng struct {
	first, last int64
	count       int32
}

// acquired is testsupport.Acquired with short positional literals for
// the tables here.
func acquired(pr *sharelogv1.ShareFetchPartitionResponse) []rng {
	var out []rng
	for _, a := range testsupport.Acquired(pr) {
		out = append(out, rng{a.First, a.Last, a.Count})
	}
	return out
}

func (s *shareStack) produceN(t *testing.T, topic string, p int32, n int) {
	t.Helper()
	vals := make([]string, n)
	for i := range vals {
		vals[i] = "v" + strconv.Itoa(i)
	}
	for len(vals) > 0 {
		k := min(len(vals), 1000)
		s.produce(t, topic, p, vals[:k]...)
		vals = vals[k:]
	}
}

func TestShareSessionEpochs(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	s.earliestGroup(t, "g", nil)
	s.produceN(t, "q", 0, 10)

	// Appendix example 1.
	open := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 0, MaxRecords: proto.Int32(2), Topics: topicReq("q", part(0))})
	assert.Equal(t, []rng{{0, 1, 1}}, acquired(partitionOf(open, "q", 0)))
	assert.Len(t, partitionOf(open, "q", 0).GetRecords(), 2)
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1, MaxRecords: proto.Int32(1)})
	_, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 2,
		Topics: topicReq("q", part(0, batch(0, 2, accept)))})
	require.NoError(t, err)
	_, err = s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 2})
	info := requireReason(t, err, codes.FailedPrecondition, "INVALID_SHARE_SESSION_EPOCH")
	assert.Equal(t, "3", info.GetMetadata()["expected_epoch"])
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 3})

	cases := []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"fetch without a session", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "nobody", ShareSessionEpoch: 1})
			return err
		}, codes.NotFound, "SHARE_SESSION_NOT_FOUND"},
		{"acknowledge without a session", func() error {
			_, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "nobody", ShareSessionEpoch: 1})
			return err
		}, codes.NotFound, "SHARE_SESSION_NOT_FOUND"},
		{"close without a session", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "nobody", ShareSessionEpoch: -1})
			return err
		}, codes.NotFound, "SHARE_SESSION_NOT_FOUND"},
		{"acknowledge at epoch 0", func() error {
			_, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 0})
			return err
		}, codes.FailedPrecondition, "INVALID_SHARE_SESSION_EPOCH"},
		{"epoch below -1", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: -2})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"acks on an opening fetch", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 0,
				Topics: topicReq("q", part(0, batch(3, 3, accept)))})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"renew on an opening fetch", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 0, IsRenewAck: true})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"close with a forget", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: -1,
				ForgottenTopicsData: []*sharelogv1.TopicPartitions{{Topic: "q", Partitions: []int32{0}}}})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"close adding a partition", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: -1, Topics: topicReq("q", part(0))})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"empty group id", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{MemberId: "m"})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"member id too long", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "0123456789012345678901234567890123456"})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"negative max_records", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 4, MaxRecords: proto.Int32(-1)})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"topic entry without partitions", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 4, Topics: []*sharelogv1.ShareFetchTopic{{Topic: "q"}}})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"duplicate partition", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 4, Topics: topicReq("q", part(0), part(0))})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"renew with max_records", func() error {
			_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 4, IsRenewAck: true, MaxRecords: proto.Int32(5)})
			return err
		}, codes.InvalidArgument, "INVALID_REQUEST"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireReason(t, tc.call(), tc.code, tc.reason)
		})
	}
	// None of the rejected requests consumed an epoch: 4 is still next.
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 4, MaxWaitMs: 0})
}

func TestShareAckValidation(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	s.earliestGroup(t, "g", nil)
	s.produceN(t, "q", 0, 10)
	resp := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", MaxRecords: proto.Int32(5), Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{0, 4, 1}}, acquired(partitionOf(resp, "q", 0)))

	bad := []struct {
		name    string
		batches []*sharelogv1.AcknowledgementBatch
	}{
		{"first after last", []*sharelogv1.AcknowledgementBatch{batch(3, 2, accept)}},
		{"negative first", []*sharelogv1.AcknowledgementBatch{batch(-1, 2, accept)}},
		{"types neither one nor one per offset", []*sharelogv1.AcknowledgementBatch{batch(0, 2, accept, accept)}},
		{"no types", []*sharelogv1.AcknowledgementBatch{batch(0, 2)}},
		{"unspecified type", []*sharelogv1.AcknowledgementBatch{batch(0, 0, sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_UNSPECIFIED)}},
		{"unknown type value", []*sharelogv1.AcknowledgementBatch{batch(0, 0, sharelogv1.AcknowledgeType(42))}},
		{"renew without is_renew_ack", []*sharelogv1.AcknowledgementBatch{batch(0, 0, renew)}},
		{"overlapping batches", []*sharelogv1.AcknowledgementBatch{batch(0, 2, accept), batch(2, 3, accept)}},
		{"descending batches", []*sharelogv1.AcknowledgementBatch{batch(3, 3, accept), batch(0, 1, accept)}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1,
				Topics: topicReq("q", part(0, tc.batches...))})
			requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		})
	}

	// Dynamic rules are per partition, in the body.
	ack, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1, Topics: []*sharelogv1.ShareFetchTopic{
		{Topic: "q", Partitions: []*sharelogv1.ShareFetchPartition{part(0, batch(0, 1, accept, reject))}},
		{Topic: "nope", Partitions: []*sharelogv1.ShareFetchPartition{part(0, batch(0, 0, accept))}},
	}})
	require.NoError(t, err, "the rejected requests did not consume epoch 1")
	codesBy := map[string]sharelogv1.ErrorCode{}
	for _, tr := range ack.GetResponses() {
		for _, p := range tr.GetPartitions() {
			codesBy[tr.GetTopic()] = p.GetErrorCode()
		}
	}
	assert.Equal(t, none, codesBy["q"])
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, codesBy["nope"])

	cases := []struct {
		name  string
		batch *sharelogv1.AcknowledgementBatch
		code  sharelogv1.ErrorCode
	}{
		// SPSO is 2 now: acks below it succeed without effect.
		{"below the start offset", batch(0, 1, accept), none},
		{"accept above an acquired record", batch(3, 3, accept), none},
		{"already acknowledged", batch(3, 3, accept), sharelogv1.ErrorCode_ERROR_CODE_INVALID_RECORD_STATE},
		{"partly acknowledged range rolls back", batch(2, 4, accept), sharelogv1.ErrorCode_ERROR_CODE_INVALID_RECORD_STATE},
		{"the rest is still ours", batch(4, 4, accept), none},
		{"never acquired", batch(7, 7, accept), sharelogv1.ErrorCode_ERROR_CODE_INVALID_RECORD_STATE},
		{"beyond the high watermark", batch(10, 12, accept), sharelogv1.ErrorCode_ERROR_CODE_INVALID_REQUEST},
	}
	epoch := int32(2)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ack, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: epoch,
				Topics: topicReq("q", part(0, tc.batch))})
			epoch++
			require.NoError(t, err)
			assert.Equal(t, tc.code, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())
		})
	}
}

// Appendix examples 2 (strict budget, batch_size, rotation), 3 (acks before
// fetch) and 4 (atomic rollback), through gRPC.
func TestShareAppendixExamples(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()

	t.Run("strict budget", func(t *testing.T) {
		s.createTopic(t, "orders", 2, nil)
		s.earliestGroup(t, "budget", nil)
		open := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "budget", MemberId: "m", Topics: topicReq("orders", part(0), part(1))})
		require.Nil(t, partitionOf(open, "orders", 0).GetAcquiredRecords())
		s.produceN(t, "orders", 0, 300)
		s.produceN(t, "orders", 1, 300)
		resp := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "budget", MemberId: "m", ShareSessionEpoch: 1, MaxRecords: proto.Int32(400), BatchSize: 150})
		// The session's second fetch starts at its second partition.
		assert.Equal(t, []rng{{0, 149, 1}, {150, 299, 1}}, acquired(partitionOf(resp, "orders", 1)))
		assert.Equal(t, []rng{{0, 99, 1}}, acquired(partitionOf(resp, "orders", 0)))
		assert.Len(t, partitionOf(resp, "orders", 1).GetRecords(), 300)
		assert.Len(t, partitionOf(resp, "orders", 0).GetRecords(), 100)
	})

	t.Run("acks before fetch", func(t *testing.T) {
		s.createTopic(t, "e3", 1, nil)
		s.earliestGroup(t, "g3", nil)
		s.produceN(t, "e3", 0, 40)
		resp := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g3", MemberId: "m", MaxRecords: proto.Int32(30), Topics: topicReq("e3", part(0))})
		require.Equal(t, []rng{{0, 29, 1}}, acquired(partitionOf(resp, "e3", 0)))
		resp = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g3", MemberId: "m", ShareSessionEpoch: 1, MaxRecords: proto.Int32(25),
			Topics: topicReq("e3", part(0, batch(0, 14, accept), batch(15, 29, release)))})
		pr := partitionOf(resp, "e3", 0)
		assert.Equal(t, none, pr.GetAcknowledgeErrorCode())
		assert.Equal(t, []rng{{15, 29, 2}, {30, 39, 1}}, acquired(pr), "released records are redelivered in the same response")
	})

	t.Run("atomic rollback", func(t *testing.T) {
		s.createTopic(t, "e4", 1, nil)
		s.earliestGroup(t, "g4", nil)
		s.produceN(t, "e4", 0, 15)
		r1 := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g4", MemberId: "m1", MaxRecords: proto.Int32(10), Topics: topicReq("e4", part(0))})
		require.Equal(t, []rng{{0, 9, 1}}, acquired(partitionOf(r1, "e4", 0)))
		r2 := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g4", MemberId: "m2", MaxRecords: proto.Int32(5), Topics: topicReq("e4", part(0))})
		require.Equal(t, []rng{{10, 14, 1}}, acquired(partitionOf(r2, "e4", 0)))
		ack, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g4", MemberId: "m1", ShareSessionEpoch: 1,
			Topics: topicReq("e4", part(0, batch(0, 4, accept), batch(5, 12, accept)))})
		require.NoError(t, err)
		assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_INVALID_RECORD_STATE, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())
		ack, err = s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g4", MemberId: "m1", ShareSessionEpoch: 2,
			Topics: topicReq("e4", part(0, batch(0, 9, accept)))})
		require.NoError(t, err)
		assert.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode(), "nothing was applied by the failed ack")
	})

	t.Run("replacement releases without charging", func(t *testing.T) {
		s.createTopic(t, "e5", 1, nil)
		s.earliestGroup(t, "g5", nil)
		s.produceN(t, "e5", 0, 5)
		r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g5", MemberId: "m", Topics: topicReq("e5", part(0))})
		require.Equal(t, []rng{{0, 4, 1}}, acquired(partitionOf(r, "e5", 0)))
		r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g5", MemberId: "m", Topics: topicReq("e5", part(0))})
		assert.Equal(t, []rng{{0, 4, 1}}, acquired(partitionOf(r, "e5", 0)), "the old session's records came back with count 0, acquired again as 1")
	})
}

// Appendix example 6: lock expiry and the delivery-count limit.
func TestShareLockExpiryAndLimit(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	s.earliestGroup(t, "g", &sharelogv1.ShareGroupConfig{RecordLockDurationMs: proto.Int32(100), DeliveryCountLimit: proto.Int32(3)})
	s.produceN(t, "q", 0, 2)

	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{0, 1, 1}}, acquired(partitionOf(r, "q", 0)))
	assert.EqualValues(t, 100, r.GetAcquisitionLockTimeoutMs())

	// m2 long-polls; the expiry of m1's locks wakes it.
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m2", MaxWaitMs: 5000, Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{0, 1, 2}}, acquired(partitionOf(r, "q", 0)), "expired records are redelivered with their count")
	ack, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m2", ShareSessionEpoch: 1,
		Topics: topicReq("q", part(0, batch(0, 1, accept, release)))})
	require.NoError(t, err)
	require.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())

	// m1's old locks expired: its late ack of 1 (released by m2 since) fails.
	ack, err = s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m1", ShareSessionEpoch: 1,
		Topics: topicReq("q", part(0, batch(1, 1, accept)))})
	require.NoError(t, err)
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_INVALID_RECORD_STATE, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())

	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", ShareSessionEpoch: 2})
	require.Equal(t, []rng{{1, 1, 3}}, acquired(partitionOf(r, "q", 0)))
	// Let it expire at the limit: it is archived, never sent again.
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m2", ShareSessionEpoch: 2, MaxWaitMs: 400})
	assert.Empty(t, partitionOf(r, "q", 0).GetAcquiredRecords(), "a record expired at the delivery limit is archived")
}

// RENEW through the server moves a record's lock deadline. The lock rules
// themselves are tested on a fake clock in internal/sharegroup; here the
// real clock runs, so the test asserts only what the measured times prove:
// the renew answered before the original lock could have expired, and the
// accept was sent after the original deadline but answered before the
// renewed one. When a slow machine leaves that window empty the attempt
// proves nothing, and the next one doubles the lock duration.
func TestShareRenew(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	s.produceN(t, "q", 0, 1)
	lock := 300 * time.Millisecond
	for attempt := range 5 {
		group := fmt.Sprintf("g%d", attempt)
		s.earliestGroup(t, group, &sharelogv1.ShareGroupConfig{RecordLockDurationMs: proto.Int32(int32(lock.Milliseconds()))})
		fetchSent := time.Now()
		r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: group, MemberId: "m", Topics: topicReq("q", part(0))})
		fetched := time.Now()
		require.Equal(t, []rng{{0, 0, 1}}, acquired(partitionOf(r, "q", 0)))
		// The original deadline lies in [fetchSent+lock, fetched+lock].

		time.Sleep(time.Until(fetchSent.Add(lock / 2)))
		renewSent := time.Now()
		ack, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: group, MemberId: "m", ShareSessionEpoch: 1, IsRenewAck: true,
			Topics: topicReq("q", part(0, batch(0, 0, renew)))})
		require.NoError(t, err)
		if renewed := time.Now(); renewed.After(fetchSent.Add(lock)) {
			t.Logf("attempt %d: the renew took until %v after the fetch; retrying with a longer lock", attempt, renewed.Sub(fetchSent))
			lock *= 2
			continue
		}
		require.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode(), "renewed before the deadline")

		// Past the original deadline; the renewed one is at least renewSent+lock.
		time.Sleep(time.Until(fetched.Add(lock + 10*time.Millisecond)))
		ack, err = s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: group, MemberId: "m", ShareSessionEpoch: 2,
			Topics: topicReq("q", part(0, batch(0, 0, accept)))})
		require.NoError(t, err)
		if accepted := time.Now(); accepted.After(renewSent.Add(lock)) {
			t.Logf("attempt %d: the accept answered %v after the renew, past its deadline; retrying with a longer lock", attempt, accepted.Sub(renewSent))
			lock *= 2
			continue
		}
		assert.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode(),
			"after the original deadline the renewed record is still ours")
		return
	}
	t.Fatal("no attempt answered quickly enough to test the renewed deadline")
}

// A purge under a share group, and initialisation from auto_offset_reset.
func TestSharePurgeAndOffsetReset(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	s.produceN(t, "q", 0, 5)

	// Default auto_offset_reset is latest: existing records are not delivered.
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "latest", MemberId: "m", Topics: topicReq("q", part(0))})
	assert.Empty(t, partitionOf(r, "q", 0).GetAcquiredRecords())
	s.produceN(t, "q", 0, 1)
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "latest", MemberId: "m", ShareSessionEpoch: 1})
	assert.Equal(t, []rng{{5, 5, 1}}, acquired(partitionOf(r, "q", 0)))

	s.earliestGroup(t, "early", nil)
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "early", MemberId: "m1", MaxRecords: proto.Int32(2), Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{0, 1, 1}}, acquired(partitionOf(r, "q", 0)))
	require.EqualValues(t, 4, purgeOne(t, s.stack, "q", 0, 4).GetLowWatermark())
	// m1's ack of records below the new start succeeds without effect.
	ack, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "early", MemberId: "m1", ShareSessionEpoch: 1,
		Topics: topicReq("q", part(0, batch(0, 1, accept)))})
	require.NoError(t, err)
	assert.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "early", MemberId: "m2", Topics: topicReq("q", part(0))})
	assert.Equal(t, []rng{{4, 5, 1}}, acquired(partitionOf(r, "q", 0)), "fetches continue from the new log start; 2 and 3 are archived")
}

func TestShareFetchLongPollWokenByProduce(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "q", 1, nil)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: topicReq("q", part(0))})
	require.Empty(t, partitionOf(r, "q", 0).GetAcquiredRecords())
	done := make(chan *sharelogv1.ShareFetchResponse, 1)
	go func() {
		resp, err := s.sg.ShareFetch(context.Background(), &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1, MaxWaitMs: 30000})
		assert.NoError(t, err)
		done <- resp
	}()
	s.awaitLongPolls(t, 1)
	s.produceN(t, "q", 0, 3)
	select {
	case resp := <-done:
		assert.Equal(t, []rng{{0, 2, 1}}, acquired(partitionOf(resp, "q", 0)))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting ShareFetch was not woken by the produce")
	}
}

func TestShareErrorsInBody(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "q", 1, nil)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: []*sharelogv1.ShareFetchTopic{
		{Topic: "q", Partitions: []*sharelogv1.ShareFetchPartition{part(0), part(3)}},
		{Topic: "missing", Partitions: []*sharelogv1.ShareFetchPartition{part(0)}},
	}})
	assert.Equal(t, none, partitionOf(r, "q", 0).GetErrorCode())
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, partitionOf(r, "q", 3).GetErrorCode())
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, partitionOf(r, "missing", 0).GetErrorCode())
	assert.NotEmpty(t, partitionOf(r, "missing", 0).GetErrorMessage())
}

func TestShareSessionLimit(t *testing.T) {
	t.Parallel()
	s := newShareStack(t, func(c *app.Config) { c.MaxShareSessions = 1; c.ShareGroupMaxSize = 1 })
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", Topics: topicReq("q", part(0))})
	start := time.Now()
	_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m2", MaxWaitMs: 100, Topics: topicReq("q", part(0))})
	info := requireReason(t, err, codes.ResourceExhausted, "SHARE_SESSION_LIMIT_REACHED")
	assert.Equal(t, "1", info.GetMetadata()["max_sessions"])
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "answered after max_wait_ms")
	// Replacing the same key needs no slot; closing frees it.
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", Topics: topicReq("q", part(0))})
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", ShareSessionEpoch: -1})
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m2", Topics: topicReq("q", part(0))})
}

func TestShareGroupConfig(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	_, err := s.sg.GetShareGroupConfig(ctx, &sharelogv1.GetShareGroupConfigRequest{GroupId: "unknown"})
	requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")

	upd, err := s.sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "cfg",
		Config: &sharelogv1.ShareGroupConfig{DeliveryCountLimit: proto.Int32(7)}})
	require.NoError(t, err)
	c := upd.GetConfig()
	assert.EqualValues(t, 7, c.GetDeliveryCountLimit())
	assert.EqualValues(t, 30000, c.GetRecordLockDurationMs(), "unset fields show their effective default")
	assert.EqualValues(t, 2000, c.GetPartitionMaxRecordLocks())
	assert.Equal(t, "latest", c.GetAutoOffsetReset())

	for name, cfg := range map[string]*sharelogv1.ShareGroupConfig{
		"delivery limit too high": {DeliveryCountLimit: proto.Int32(11)},
		"lock below the minimum":  {RecordLockDurationMs: proto.Int32(1)},
		"record locks too few":    {PartitionMaxRecordLocks: proto.Int32(99)},
		"bad offset reset":        {AutoOffsetReset: proto.String("sometime")},
		"bad duration":            {AutoOffsetReset: proto.String("by_duration:P1Y")},
		"heartbeat >= timeout":    {SessionTimeoutMs: proto.Int32(5000), HeartbeatIntervalMs: proto.Int32(5000)},
		"one good, one bad":       {DeliveryCountLimit: proto.Int32(3), PartitionMaxRecordLocks: proto.Int32(1)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "cfg", Config: cfg})
			requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		})
	}
	got, err := s.sg.GetShareGroupConfig(ctx, &sharelogv1.GetShareGroupConfigRequest{GroupId: "cfg"})
	require.NoError(t, err)
	assert.EqualValues(t, 7, got.GetConfig().GetDeliveryCountLimit(), "a rejected update changes nothing")

	upd, err = s.sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "cfg",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("by_duration:P1DT6H")}})
	require.NoError(t, err)
	assert.Equal(t, "by_duration:P1DT6H", upd.GetConfig().GetAutoOffsetReset())
}

// Many consumers on one partition through gRPC: each record delivered once.
func TestShareConsumersThroughGRPC(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "q", 1, nil)
	s.earliestGroup(t, "g", &sharelogv1.ShareGroupConfig{PartitionMaxRecordLocks: proto.Int32(2000)})
	const n = 3000
	s.produceN(t, "q", 0, n)

	var (
		mu   sync.Mutex
		seen = map[int64]int{}
		wg   sync.WaitGroup
	)
	for c := range 4 {
		wg.Go(func() {
			member := "c" + strconv.Itoa(c)
			resp, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: member, MaxRecords: proto.Int32(100), Topics: topicReq("q", part(0))})
			// assert, not require: this is not the test's goroutine.
			if !assert.NoError(t, err) {
				return
			}
			for epoch := int32(1); ; epoch++ {
				pr := partitionOf(resp, "q", 0)
				var batches []*sharelogv1.AcknowledgementBatch
				for _, a := range pr.GetAcquiredRecords() {
					batches = append(batches, batch(a.GetFirstOffset(), a.GetLastOffset(), accept))
					mu.Lock()
					for o := a.GetFirstOffset(); o <= a.GetLastOffset(); o++ {
						seen[o]++
					}
					mu.Unlock()
				}
				mu.Lock()
				done := len(seen) == n
				mu.Unlock()
				if done && len(batches) == 0 {
					return
				}
				req := &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: member, ShareSessionEpoch: epoch, MaxRecords: proto.Int32(100), MaxWaitMs: 50}
				if len(batches) > 0 {
					req.Topics = topicReq("q", part(0, batches...))
				}
				resp, err = s.sg.ShareFetch(ctx, req)
				if !assert.NoError(t, err) {
					return
				}
				if len(batches) > 0 && !assert.Equal(t, none, partitionOf(resp, "q", 0).GetAcknowledgeErrorCode()) {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, n)
	for o, c := range seen {
		require.Equal(t, 1, c, "offset %d delivered %d times", o, c)
	}
}

func TestRESTShareGroups(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "q", 1, nil)
	s.produceN(t, "q", 0, 3)

	r := s.rest(t, http.MethodPatch, "/v1/share-groups/g/config", `{"config":{"autoOffsetReset":"earliest"}}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "earliest", r.Body["config"].(map[string]any)["autoOffsetReset"])
	r = s.rest(t, http.MethodGet, "/v1/share-groups/g/config", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/share-groups/nope/config", ""), http.StatusNotFound, "GROUP_ID_NOT_FOUND")
	requireRESTError(t, s.rest(t, http.MethodPatch, "/v1/share-groups/g/config", `{"config":{"deliveryCountLimit":1}}`), http.StatusBadRequest, "INVALID_REQUEST")

	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":0,"topics":[{"topic":"q","partitions":[{"partition":0}]}]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	p0 := r.Body["responses"].([]any)[0].(map[string]any)["partitions"].([]any)[0].(map[string]any)
	assert.Equal(t, []any{map[string]any{"firstOffset": "0", "lastOffset": "2", "deliveryCount": float64(1)}}, p0["acquiredRecords"])
	assert.Len(t, p0["records"], 3)

	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:acknowledge", `{"memberId":"m","shareSessionEpoch":1,"topics":[{"topic":"q","partitions":[{"partition":0,"acknowledgementBatches":[{"firstOffset":"0","lastOffset":"2","acknowledgeTypes":["ACKNOWLEDGE_TYPE_ACCEPT"]}]}]}]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	ackP := r.Body["responses"].([]any)[0].(map[string]any)["partitions"].([]any)[0].(map[string]any)
	assert.Equal(t, "ERROR_CODE_NONE", ackP["errorCode"])

	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":7}`), http.StatusBadRequest, "INVALID_SHARE_SESSION_EPOCH")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"other","shareSessionEpoch":1}`), http.StatusNotFound, "SHARE_SESSION_NOT_FOUND")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:acknowledge", `{"memberId":"m","shareSessionEpoch":0}`), http.StatusBadRequest, "INVALID_SHARE_SESSION_EPOCH")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:acknowledge", `{"memberId":"m","shareSessionEpoch":2,"topics":[{"topic":"q","partitions":[{"partition":0,"acknowledgementBatches":[{"firstOffset":"0","lastOffset":"0","acknowledgeTypes":["ACKNOWLEDGE_TYPE_UNSPECIFIED"]}]}]}]}`), http.StatusBadRequest, "INVALID_REQUEST")

	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":-1}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":2}`), http.StatusNotFound, "SHARE_SESSION_NOT_FOUND")
}
