package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// Membership and the admin RPCs through the real
// server: gRPC over bufconn, REST through the gateway.

const (
	stateEmpty  = sharelogv1.ShareGroupState_SHARE_GROUP_STATE_EMPTY
	stateStable = sharelogv1.ShareGroupState_SHARE_GROUP_STATE_STABLE
	unknownTP   = sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION
	outOfRange  = sharelogv1.ErrorCode_ERROR_CODE_OFFSET_OUT_OF_RANGE
)

func hbReq(group, member string, epoch int32, subs ...string) *sharelogv1.ShareGroupHeartbeatRequest {
	return &sharelogv1.ShareGroupHeartbeatRequest{GroupId: group, MemberId: member, MemberEpoch: epoch, SubscribedTopicNames: subs}
}

func (s *shareStack) hb(t *testing.T, group, member string, epoch int32, subs ...string) *sharelogv1.ShareGroupHeartbeatResponse {
	t.Helper()
	resp, err := s.sg.ShareGroupHeartbeat(context.Background(), hbReq(group, member, epoch, subs...))
	require.NoError(t, err)
	return resp
}

func (s *shareStack) describeGroup(t *testing.T, group string) *sharelogv1.DescribeShareGroupResponse {
	t.Helper()
	d, err := s.sg.DescribeShareGroup(context.Background(), &sharelogv1.DescribeShareGroupRequest{GroupId: group})
	require.NoError(t, err)
	return d
}

func (s *shareStack) groupOffsets(t *testing.T, group string, topics ...*sharelogv1.TopicPartitions) map[string][2]int64 {
	t.Helper()
	resp, err := s.sg.DescribeShareGroupOffsets(context.Background(), &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: group, Topics: topics})
	require.NoError(t, err)
	out := map[string][2]int64{}
	for _, tp := range resp.GetTopics() {
		for _, p := range tp.GetPartitions() {
			require.Equal(t, none, p.GetErrorCode(), "%s/%d: %s", tp.GetTopic(), p.GetPartition(), p.GetErrorMessage())
			out[fmt.Sprintf("%s/%d", tp.GetTopic(), p.GetPartition())] = [2]int64{p.GetStartOffset(), p.GetLag()}
		}
	}
	return out
}

// assignmentOf renders an assignment as "t:0,1;u:2" (nil: "<none>").
func assignmentOf(a *sharelogv1.Assignment) string {
	if a == nil {
		return "<none>"
	}
	var parts []string
	for _, tp := range a.GetTopicPartitions() {
		ps := make([]string, len(tp.GetPartitions()))
		for i, p := range tp.GetPartitions() {
			ps[i] = fmt.Sprint(p)
		}
		parts = append(parts, tp.GetTopic()+":"+strings.Join(ps, ","))
	}
	return strings.Join(parts, ";")
}

func (s *shareStack) listGroups(t *testing.T, filter sharelogv1.ShareGroupState) []string {
	t.Helper()
	resp, err := s.sg.ListShareGroups(context.Background(), &sharelogv1.ListShareGroupsRequest{StateFilter: filter})
	require.NoError(t, err)
	var out []string
	for _, g := range resp.GetGroups() {
		out = append(out, g.GetGroupId()+"="+strings.TrimPrefix(g.GetState().String(), "SHARE_GROUP_STATE_"))
	}
	return out
}

