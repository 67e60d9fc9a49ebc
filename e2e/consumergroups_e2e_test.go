package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// TestConsumerGroupService: a franz-go consumer group commits over Kafka;
// ConsumerGroupService (gRPC, and REST through the real gateway) shows
// its member, assignment, committed offsets and lag; a reset is refused
// while the member is live and goes through, dry run first, once it left;
// a simple commit is refused and then allowed likewise; the group is
// deleted (docs/consumer-groups.md "Over gRPC and REST").
func TestConsumerGroupService(t *testing.T) {
	st := newStack(t, app.Options{}, func(c *app.Config) {
		c.KafkaAddr, c.GroupInitialRebalanceDelay = "127.0.0.1:0", 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cg := sharelogv1.NewConsumerGroupServiceClient(st.conn)
	_, err := st.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 2})
	require.NoError(t, err)
	produce := func(p int32, n int) {
		var recs []*sharelogv1.Record
		for i := range n {
			recs = append(recs, &sharelogv1.Record{Value: fmt.Appendf(nil, "p%d-%d", p, i)})
		}
		_, err := st.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "orders", Partition: &p, Records: recs})
		require.NoError(t, err)
	}
	produce(0, 4)
	produce(1, 6)

	cl, err := kgo.NewClient(kgo.SeedBrokers(st.srv.KafkaAddr()), kgo.ConsumerGroup("app"), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ClientID("e2e-consumer"))
	require.NoError(t, err)
	defer cl.Close()
	got := 0
	for got < 10 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		got += fs.NumRecords()
	}
	require.NoError(t, cl.CommitUncommittedOffsets(ctx))
	produce(1, 3) // lag 3 on partition 1

	list, err := cg.ListConsumerGroups(ctx, &sharelogv1.ListConsumerGroupsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetGroups(), 1)
	assert.Equal(t, "app", list.GetGroups()[0].GetGroup())
	assert.Equal(t, int32(1), list.GetGroups()[0].GetMemberCount())
	assert.Equal(t, "consumer", list.GetGroups()[0].GetProtocolType())
	none, err := cg.ListConsumerGroups(ctx, &sharelogv1.ListConsumerGroupsRequest{State: "empty"})
	require.NoError(t, err)
	assert.Empty(t, none.GetGroups(), "the state filter")

	d, err := cg.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "app"})
	require.NoError(t, err)
	require.Len(t, d.GetMembers(), 1)
	m := d.GetMembers()[0]
	assert.Equal(t, "e2e-consumer", m.GetClientId())
	assert.NotEmpty(t, m.GetClientHost())
	require.Len(t, m.GetAssignment(), 1)
	assert.Equal(t, "orders", m.GetAssignment()[0].GetTopic())
	assert.ElementsMatch(t, []int32{0, 1}, m.GetAssignment()[0].GetPartitions())

	lagOf := func() map[int32][3]int64 { // partition -> committed, log end, lag (-1: unset)
		off, err := cg.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: "app", Topics: []string{"orders"}})
		require.NoError(t, err)
		require.Len(t, off.GetTopics(), 1)
		out := map[int32][3]int64{}
		for _, p := range off.GetTopics()[0].GetPartitions() {
			lag := int64(-1)
			if p.Lag != nil {
				lag = p.GetLag()
			}
			out[p.GetPartition()] = [3]int64{p.GetCommittedOffset(), p.GetLogEndOffset(), lag}
		}
		return out
	}
	assert.Equal(t, map[int32][3]int64{0: {4, 4, 0}, 1: {6, 9, 3}}, lagOf())

	// The REST surface, through the real gateway.
	r := st.rest(t, http.MethodGet, "/v1/consumer-groups/app/offsets", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	var fr sharelogv1.FetchOffsetsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.Raw), &fr))
	require.Len(t, fr.GetTopics(), 1)
	require.Len(t, fr.GetTopics()[0].GetPartitions(), 2)
	assert.Equal(t, int64(3), fr.GetTopics()[0].GetPartitions()[1].GetLag())

	// While the member is live: no reset, dry run or not; no simple commit.
	reset := func(dry bool) (*sharelogv1.AlterOffsetsResponse, error) {
		return cg.AlterOffsets(ctx, &sharelogv1.AlterOffsetsRequest{Group: "app", DryRun: dry, Topics: []*sharelogv1.AlterOffsetsTopic{
			{Topic: "orders", ResetTo: sharelogv1.OffsetReset_OFFSET_RESET_EARLIEST}}})
	}
	for _, dry := range []bool{true, false} {
		_, err = reset(dry)
		info := requireReason(t, err, codes.FailedPrecondition, "NON_EMPTY_GROUP")
		assert.Equal(t, "1", info.GetMetadata()["members"])
	}
	simple := &sharelogv1.CommitOffsetsRequest{Group: "app", Topics: []*sharelogv1.CommitOffsetsTopic{{Topic: "orders",
		Partitions: []*sharelogv1.CommitOffsetsPartition{{Partition: 1, Offset: 7, Metadata: "by grpc"}}}}}
	_, err = cg.CommitOffsets(ctx, simple)
	requireReason(t, err, codes.NotFound, "UNKNOWN_MEMBER_ID")
	r = st.rest(t, http.MethodDelete, "/v1/consumer-groups/app", "")
	assert.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
	assert.Contains(t, r.Raw, "NON_EMPTY_GROUP")

	cl.Close() // leaves the group
	require.Eventually(t, func() bool {
		d, err := cg.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "app"})
		return err == nil && d.GetState() == "Empty" && len(d.GetMembers()) == 0
	}, 20*time.Second, 20*time.Millisecond, "the member left")

	// Dry run over REST: planned, nothing written.
	r = st.rest(t, http.MethodPost, "/v1/consumer-groups/app/offsets:alter",
		`{"topics": [{"topic": "orders", "resetTo": "OFFSET_RESET_EARLIEST"}], "dryRun": true}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	var ar sharelogv1.AlterOffsetsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.Raw), &ar))
	assert.True(t, ar.GetDryRun())
	require.Len(t, ar.GetTopics(), 1)
	var planned [][2]int64
	for _, p := range ar.GetTopics()[0].GetPartitions() {
		assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, p.GetErrorCode())
		planned = append(planned, [2]int64{p.GetPreviousOffset(), p.GetOffset()})
	}
	assert.Equal(t, [][2]int64{{4, 0}, {6, 0}}, planned)
	assert.Equal(t, map[int32][3]int64{0: {4, 4, 0}, 1: {6, 9, 3}}, lagOf(), "a dry run writes nothing")

	// Executed: per partition, an explicit offset and a shift.
	res, err := cg.AlterOffsets(ctx, &sharelogv1.AlterOffsetsRequest{Group: "app", Topics: []*sharelogv1.AlterOffsetsTopic{
		{Topic: "orders", Partitions: []int32{0}, ResetTo: sharelogv1.OffsetReset_OFFSET_RESET_OFFSET, Offset: 2},
		{Topic: "orders", Partitions: []int32{1}, ResetTo: sharelogv1.OffsetReset_OFFSET_RESET_SHIFT_BY, ShiftBy: -5}}})
	require.NoError(t, err)
	require.Len(t, res.GetTopics(), 2)
	assert.Equal(t, int64(2), res.GetTopics()[0].GetPartitions()[0].GetOffset())
	assert.Equal(t, int64(1), res.GetTopics()[1].GetPartitions()[0].GetOffset())
	assert.Equal(t, map[int32][3]int64{0: {2, 4, 2}, 1: {1, 9, 8}}, lagOf())

	// A gRPC/REST consumer's own commit, now that the group is empty.
	cres, err := cg.CommitOffsets(ctx, simple)
	require.NoError(t, err)
	assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, cres.GetTopics()[0].GetPartitions()[0].GetErrorCode())
	assert.Equal(t, [3]int64{7, 9, 2}, lagOf()[1])

	r = st.rest(t, http.MethodDelete, "/v1/consumer-groups/app", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	_, err = cg.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "app"})
	requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")
	r = st.rest(t, http.MethodGet, "/v1/consumer-groups", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	var lr map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &lr))
	assert.Empty(t, lr["groups"])
}

// Without --kafka-addr the coordinator is served all the same: a gRPC
// consumer commits and reads its offsets, and the metrics show them
// (sharelog_consumer_group_committed_offset and _lag; no lag series for a
// partition without a commit).
func TestConsumerGroupServiceWithoutKafkaListener(t *testing.T) {
	st := newStack(t, app.Options{})
	ctx := context.Background()
	cg := sharelogv1.NewConsumerGroupServiceClient(st.conn)
	_, err := st.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "t", Partitions: 1})
	require.NoError(t, err)
	_, err = cg.CommitOffsets(ctx, &sharelogv1.CommitOffsetsRequest{Group: "mine", Topics: []*sharelogv1.CommitOffsetsTopic{{Topic: "t",
		Partitions: []*sharelogv1.CommitOffsetsPartition{{Partition: 0, Offset: 0}}}}})
	require.NoError(t, err)
	at := map[string]string{"group": "mine", "topic": "t", "partition": "0"}
	fams := scrapeMetrics(t, st)
	requireSeries(t, fams, "sharelog_consumer_group_committed_offset", at, 0)
	requireSeries(t, fams, "sharelog_consumer_group_lag", at, 0)
	requireSeries(t, fams, "sharelog_consumer_group_members", map[string]string{"group": "mine"}, 0)
	_, err = st.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Records: []*sharelogv1.Record{{Value: []byte("a")}, {Value: []byte("b")}}})
	require.NoError(t, err)
	requireSeries(t, scrapeMetrics(t, st), "sharelog_consumer_group_lag", at, 2)
	off, err := cg.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: "mine"})
	require.NoError(t, err)
	require.Len(t, off.GetTopics(), 1)
	p := off.GetTopics()[0].GetPartitions()[0]
	assert.Equal(t, int64(0), p.GetCommittedOffset())
	assert.Equal(t, int64(2), p.GetLogEndOffset())
	require.NotNil(t, p.Lag)
	assert.Equal(t, int64(2), p.GetLag())
}
