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