// Validation and the request-level errors of ShareGroupHeartbeat.
func TestHeartbeatErrors(t *testing.T) {
	t.Parallel()
	s := newShareStack(t, func(c *app.Config) { c.ShareGroupMaxSize = 2 })
	ctx := context.Background()
	s.createTopic(t, "t", 2, nil)
	s.hb(t, "g", "a", 0, "t")
	s.hb(t, "g", "b", 0, "t") // group epoch 2; a still at 1

	tests := []struct {
		name   string
		req    *sharelogv1.ShareGroupHeartbeatRequest
		code   codes.Code
		reason string
		meta   map[string]string
	}{
		{"empty group id", hbReq("", "m", 0, "t"), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"member id over 36 characters", hbReq("g", strings.Repeat("m", 37), 0, "t"), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"empty member id", hbReq("g", "", 1), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"epoch below -1", hbReq("g", "a", -2), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"join without subscriptions", hbReq("g", "c", 0), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"heartbeat to an unknown group", hbReq("nope", "a", 1), codes.NotFound, "GROUP_ID_NOT_FOUND", nil},
		{"leave an unknown group", hbReq("nope", "a", -1), codes.NotFound, "GROUP_ID_NOT_FOUND", nil},
		{"unknown member", hbReq("g", "x", 1), codes.NotFound, "UNKNOWN_MEMBER_ID", nil},
		{"unknown member leaving", hbReq("g", "x", -1), codes.NotFound, "UNKNOWN_MEMBER_ID", nil},
		{"epoch neither current nor previous", hbReq("g", "b", 1), codes.FailedPrecondition, "FENCED_MEMBER_EPOCH", map[string]string{"expected_epoch": "2"}},
		{"epoch ahead", hbReq("g", "a", 7), codes.FailedPrecondition, "FENCED_MEMBER_EPOCH", map[string]string{"expected_epoch": "1"}},
		{"new member beyond the max size", hbReq("g", "c", 0, "t"), codes.ResourceExhausted, "GROUP_MAX_SIZE_REACHED", map[string]string{"max_size": "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.sg.ShareGroupHeartbeat(ctx, tt.req)
			info := requireReason(t, err, tt.code, tt.reason)
			for k, v := range tt.meta {
				assert.Equal(t, v, info.GetMetadata()[k], k)
			}
		})
	}
	// Nothing changed: no group "nope", still two members at epoch 2.
	assert.Equal(t, []string{"g=STABLE"}, s.listGroups(t, 0))
	d := s.describeGroup(t, "g")
	assert.Len(t, d.GetMembers(), 2)
	assert.Equal(t, int32(2), d.GetGroupEpoch())
	// A rejoin is not a new member: no size check.
	r := s.hb(t, "g", "a", 0, "t")
	assert.Equal(t, int32(2), r.GetMemberEpoch())
	assert.Equal(t, "t:0", assignmentOf(r.GetAssignment()))
}

// Join, heartbeat and leave; epochs; when the assignment is sent.
func TestHeartbeatProtocol(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "t", 4, nil)

	// Join creates the group: epoch 1, the full assignment, the interval.
	r := s.hb(t, "g", "a", 0, "t")
	assert.Equal(t, "a", r.GetMemberId())
	assert.Equal(t, int32(1), r.GetMemberEpoch())
	assert.Equal(t, int32(5000), r.GetHeartbeatIntervalMs())
	assert.Equal(t, "t:0,1,2,3", assignmentOf(r.GetAssignment()))
	assert.Equal(t, []string{"g=STABLE"}, s.listGroups(t, 0))

	steps := []struct {
		member     string
		epoch      int32
		subs       []string
		wantEpoch  int32
		wantAssign string
		why        string
	}{
		{"a", 1, nil, 1, "<none>", "unchanged: not sent"},
		{"b", 0, []string{"t"}, 2, "t:2,3", "a join: the group epoch increments"},
		{"a", 1, nil, 2, "t:0,1", "behind the target: takes it and its epoch, changed: sent"},
		{"a", 2, nil, 2, "<none>", "up to date"},
		{"a", 1, nil, 2, "t:0,1", "the previous epoch was used: sent"},
		{"a", 2, []string{"t"}, 2, "t:0,1", "subscriptions sent: sent; the same subscription changes nothing"},
		{"b", 2, []string{"t", "u"}, 3, "t:2,3", "a subscription change increments the epoch; u does not exist yet"},
		{"a", 2, nil, 3, "<none>", "new epoch, same assignment: not sent"},
	}
	for _, st := range steps {
		r := s.hb(t, "g", st.member, st.epoch, st.subs...)
		assert.Equal(t, st.wantEpoch, r.GetMemberEpoch(), st.why)
		assert.Equal(t, st.wantAssign, assignmentOf(r.GetAssignment()), st.why)
		assert.Equal(t, int32(5000), r.GetHeartbeatIntervalMs(), "in every response")
	}

	// A subscribed topic is created: the epoch increments and u is assigned.
	s.createTopic(t, "u", 1, nil)
	r = s.hb(t, "g", "b", 3)
	assert.Equal(t, int32(4), r.GetMemberEpoch())
	assert.Equal(t, "t:2,3;u:0", assignmentOf(r.GetAssignment()))
	d := s.describeGroup(t, "g")
	assert.Equal(t, int32(4), d.GetGroupEpoch())
	assert.Equal(t, int32(4), d.GetAssignmentEpoch())
	// ... and deleted.
	_, err := s.log.DeleteTopic(context.Background(), &sharelogv1.DeleteTopicRequest{Name: "u"})
	require.NoError(t, err)
	r = s.hb(t, "g", "b", 4)
	assert.Equal(t, int32(5), r.GetMemberEpoch())
	assert.Equal(t, "t:2,3", assignmentOf(r.GetAssignment()))

	// Leave: epoch -1, no assignment; the other member takes everything.
	r = s.hb(t, "g", "b", -1)
	assert.Equal(t, int32(-1), r.GetMemberEpoch())
	assert.Nil(t, r.GetAssignment())
	assert.Equal(t, int32(5000), r.GetHeartbeatIntervalMs())
	r = s.hb(t, "g", "a", 3)
	assert.Equal(t, int32(6), r.GetMemberEpoch())
	assert.Equal(t, "t:0,1,2,3", assignmentOf(r.GetAssignment()))
	s.hb(t, "g", "a", -1)
	assert.Equal(t, []string{"g=EMPTY"}, s.listGroups(t, 0))
	assert.Equal(t, int32(7), s.describeGroup(t, "g").GetGroupEpoch())
}

