package router

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestOwnerAddr(t *testing.T) {
	insts := []*sharelogv1.ClusterInstance{{InstanceId: "a", GrpcAddress: "a:1"}, {InstanceId: "b", GrpcAddress: "b:1"}}
	split := &sharelogv1.DescribeClusterResponse{Instances: insts, Partitions: []*sharelogv1.PartitionOwner{
		{Topic: "t", Partition: 0, OwnerId: "a"}, {Topic: "t", Partition: 1, OwnerId: "b"}}}
	p0, p1, p9 := int32(0), int32(1), int32(9)
	groups := &sharelogv1.DescribeClusterResponse{Instances: insts, Partitions: split.Partitions, Groups: []*sharelogv1.GroupCoordinator{
		{GroupId: "g", CoordinatorId: "a"}, {GroupId: "h", CoordinatorId: "b"}}}
	for _, c := range []struct {
		name string
		view *sharelogv1.DescribeClusterResponse
		req  any
		want string
	}{
		{"by partition", split, &sharelogv1.FetchRequest{Topic: "t", Partition: 1}, "b:1"},
		{"optional partition set", split, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p0}, "a:1"},
		{"optional partition unset: the server routes", split, &sharelogv1.ProduceRequest{Topic: "t"}, ""},
		{"unknown partition", split, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p9}, ""},
		{"no topic field", split, &sharelogv1.ListTopicsRequest{}, ""},
		{"owner not among the instances", &sharelogv1.DescribeClusterResponse{Instances: insts,
			Partitions: []*sharelogv1.PartitionOwner{{Topic: "t", OwnerId: "x"}, {Topic: "t", Partition: 1, OwnerId: "a"}}},
			&sharelogv1.FetchRequest{Topic: "t"}, ""},
		{"one owner of everything takes every call", &sharelogv1.DescribeClusterResponse{Instances: insts,
			Partitions: []*sharelogv1.PartitionOwner{{Topic: "t", OwnerId: "b"}}, Groups: []*sharelogv1.GroupCoordinator{{GroupId: "g", CoordinatorId: "b"}}},
			&sharelogv1.ListTopicsRequest{}, "b:1"},
		{"a partition without an owner", &sharelogv1.DescribeClusterResponse{Instances: insts,
			Partitions: []*sharelogv1.PartitionOwner{{Topic: "t", OwnerId: "b"}, {Topic: "t", Partition: 1}}},
			&sharelogv1.FetchRequest{Topic: "t", Partition: p1}, ""},
		{"nothing owned", &sharelogv1.DescribeClusterResponse{Instances: insts}, &sharelogv1.ListTopicsRequest{}, ""},
		{"by group", groups, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "h"}, "b:1"},
		{"a share fetch by its first partition", groups, &sharelogv1.ShareFetchRequest{GroupId: "g", Topics: []*sharelogv1.ShareFetchTopic{
			{Topic: "t", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 1}, {Partition: 0}}}}}, "b:1"},
		{"an acknowledgement by its first partition", groups, &sharelogv1.ShareAcknowledgeRequest{GroupId: "h", Topics: []*sharelogv1.ShareFetchTopic{
			{Topic: "t", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}}}}}, "a:1"},
		{"a share fetch naming no partition: the seed", groups, &sharelogv1.ShareFetchRequest{GroupId: "h"}, ""},
		{"by group, admin call", groups, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g"}, "a:1"},
		{"a group without a coordinator", groups, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "new"}, ""},
		{"no group named", groups, &sharelogv1.ListShareGroupsRequest{}, ""},
	} {
		require.Equal(t, c.want, ownerAddr(c.view, c.req), c.name)
	}
}

// fakeConn answers every call with err and counts them.
type fakeConn struct {
	err   error
	calls []string
}

func (f *fakeConn) Invoke(_ context.Context, method string, _, _ any, _ ...grpc.CallOption) error {
	f.calls = append(f.calls, method)
	return f.err
}

func (f *fakeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, f.err
}

func TestSeedServesWhenTheViewCannotBeRead(t *testing.T) {
	seed := &fakeConn{err: status.Error(codes.Unimplemented, "no DescribeCluster here")}
	dialled := false
	c := New(seed, func(string) (grpc.ClientConnInterface, error) { dialled = true; return nil, errors.New("no") }, Options{RetryFailed: time.Hour})
	_, err := sharelogv1.NewLogServiceClient(c).Fetch(context.Background(), &sharelogv1.FetchRequest{Topic: "t"})
	require.Equal(t, codes.Unimplemented, status.Code(err))
	require.Equal(t, []string{sharelogv1.LogService_DescribeCluster_FullMethodName, sharelogv1.LogService_Fetch_FullMethodName}, seed.calls)
	require.False(t, dialled)
	// The failed view is not read again before RetryFailed.
	_, _ = sharelogv1.NewLogServiceClient(c).Fetch(context.Background(), &sharelogv1.FetchRequest{Topic: "t"})
	require.Len(t, seed.calls, 3)
}
