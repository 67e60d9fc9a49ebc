package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// DescribeSharePartitionState through the real server, over gRPC and REST:
// who holds which records, until when, delivered how often; bounded.
func TestDescribeSharePartitionStateE2E(t *testing.T) {
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "jobs", 1, nil)
	s.produceN(t, "jobs", 0, 6)
	s.earliestGroup(t, "w", nil)

	_, err := s.sg.DescribeSharePartitionState(ctx, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: "nope"})
	requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")
	_, err = s.sg.DescribeSharePartitionState(ctx, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: "w", MaxRanges: 1001})
	requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")

	before := time.Now()
	resp := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "w", MemberId: "m1", Topics: topicReq("jobs", part(0))})
	require.Equal(t, []rng{{0, 5, 1}}, acquired(partitionOf(resp, "jobs", 0)))
	resp = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "w", MemberId: "m1", ShareSessionEpoch: 1,
		Topics: topicReq("jobs", part(0, batch(0, 1, sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT), batch(3, 3, sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT)))})
	require.Equal(t, none, partitionOf(resp, "jobs", 0).GetAcknowledgeErrorCode())

	st, err := s.sg.DescribeSharePartitionState(ctx, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: "w"})
	require.NoError(t, err)
	require.Len(t, st.GetTopics(), 1)
	p := st.GetTopics()[0].GetPartitions()[0]
	assert.Equal(t, int64(2), p.GetStartOffset())
	assert.Equal(t, int64(5), p.GetEndOffset())
	assert.Equal(t, int64(3), p.GetLag(), "6 - 2 - 1 archived")
	require.Len(t, p.GetRanges(), 3)
	acq := sharelogv1.InFlightState_IN_FLIGHT_STATE_ACQUIRED
	for i, want := range []struct {
		first, last int64
		state       sharelogv1.InFlightState
		count       int32
	}{{2, 2, acq, 1}, {3, 3, sharelogv1.InFlightState_IN_FLIGHT_STATE_ARCHIVED, 0}, {4, 5, acq, 1}} {
		r := p.GetRanges()[i]
		assert.Equal(t, want.first, r.GetFirstOffset(), "range %d", i)
		assert.Equal(t, want.last, r.GetLastOffset(), "range %d", i)
		assert.Equal(t, want.state, r.GetState(), "range %d", i)
		assert.Equal(t, want.count, r.GetDeliveryCount(), "range %d", i)
		if want.state == acq {
			assert.Equal(t, "m1", r.GetOwnerMemberId())
			// The default lock is 30 s.
			assert.InDelta(t, before.Add(30*time.Second).UnixMilli(), r.GetLockDeadlineUnixMs(), float64(5*time.Second/time.Millisecond))
		} else {
			assert.Empty(t, r.GetOwnerMemberId())
			assert.Zero(t, r.GetLockDeadlineUnixMs())
		}
	}

	// REST: the route, its bound, and its refusal.
	r := s.rest(t, http.MethodGet, "/v1/share-groups/w/partitions:state?maxRanges=2", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	rp := r.Body["topics"].([]any)[0].(map[string]any)["partitions"].([]any)[0].(map[string]any)
	assert.Len(t, rp["ranges"], 2)
	assert.Equal(t, true, rp["truncated"])
	first := rp["ranges"].([]any)[0].(map[string]any)
	assert.Equal(t, "IN_FLIGHT_STATE_ACQUIRED", first["state"])
	assert.Equal(t, "m1", first["ownerMemberId"])
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/share-groups/w/partitions:state?maxRanges=-1", ""), http.StatusBadRequest, "INVALID_REQUEST")
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/share-groups/nope/partitions:state", ""), http.StatusNotFound, "GROUP_ID_NOT_FOUND")
}