// Simple assignor through the server: balanced, shared when members
// outnumber partitions (7 on 3 → 3, 2, 2), sticky.
func TestAssignorThroughServer(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "t", 3, nil)
	epochs := map[string]int32{}
	for i := range 7 {
		m := fmt.Sprintf("m%d", i)
		epochs[m] = s.hb(t, "g", m, 0, "t").GetMemberEpoch()
	}
	assignments := map[string]string{}
	for m, ep := range epochs {
		r := s.hb(t, "g", m, ep, "t")
		assert.Equal(t, int32(7), r.GetMemberEpoch())
		assignments[m] = assignmentOf(r.GetAssignment())
	}
	shares := map[string]int{}
	for _, a := range assignments {
		shares[a]++
	}
	assert.Equal(t, map[string]int{"t:0": 3, "t:1": 2, "t:2": 2}, shares)

	// Sticky: one member leaves, the rest keep their partitions but one
	// (so that the shares become 2, 2, 2).
	s.hb(t, "g", "m6", -1)
	moved := 0
	for m := range epochs {
		if m == "m6" {
			continue
		}
		r := s.hb(t, "g", m, 7, "t")
		if assignmentOf(r.GetAssignment()) != assignments[m] {
			moved++
		}
	}
	assert.LessOrEqual(t, moved, 1)
}

// Partitions are initialised before they first appear in an
// assignment; leaving the group neither ends sessions nor releases records.
func TestAssignmentInitialisesPartitions(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "t", 2, nil)
	s.produceN(t, "t", 0, 5)
	s.hb(t, "g", "a", 0, "t")
	// auto_offset_reset latest, evaluated at the join, before any fetch.
	assert.Equal(t, map[string][2]int64{"t/0": {5, 0}, "t/1": {0, 0}}, s.groupOffsets(t, "g"))
	s.produceN(t, "t", 0, 3)
	assert.Equal(t, map[string][2]int64{"t/0": {5, 3}, "t/1": {0, 0}}, s.groupOffsets(t, "g"))
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "a", Topics: topicReq("t", part(0))})
	assert.Equal(t, []rng{{5, 7, 1}}, acquired(partitionOf(r, "t", 0)))

	s.hb(t, "g", "a", -1)
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "b", Topics: topicReq("t", part(0))})
	assert.Empty(t, acquired(partitionOf(r, "t", 0)), "a's records are still acquired by its session")
	ack, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "a", ShareSessionEpoch: 1,
		Topics: topicReq("t", part(0, batch(5, 7, accept)))})
	require.NoError(t, err)
	assert.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())
	assert.Equal(t, map[string][2]int64{"t/0": {8, 0}, "t/1": {0, 0}}, s.groupOffsets(t, "g"), "lag falls to 0")
}

