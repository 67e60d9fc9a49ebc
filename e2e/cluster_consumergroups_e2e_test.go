package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
)

func withKafka(c *app.Config) { c.KafkaAddr, c.GroupInitialRebalanceDelay = "127.0.0.1:0", 0 }

// retryUnavailable calls fn until it answers other than UNAVAILABLE (a
// group or partition changing hands answers NOT_OWNER, retryable).
func retryUnavailable[T any](t *testing.T, fn func() (T, error)) (T, error) {
	t.Helper()
	var v T
	var err error
	require.Eventually(t, func() bool {
		v, err = fn()
		return status.Code(err) != codes.Unavailable
	}, 20*time.Second, 50*time.Millisecond, "last error: %v", err)
	return v, err
}

// groupServiceThrough runs a franz-go group "app" through kafkaSeed on
// topic t (3 partitions, 10 records each), then drives ConsumerGroupService
// at every instance of via — describe with its member, offsets with lag,
// the refusals while it is live, then reset and delete once it left — and
// requires every instance to answer alike, whichever coordinates it.
func groupServiceThrough(t *testing.T, log sharelogv1.LogServiceClient, kafkaSeed string, via []*clusterInstance) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for p := range int32(3) {
		var recs []*sharelogv1.Record
		for i := range 10 {
			recs = append(recs, &sharelogv1.Record{Value: fmt.Appendf(nil, "p%d-%d", p, i)})
		}
		_, err := retryUnavailable(t, func() (*sharelogv1.ProduceResponse, error) {
			return log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p, Records: recs})
		})
		require.NoError(t, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaSeed), kgo.ConsumerGroup("app"), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ClientID("cluster-consumer"))
	require.NoError(t, err)
	defer cl.Close()
	for got := 0; got < 30; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of 30", got)
		got += fs.NumRecords()
	}
	require.NoError(t, cl.CommitUncommittedOffsets(ctx))
	p := int32(2)
	_, err = retryUnavailable(t, func() (*sharelogv1.ProduceResponse, error) {
		return log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p, Records: []*sharelogv1.Record{{Value: []byte("x")}}})
	})
	require.NoError(t, err) // lag 1 on partition 2

	lagAt := func(cg sharelogv1.ConsumerGroupServiceClient) map[int32][3]int64 { // committed, log end, lag
		off, err := retryUnavailable(t, func() (*sharelogv1.FetchOffsetsResponse, error) {
			return cg.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: "app", Topics: []string{"t"}})
		})
		require.NoError(t, err)
		require.Len(t, off.GetTopics(), 1)
		out := map[int32][3]int64{}
		for _, p := range off.GetTopics()[0].GetPartitions() {
			out[p.GetPartition()] = [3]int64{p.GetCommittedOffset(), p.GetLogEndOffset(), p.GetLag()}
		}
		return out
	}
	for _, in := range via {
		cg := sharelogv1.NewConsumerGroupServiceClient(in.conn)
		d, err := retryUnavailable(t, func() (*sharelogv1.DescribeConsumerGroupResponse, error) {
			return cg.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "app"})
		})
		require.NoError(t, err, "describe at %s", in.id)
		require.Len(t, d.GetMembers(), 1, "at %s", in.id)
		assert.Equal(t, "cluster-consumer", d.GetMembers()[0].GetClientId(), "at %s", in.id)
		require.Len(t, d.GetMembers()[0].GetAssignment(), 1, "at %s", in.id)
		assert.ElementsMatch(t, []int32{0, 1, 2}, d.GetMembers()[0].GetAssignment()[0].GetPartitions(), "at %s", in.id)
		assert.Equal(t, map[int32][3]int64{0: {10, 10, 0}, 1: {10, 10, 0}, 2: {10, 11, 1}}, lagAt(cg), "offsets at %s", in.id)
		list, err := retryUnavailable(t, func() (*sharelogv1.ListConsumerGroupsResponse, error) {
			return cg.ListConsumerGroups(ctx, &sharelogv1.ListConsumerGroupsRequest{})
		})
		require.NoError(t, err, "list at %s", in.id)
		require.Len(t, list.GetGroups(), 1, "list at %s: the group, once", in.id)
		assert.Equal(t, int32(1), list.GetGroups()[0].GetMemberCount(), "list at %s", in.id)
		_, err = retryUnavailable(t, func() (*sharelogv1.DeleteConsumerGroupResponse, error) {
			return cg.DeleteConsumerGroup(ctx, &sharelogv1.DeleteConsumerGroupRequest{Group: "app"})
		})
		requireReason(t, err, codes.FailedPrecondition, "NON_EMPTY_GROUP")
	}

	cl.Close() // leaves the group
	last := sharelogv1.NewConsumerGroupServiceClient(via[len(via)-1].conn)
	require.Eventually(t, func() bool {
		d, err := last.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "app"})
		return err == nil && d.GetState() == "Empty" && len(d.GetMembers()) == 0
	}, 20*time.Second, 50*time.Millisecond, "the member left")

	// Reset at one instance, seen at every other.
	first := sharelogv1.NewConsumerGroupServiceClient(via[0].conn)
	res, err := retryUnavailable(t, func() (*sharelogv1.AlterOffsetsResponse, error) {
		return first.AlterOffsets(ctx, &sharelogv1.AlterOffsetsRequest{Group: "app", Topics: []*sharelogv1.AlterOffsetsTopic{
			{Topic: "t", Partitions: []int32{2}, ResetTo: sharelogv1.OffsetReset_OFFSET_RESET_EARLIEST}}})
	})
	require.NoError(t, err)
	require.Len(t, res.GetTopics(), 1)
	assert.Equal(t, int64(0), res.GetTopics()[0].GetPartitions()[0].GetOffset())
	for _, in := range via {
		assert.Equal(t, map[int32][3]int64{0: {10, 10, 0}, 1: {10, 10, 0}, 2: {0, 11, 11}},
			lagAt(sharelogv1.NewConsumerGroupServiceClient(in.conn)), "offsets at %s after the reset", in.id)
	}
	// Deleted at the last instance: gone at every one.
	_, err = retryUnavailable(t, func() (*sharelogv1.DeleteConsumerGroupResponse, error) {
		return last.DeleteConsumerGroup(ctx, &sharelogv1.DeleteConsumerGroupRequest{Group: "app"})
	})
	require.NoError(t, err)
	for _, in := range via {
		cg := sharelogv1.NewConsumerGroupServiceClient(in.conn)
		_, err := retryUnavailable(t, func() (*sharelogv1.DescribeConsumerGroupResponse, error) {
			return cg.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "app"})
		})
		requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")
		list, err := retryUnavailable(t, func() (*sharelogv1.ListConsumerGroupsResponse, error) {
			return cg.ListConsumerGroups(ctx, &sharelogv1.ListConsumerGroupsRequest{})
		})
		require.NoError(t, err)
		assert.Empty(t, list.GetGroups(), "list at %s after the delete", in.id)
	}
}

// Partitioned: the group is coordinated by the instance its Kafka client
// reached (a); ConsumerGroupService at b and c reaches it there, and
// ListConsumerGroups at each lists it once.
func TestPartitionedConsumerGroupService(t *testing.T) {
	ins := startPartitionedTrio(t, withKafka)
	groupServiceThrough(t, ins[1].log, ins[0].srv.KafkaAddr(), []*clusterInstance{ins[1], ins[2], ins[0]})
}

// Active-standby: the standby forwards every ConsumerGroupService call to
// the active instance, which serves them over its coordinator.
func TestActiveStandbyConsumerGroupService(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a", withKafka)
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startClusterInstance(t, js, prefix, "b", withKafka)
	b.waitReadyz(t, "cluster: standby, forwarding to a", 10*time.Second)
	createTopic(t, b.log, "t", 3)
	groupServiceThrough(t, b.log, a.srv.KafkaAddr(), []*clusterInstance{b, a})
}
