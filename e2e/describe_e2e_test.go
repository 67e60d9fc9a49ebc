package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
)

func TestDescribeClusterSingle(t *testing.T) {
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "b-topic", 2, nil)
	a := s.createTopic(t, "a-topic", 1, nil)
	b, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "b-topic"})
	require.NoError(t, err)
	_, err = sharelogv1.NewShareGroupServiceClient(s.conn).ShareGroupHeartbeat(ctx, &sharelogv1.ShareGroupHeartbeatRequest{
		GroupId: "g1", MemberId: "m1", SubscribedTopicNames: []string{"a-topic"}})
	require.NoError(t, err)

	got, err := s.log.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
	require.NoError(t, err)
	want := &sharelogv1.DescribeClusterResponse{
		Mode:      app.ModeSingle,
		Instances: []*sharelogv1.ClusterInstance{{InstanceId: "local", GrpcAddress: s.srv.GRPCAddr(), HttpAddress: s.srv.HTTPAddr()}},
		Partitions: []*sharelogv1.PartitionOwner{
			{Topic: "a-topic", TopicId: a.GetTopicId(), Partition: 0, OwnerId: "local"},
			{Topic: "b-topic", TopicId: b.GetTopicId(), Partition: 0, OwnerId: "local"},
			{Topic: "b-topic", TopicId: b.GetTopicId(), Partition: 1, OwnerId: "local"},
		},
		Groups: []*sharelogv1.GroupCoordinator{{GroupId: "g1", CoordinatorId: "local"}},
	}
	require.True(t, proto.Equal(want, got), "got %v", got)

	r := s.rest(t, http.MethodGet, "/v1/cluster", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.Equal(t, "single", r.Body["mode"])
	require.Len(t, r.Body["partitions"], 3)
	require.Equal(t, "a-topic", r.Body["partitions"].([]any)[0].(map[string]any)["topic"])
	require.Equal(t, "g1", r.Body["groups"].([]any)[0].(map[string]any)["groupId"])
}

func TestClusterDescribeClusterActiveStandby(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startClusterInstance(t, js, prefix, "b")
	b.waitReadyz(t, "cluster: standby, forwarding to a", 10*time.Second)
	ctx := context.Background()
	topic := createTopic(t, b.log, "t", 2)

	// Asked of the standby, answered (forwarded) by the active instance;
	// both instances are listed once their heartbeats are in.
	var got *sharelogv1.DescribeClusterResponse
	require.Eventually(t, func() bool {
		got, err = b.log.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
		return err == nil && len(got.GetInstances()) == 2
	}, 5*time.Second, 50*time.Millisecond, "describe: %v %v", got, err)
	require.Equal(t, app.ModeActiveStandby, got.GetMode())
	for i, in := range []*clusterInstance{a, b} {
		want := &sharelogv1.ClusterInstance{InstanceId: in.id, GrpcAddress: in.srv.GRPCAddr(), HttpAddress: in.srv.HTTPAddr()}
		require.True(t, proto.Equal(want, got.GetInstances()[i]), "instance %d: %v", i, got.GetInstances()[i])
	}
	require.Len(t, got.GetPartitions(), 2)
	epoch := got.GetPartitions()[0].GetEpoch()
	require.Positive(t, epoch)
	for i, p := range got.GetPartitions() {
		require.Equal(t, "t", p.GetTopic())
		require.Equal(t, topic.GetTopicId(), p.GetTopicId())
		require.Equal(t, int32(i), p.GetPartition())
		require.Equal(t, "a", p.GetOwnerId())
		require.Equal(t, epoch, p.GetEpoch())
	}

	// Renewals (every TTL/4) raise the lease's revision, not the epoch.
	kv, err := jetstream.New(js.Connect(t))
	require.NoError(t, err)
	leases, err := kv.KeyValue(ctx, cluster.LeaseBucket(prefix))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := leases.Get(ctx, "active")
		return err == nil && e.Revision() > uint64(epoch)+1
	}, 5*time.Second, 20*time.Millisecond)
	again, err := a.log.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
	require.NoError(t, err)
	require.Equal(t, epoch, again.GetPartitions()[0].GetEpoch())

	// a stops: b becomes the owner, at a higher epoch, and a is gone from
	// the instances (its heartbeat deleted on the way out).
	require.NoError(t, a.srv.Close())
	b.waitReadyz(t, "cluster: active", 5*time.Second)
	require.Eventually(t, func() bool {
		got, err = b.log.DescribeCluster(ctx, &sharelogv1.DescribeClusterRequest{})
		return err == nil && len(got.GetInstances()) == 1
	}, 5*time.Second, 50*time.Millisecond, "describe: %v %v", got, err)
	require.Equal(t, "b", got.GetInstances()[0].GetInstanceId())
	require.Equal(t, "b", got.GetPartitions()[1].GetOwnerId())
	require.Greater(t, got.GetPartitions()[1].GetEpoch(), epoch)
}