// Session timeout through the server (the one place a real wait of
// about a second is unavoidable: the smallest session_timeout_ms is 1 000).
func TestMemberExpiryThroughServer(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "t", 2, nil)
	_, err := s.sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
		Config: &sharelogv1.ShareGroupConfig{SessionTimeoutMs: proto.Int32(1000), HeartbeatIntervalMs: proto.Int32(100)}})
	require.NoError(t, err)
	a := s.hb(t, "g", "a", 0, "t")
	assert.Equal(t, int32(100), a.GetHeartbeatIntervalMs())
	joined := time.Now()
	s.hb(t, "g", "b", 0, "t")
	epoch, got := a.GetMemberEpoch(), ""
	require.Eventually(t, func() bool { // a heartbeats every 100 ms, b never
		r := s.hb(t, "g", "a", epoch)
		epoch = r.GetMemberEpoch()
		if r.GetAssignment() != nil {
			got = assignmentOf(r.GetAssignment())
		}
		return got == "t:0,1" && epoch == 3
	}, 5*time.Second, 100*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(joined), time.Second, "not before the session timeout")
	d := s.describeGroup(t, "g")
	require.Len(t, d.GetMembers(), 1)
	assert.Equal(t, "a", d.GetMembers()[0].GetMemberId())
	_, err = s.sg.ShareGroupHeartbeat(ctx, hbReq("g", "b", 2))
	requireReason(t, err, codes.NotFound, "UNKNOWN_MEMBER_ID")
}

// The rack_id,, client_id (x-client-id metadata) and client_host (peer
// address; for REST the HTTP client's, via x-forwarded-for) are described.
func TestMemberClientInfo(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "t", 1, nil)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-client-id", "grpc-app")
	req := hbReq("g", "a", 0, "t", "later")
	req.RackId = proto.String("rack-1")
	_, err := s.sg.ShareGroupHeartbeat(ctx, req)
	require.NoError(t, err)

	body := `{"memberId":"b","memberEpoch":0,"subscribedTopicNames":["t"]}`
	hreq, err := http.NewRequest(http.MethodPost, s.http.URL+"/v1/share-groups/g:heartbeat", strings.NewReader(body))
	require.NoError(t, err)
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("X-Client-Id", "rest-app")
	resp, err := s.http.Client().Do(hreq)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	d := s.describeGroup(t, "g")
	require.Len(t, d.GetMembers(), 2)
	ma, mb := d.GetMembers()[0], d.GetMembers()[1]
	assert.Equal(t, "a", ma.GetMemberId())
	assert.Equal(t, "rack-1", ma.GetRackId())
	assert.Equal(t, "grpc-app", ma.GetClientId())
	assert.Equal(t, "bufconn", ma.GetClientHost(), "the peer address (an in-memory connection here)")
	assert.Equal(t, []string{"later", "t"}, ma.GetSubscribedTopicNames())
	assert.Equal(t, "t:0", assignmentOf(ma.GetAssignment()))
	assert.Equal(t, int32(1), ma.GetMemberEpoch())
	assert.Equal(t, "rest-app", mb.GetClientId())
	assert.Equal(t, "127.0.0.1", mb.GetClientHost())
	assert.Empty(t, mb.GetRackId())

	// Absent metadata: empty client id.
	_, err = s.sg.ShareGroupHeartbeat(context.Background(), hbReq("g", "a", 1))
	require.NoError(t, err)
	assert.Empty(t, s.describeGroup(t, "g").GetMembers()[0].GetClientId())
	assert.Equal(t, "rack-1", s.describeGroup(t, "g").GetMembers()[0].GetRackId(), "an absent rack_id keeps the stored one")
}

// ListShareGroups and DescribeShareGroup.
func TestListAndDescribeShareGroups(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	for _, g := range []string{"c", "a"} {
		_, err := s.sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: g,
			Config: &sharelogv1.ShareGroupConfig{DeliveryCountLimit: proto.Int32(3)}})
		require.NoError(t, err)
	}
	s.hb(t, "b", "m", 0, "t")
	assert.Equal(t, []string{"a=EMPTY", "b=STABLE", "c=EMPTY"}, s.listGroups(t, 0), "sorted by group id")
	assert.Equal(t, []string{"a=EMPTY", "c=EMPTY"}, s.listGroups(t, stateEmpty))
	assert.Equal(t, []string{"b=STABLE"}, s.listGroups(t, stateStable))
	assert.Empty(t, s.listGroups(t, sharelogv1.ShareGroupState_SHARE_GROUP_STATE_DEAD))
	_, err := s.sg.ListShareGroups(ctx, &sharelogv1.ListShareGroupsRequest{StateFilter: 42})
	requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")

	_, err = s.sg.DescribeShareGroup(ctx, &sharelogv1.DescribeShareGroupRequest{GroupId: "nope"})
	requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")
	d := s.describeGroup(t, "a")
	assert.Equal(t, "a", d.GetGroupId())
	assert.Equal(t, stateEmpty, d.GetState())
	assert.Empty(t, d.GetMembers())
	assert.Equal(t, int32(3), d.GetConfig().GetDeliveryCountLimit(), "set")
	assert.Equal(t, int32(30000), d.GetConfig().GetRecordLockDurationMs(), "default")
	assert.Equal(t, "latest", d.GetConfig().GetAutoOffsetReset())
	assert.Equal(t, int32(45000), d.GetConfig().GetSessionTimeoutMs())
	assert.Equal(t, int32(5000), d.GetConfig().GetHeartbeatIntervalMs())
	assert.Equal(t, int32(2000), d.GetConfig().GetPartitionMaxRecordLocks())
	d = s.describeGroup(t, "b")
	assert.Equal(t, stateStable, d.GetState())
	assert.Equal(t, int32(1), d.GetGroupEpoch())
	assert.Equal(t, int32(1), d.GetAssignmentEpoch())
	require.Len(t, d.GetMembers(), 1)
	assert.Equal(t, "", assignmentOf(d.GetMembers()[0].GetAssignment()), "t does not exist")
}

