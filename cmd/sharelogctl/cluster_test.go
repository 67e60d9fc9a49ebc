package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestE2EClusterDescribe(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	requireOK(t, s.ctl("", "topics", "create", "orders", "--partitions", "2"))

	res := s.ctl("", "cluster", "describe")
	requireOK(t, res)
	want := `^Mode: single

INSTANCE  GRPC ADDRESS +HTTP ADDRESS
local     ` + regexp.QuoteMeta(s.addr) + ` +127\.0\.0\.1:\d+

TOPIC   PARTITION  OWNER  EPOCH
orders  0          local  0
orders  1          local  0

GROUP  COORDINATOR  EPOCH
$`
	assert.Regexp(t, want, res.stdout)

	res = s.ctl("", "cluster", "describe", "-o", "json")
	requireOK(t, res)
	var resp sharelogv1.DescribeClusterResponse
	require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &resp))
	require.Len(t, resp.GetPartitions(), 2)
	assert.Equal(t, s.addr, resp.GetInstances()[0].GetGrpcAddress())
}

// share-groups describe --state names the group's coordinator from
// DescribeCluster in a cluster, the server talked to otherwise.
func TestCoordinatorName(t *testing.T) {
	dc := &sharelogv1.DescribeClusterResponse{Mode: "partitioned",
		Instances: []*sharelogv1.ClusterInstance{{InstanceId: "a", GrpcAddress: "h1:9091"}, {InstanceId: "b", GrpcAddress: "h2:9092"}},
		Groups:    []*sharelogv1.GroupCoordinator{{GroupId: "g", CoordinatorId: "b"}, {GroupId: "idle"}}}
	assert.Equal(t, "h2:9092 (b)", coordinatorName(dc, "g", "self (0)"))
	assert.Equal(t, "self (0)", coordinatorName(dc, "idle", "self (0)"), "no coordinator at the moment")
	assert.Equal(t, "self (0)", coordinatorName(dc, "other", "self (0)"))
	assert.Equal(t, "self (0)", coordinatorName(&sharelogv1.DescribeClusterResponse{Mode: "single"}, "g", "self (0)"))
}