// DescribeShareGroupOffsets: start offset (SPSO) and lag.
func TestDescribeShareGroupOffsets(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	_, err := s.sg.DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g"})
	requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")
	s.createTopic(t, "t", 2, nil)
	s.createTopic(t, "u", 1, nil)
	s.earliestGroup(t, "g", nil)
	assert.Empty(t, s.groupOffsets(t, "g"), "no share state yet")
	s.produceN(t, "t", 0, 10)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: topicReq("t", part(0))})
	require.Equal(t, []rng{{0, 9, 1}}, acquired(partitionOf(r, "t", 0)))
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1,
		Topics: topicReq("t", part(0, batch(0, 2, accept), batch(5, 6, reject)))})
	require.Equal(t, none, partitionOf(r, "t", 0).GetAcknowledgeErrorCode())

	// SPSO 3; 5 and 6 are terminal: lag = 10 - 3 - 2. No topics: every
	// topic with share state, all its partitions.
	assert.Equal(t, map[string][2]int64{"t/0": {3, 5}, "t/1": {-1, -1}}, s.groupOffsets(t, "g"))
	assert.Equal(t, map[string][2]int64{"u/0": {-1, -1}}, s.groupOffsets(t, "g", &sharelogv1.TopicPartitions{Topic: "u"}))

	resp, err := s.sg.DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g",
		Topics: []*sharelogv1.TopicPartitions{{Topic: "t", Partitions: []int32{0, 9}}, {Topic: "nope", Partitions: []int32{0}}}})
	require.NoError(t, err)
	require.Len(t, resp.GetTopics(), 2)
	got := resp.GetTopics()[0].GetPartitions()
	assert.Equal(t, []any{int32(0), int64(3), int64(5), none}, []any{got[0].GetPartition(), got[0].GetStartOffset(), got[0].GetLag(), got[0].GetErrorCode()})
	assert.Equal(t, []any{int32(9), int64(-1), int64(-1), unknownTP}, []any{got[1].GetPartition(), got[1].GetStartOffset(), got[1].GetLag(), got[1].GetErrorCode()})
	nope := resp.GetTopics()[1].GetPartitions()[0]
	assert.Equal(t, []any{int64(-1), int64(-1), unknownTP}, []any{nope.GetStartOffset(), nope.GetLag(), nope.GetErrorCode()})
	assert.NotEmpty(t, nope.GetErrorMessage())

	// Share state goes with its topic.
	_, err = s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "t"})
	require.NoError(t, err)
	assert.Empty(t, s.groupOffsets(t, "g"))
	s.createTopic(t, "t", 1, nil)
	assert.Equal(t, map[string][2]int64{"t/0": {-1, -1}}, s.groupOffsets(t, "g", &sharelogv1.TopicPartitions{Topic: "t"}))
}

func (s *shareStack) alter(t *testing.T, group, topic string, offsets ...int64) []sharelogv1.ErrorCode {
	t.Helper()
	at := &sharelogv1.AlterShareGroupOffsetsTopic{Topic: topic}
	for i := 0; i < len(offsets); i += 2 {
		at.Partitions = append(at.Partitions, &sharelogv1.AlterShareGroupOffsetsPartition{Partition: int32(offsets[i]), StartOffset: offsets[i+1]})
	}
	resp, err := s.sg.AlterShareGroupOffsets(context.Background(), &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: group,
		Topics: []*sharelogv1.AlterShareGroupOffsetsTopic{at}})
	require.NoError(t, err)
	var out []sharelogv1.ErrorCode
	for _, p := range resp.GetTopics()[0].GetPartitions() {
		out = append(out, p.GetErrorCode())
	}
	return out
}

// restart closes the server and starts another on the same data directory.
func (s *shareStack) restart(t *testing.T) *shareStack {
	t.Helper()
	require.NoError(t, s.srv.Close())
	dir := s.dataDir
	return newShareStack(t, func(c *app.Config) { c.DataDir = dir })
}

// AlterShareGroupOffsets.
func TestAlterShareGroupOffsets(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	s.createTopic(t, "t", 2, nil)
	s.produceN(t, "t", 0, 10)
	_, err := s.log.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: "t",
		Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 2}}}}})
	require.NoError(t, err)

	// Creates the group; per-partition results; bounds are [log start, high watermark].
	assert.Equal(t, []sharelogv1.ErrorCode{none, none, unknownTP}, s.alter(t, "g", "t", 0, 4, 1, 0, 7, 0))
	assert.Equal(t, []string{"g=EMPTY"}, s.listGroups(t, 0))
	assert.Equal(t, []sharelogv1.ErrorCode{outOfRange, outOfRange}, s.alter(t, "g", "t", 0, 1, 1, 1))
	assert.Equal(t, []sharelogv1.ErrorCode{unknownTP}, s.alter(t, "g", "nope", 0, 0))
	assert.Equal(t, map[string][2]int64{"t/0": {4, 6}, "t/1": {0, 0}}, s.groupOffsets(t, "g"))
	assert.Equal(t, []sharelogv1.ErrorCode{none}, s.alter(t, "g", "t", 0, 10))
	_, err = s.sg.AlterShareGroupOffsets(ctx, &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: "g", Topics: []*sharelogv1.AlterShareGroupOffsetsTopic{
		{Topic: "t", Partitions: []*sharelogv1.AlterShareGroupOffsetsPartition{{Partition: 0}, {Partition: 0}}}}})
	requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")

	// Restarts at the start offset with no in-flight state.
	assert.Equal(t, []sharelogv1.ErrorCode{none}, s.alter(t, "g", "t", 0, 2))
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: topicReq("t", part(0))})
	require.Equal(t, []rng{{2, 9, 1}}, acquired(partitionOf(r, "t", 0)))
	assert.Equal(t, []sharelogv1.ErrorCode{none}, s.alter(t, "g", "t", 0, 6))
	ack, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1,
		Topics: topicReq("t", part(0, batch(6, 7, accept)))})
	require.NoError(t, err)
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_INVALID_RECORD_STATE, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode(),
		"records acquired before the reset are the session's no more")
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 2})
	assert.Equal(t, []rng{{6, 9, 1}}, acquired(partitionOf(r, "t", 0)), "counts reset")

	// Members present: NON_EMPTY_GROUP, nothing changes.
	s.hb(t, "g", "a", 0, "t")
	_, err = s.sg.AlterShareGroupOffsets(ctx, &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: "g", Topics: []*sharelogv1.AlterShareGroupOffsetsTopic{
		{Topic: "t", Partitions: []*sharelogv1.AlterShareGroupOffsetsPartition{{Partition: 0, StartOffset: 3}}}}})
	requireReason(t, err, codes.FailedPrecondition, "NON_EMPTY_GROUP")
	assert.Equal(t, int64(6), s.groupOffsets(t, "g")["t/0"][0])
	s.hb(t, "g", "a", -1)

	// Durable.
	assert.Equal(t, []sharelogv1.ErrorCode{none}, s.alter(t, "g", "t", 0, 8))
	s2 := s.restart(t)
	assert.Equal(t, map[string][2]int64{"t/0": {8, 2}, "t/1": {0, 0}}, s2.groupOffsets(t, "g"))
}

// DeleteShareGroupOffsets.
func TestDeleteShareGroupOffsets(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	del := func(group string, topics ...string) (*sharelogv1.DeleteShareGroupOffsetsResponse, error) {
		return s.sg.DeleteShareGroupOffsets(ctx, &sharelogv1.DeleteShareGroupOffsetsRequest{GroupId: group, Topics: topics})
	}
	_, err := del("g", "t")
	requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")
	s.createTopic(t, "t", 2, nil)
	s.createTopic(t, "u", 1, nil)
	s.produceN(t, "t", 0, 4)
	s.alter(t, "g", "t", 0, 1, 1, 0)

	s.hb(t, "g", "a", 0, "u")
	_, err = del("g", "t")
	requireReason(t, err, codes.FailedPrecondition, "NON_EMPTY_GROUP")
	s.hb(t, "g", "a", -1)

	resp, err := del("g", "t", "nope")
	require.NoError(t, err)
	require.Len(t, resp.GetTopics(), 2)
	assert.Equal(t, none, resp.GetTopics()[0].GetErrorCode())
	assert.Equal(t, unknownTP, resp.GetTopics()[1].GetErrorCode())
	assert.NotEmpty(t, resp.GetTopics()[1].GetErrorMessage())
	resp, err = del("g", "t")
	require.NoError(t, err)
	assert.Equal(t, unknownTP, resp.GetTopics()[0].GetErrorCode(), "no share state left")
	assert.Equal(t, map[string][2]int64{"u/0": {0, 0}}, s.groupOffsets(t, "g"), "u was initialised by a's assignment")
	assert.Equal(t, map[string][2]int64{"t/0": {-1, -1}, "t/1": {-1, -1}}, s.groupOffsets(t, "g", &sharelogv1.TopicPartitions{Topic: "t"}))

	// Durable.
	_, err = del("g", "u")
	require.NoError(t, err)
	s2 := s.restart(t)
	assert.Empty(t, s2.groupOffsets(t, "g"))
}

// DeleteShareGroup.
func TestDeleteShareGroup(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	ctx := context.Background()
	del := func(group string) error {
		_, err := s.sg.DeleteShareGroup(ctx, &sharelogv1.DeleteShareGroupRequest{GroupId: group})
		return err
	}
	requireReason(t, del("g"), codes.NotFound, "GROUP_ID_NOT_FOUND")
	s.createTopic(t, "t", 1, nil)
	s.earliestGroup(t, "g", &sharelogv1.ShareGroupConfig{DeliveryCountLimit: proto.Int32(2)})
	s.produceN(t, "t", 0, 3)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: topicReq("t", part(0))})
	require.Equal(t, []rng{{0, 2, 1}}, acquired(partitionOf(r, "t", 0)))
	s.hb(t, "g", "a", 0, "t")
	requireReason(t, del("g"), codes.FailedPrecondition, "NON_EMPTY_GROUP")
	s.hb(t, "g", "a", -1)

	require.NoError(t, del("g"))
	_, err := s.sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1})
	requireReason(t, err, codes.NotFound, "SHARE_SESSION_NOT_FOUND")
	_, err = s.sg.GetShareGroupConfig(ctx, &sharelogv1.GetShareGroupConfigRequest{GroupId: "g"})
	requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")
	assert.Empty(t, s.listGroups(t, 0))

	// The ID may be reused: a new group with the defaults.
	s.hb(t, "g", "a", 0, "t")
	d := s.describeGroup(t, "g")
	assert.Equal(t, int32(5), d.GetConfig().GetDeliveryCountLimit())
	assert.Equal(t, int32(1), d.GetGroupEpoch())
	s.hb(t, "g", "a", -1)
	require.NoError(t, del("g"))

	// Durable.
	s2 := s.restart(t)
	assert.Empty(t, s2.listGroups(t, 0))
}

// The admin routes and the heartbeat over REST, with HTTP statuses and
// reasons.
func TestRESTShareGroupAdmin(t *testing.T) {
	t.Parallel()
	s := newShareStack(t, func(c *app.Config) { c.ShareGroupMaxSize = 1 })
	s.createTopic(t, "t", 2, nil)
	s.produceN(t, "t", 0, 3)

	// Heartbeat.
	r := s.rest(t, http.MethodPost, "/v1/share-groups/g:heartbeat", `{"memberId":"a","memberEpoch":0,"subscribedTopicNames":["t"]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, map[string]any{"memberId": "a", "memberEpoch": float64(1), "heartbeatIntervalMs": float64(5000),
		"assignment": map[string]any{"topicPartitions": []any{map[string]any{"topic": "t", "partitions": []any{float64(0), float64(1)}}}}}, r.Body)
	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:heartbeat", `{"memberId":"a","memberEpoch":1}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.NotContains(t, r.Body, "assignment", "unchanged: not sent")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:heartbeat", `{"memberId":"a","memberEpoch":0}`), http.StatusBadRequest, "INVALID_REQUEST")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/nope:heartbeat", `{"memberId":"a","memberEpoch":1}`), http.StatusNotFound, "GROUP_ID_NOT_FOUND")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:heartbeat", `{"memberId":"x","memberEpoch":1}`), http.StatusNotFound, "UNKNOWN_MEMBER_ID")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:heartbeat", `{"memberId":"a","memberEpoch":9}`), http.StatusBadRequest, "FENCED_MEMBER_EPOCH")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g:heartbeat", `{"memberId":"b","memberEpoch":0,"subscribedTopicNames":["t"]}`), http.StatusTooManyRequests, "GROUP_MAX_SIZE_REACHED")

	// List and describe.
	r = s.rest(t, http.MethodGet, "/v1/share-groups", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, []any{map[string]any{"groupId": "g", "state": "SHARE_GROUP_STATE_STABLE"}}, r.Body["groups"])
	r = s.rest(t, http.MethodGet, "/v1/share-groups?stateFilter=SHARE_GROUP_STATE_EMPTY", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Empty(t, r.Body["groups"])
	r = s.rest(t, http.MethodGet, "/v1/share-groups/g", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "SHARE_GROUP_STATE_STABLE", r.Body["state"])
	assert.Equal(t, float64(1), r.Body["groupEpoch"])
	members := r.Body["members"].([]any)
	require.Len(t, members, 1)
	assert.Equal(t, "127.0.0.1", members[0].(map[string]any)["clientHost"])
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/share-groups/nope", ""), http.StatusNotFound, "GROUP_ID_NOT_FOUND")

	// Offsets: describe, alter, delete — and NON_EMPTY_GROUP while a is a member.
	r = s.rest(t, http.MethodGet, "/v1/share-groups/g/offsets", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, []any{map[string]any{"topic": "t", "partitions": []any{
		map[string]any{"partition": float64(0), "startOffset": "3", "lag": "0", "errorCode": "ERROR_CODE_NONE", "errorMessage": ""},
		map[string]any{"partition": float64(1), "startOffset": "0", "lag": "0", "errorCode": "ERROR_CODE_NONE", "errorMessage": ""},
	}}}, r.Body["topics"])
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/share-groups/nope/offsets", ""), http.StatusNotFound, "GROUP_ID_NOT_FOUND")
	alter := `{"topics":[{"topic":"t","partitions":[{"partition":0,"startOffset":"0"},{"partition":1,"startOffset":"5"}]}]}`
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g/offsets:alter", alter), http.StatusBadRequest, "NON_EMPTY_GROUP")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/g/offsets:delete", `{"topics":["t"]}`), http.StatusBadRequest, "NON_EMPTY_GROUP")
	requireRESTError(t, s.rest(t, http.MethodDelete, "/v1/share-groups/g", ""), http.StatusBadRequest, "NON_EMPTY_GROUP")
	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:heartbeat", `{"memberId":"a","memberEpoch":-1}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, float64(-1), r.Body["memberEpoch"])

	r = s.rest(t, http.MethodPost, "/v1/share-groups/g/offsets:alter", alter)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	parts := r.Body["topics"].([]any)[0].(map[string]any)["partitions"].([]any)
	assert.Equal(t, "ERROR_CODE_NONE", parts[0].(map[string]any)["errorCode"])
	assert.Equal(t, "ERROR_CODE_OFFSET_OUT_OF_RANGE", parts[1].(map[string]any)["errorCode"])
	r = s.rest(t, http.MethodPost, "/v1/share-groups/new/offsets:alter", alter)
	require.Equal(t, http.StatusOK, r.Status, "creates the group: %s", r.Raw)

	r = s.rest(t, http.MethodPost, "/v1/share-groups/g/offsets:delete", `{"topics":["t","nope"]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "ERROR_CODE_NONE", r.Body["topics"].([]any)[0].(map[string]any)["errorCode"])
	assert.Equal(t, "ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION", r.Body["topics"].([]any)[1].(map[string]any)["errorCode"])
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/share-groups/nope/offsets:delete", `{"topics":["t"]}`), http.StatusNotFound, "GROUP_ID_NOT_FOUND")

	// Delete.
	r = s.rest(t, http.MethodDelete, "/v1/share-groups/g", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	requireRESTError(t, s.rest(t, http.MethodDelete, "/v1/share-groups/g", ""), http.StatusNotFound, "GROUP_ID_NOT_FOUND")
	r = s.rest(t, http.MethodGet, "/v1/share-groups", "")
	assert.Equal(t, []any{map[string]any{"groupId": "new", "state": "SHARE_GROUP_STATE_EMPTY"}}, r.Body["groups"])
}
