package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	slserver "github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// consumer-groups list, describe (offsets, members, state), reset-offsets
// (refused while a franz-go member is live; dry run by default, then
// --execute) and delete, against a real server with the Kafka listener.
func TestE2EConsumerGroups(t *testing.T) {
	t.Parallel()
	srv := testsupport.Serve(t, func(c *slserver.Config) { c.KafkaAddr, c.GroupInitialRebalanceDelay = "127.0.0.1:0", 0 })
	s := &testServer{t: t, addr: srv.GRPCAddr()}
	ctl, c := s.ctl, s.clients()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	res := ctl("", "consumer-groups", "list")
	requireOK(t, res)
	assert.Empty(t, res.stdout)
	requireOK(t, ctl("", "topics", "create", "orders", "--partitions", "2"))
	c.produce(t, "orders", 0, 1000, 2000, 3000)
	c.produce(t, "orders", 1, 1000)

	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.KafkaAddr()), kgo.ConsumerGroup("app"), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ClientID("cli-test"))
	require.NoError(t, err)
	defer cl.Close()
	for got := 0; got < 4; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		got += fs.NumRecords()
	}
	require.NoError(t, cl.CommitUncommittedOffsets(ctx))
	c.produce(t, "orders", 0, 4000, 5000) // lag 2 on partition 0

	res = ctl("", "consumer-groups", "list", "--state", "all")
	requireOK(t, res)
	assert.Equal(t, [][]string{{"GROUP", "TYPE", "STATE", "#MEMBERS"}, {"app", "classic", "Stable", "1"}}, table(res.stdout))

	res = ctl("", "consumer-groups", "describe", "app")
	requireOK(t, res)
	rows := table(res.stdout)
	require.Len(t, rows, 3, res.stdout)
	assert.Equal(t, []string{"GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"}, rows[0])
	assert.Equal(t, []string{"app", "orders", "0", "3", "5", "2"}, rows[1][:6])
	assert.Equal(t, []string{"app", "orders", "1", "1", "1", "0"}, rows[2][:6])
	assert.Equal(t, "cli-test", rows[1][8])
	assert.NotEqual(t, "-", rows[1][6], "the consumer id")

	res = ctl("", "consumer-groups", "describe", "app", "--members", "-v")
	requireOK(t, res)
	rows = table(res.stdout)
	require.Len(t, rows, 2, res.stdout)
	assert.Equal(t, []string{"-", "cli-test", "2", "orders(0,1)"}, []string{rows[1][2], rows[1][4], rows[1][5], rows[1][6]})

	res = ctl("", "consumer-groups", "describe", "app", "--state")
	requireOK(t, res)
	assert.Contains(t, res.stdout, "Stable")

	requireFailure(t, ctl("", "consumer-groups", "reset-offsets", "app", "--topic", "orders", "--to-earliest"), "NON_EMPTY_GROUP")
	requireFailure(t, ctl("", "consumer-groups", "delete", "app"), "NON_EMPTY_GROUP")

	cl.Close()
	cg := sharelogv1.NewConsumerGroupServiceClient(testsupport.Dial(t, s.addr))
	require.Eventually(t, func() bool {
		d, err := cg.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "app"})
		return err == nil && len(d.GetMembers()) == 0
	}, 20*time.Second, 20*time.Millisecond)

	res = ctl("", "consumer-groups", "describe", "app")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, "Consumer group 'app' has no active members.\n", res.stderr)
	rows = table(res.stdout)
	require.Len(t, rows, 3)
	assert.Equal(t, []string{"app", "orders", "0", "3", "5", "2", "-", "-", "-"}, rows[1])

	// Dry run by default; nothing written.
	res = ctl("", "consumer-groups", "reset-offsets", "app", "--topic", "orders:0", "--to-datetime", "1970-01-01T00:00:02.000Z")
	requireOK(t, res)
	assert.Equal(t, [][]string{{"GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"}, {"app", "orders", "0", "1"}}, table(res.stdout))
	res = ctl("", "consumer-groups", "describe", "app")
	assert.Equal(t, "3", table(res.stdout)[1][3], "a dry run writes nothing")

	res = ctl("", "consumer-groups", "reset-offsets", "app", "--all-topics", "--shift-by", "-2", "--execute")
	requireOK(t, res)
	assert.Equal(t, [][]string{{"GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"}, {"app", "orders", "0", "1"}, {"app", "orders", "1", "0"}}, table(res.stdout))
	res = ctl("", "consumer-groups", "describe", "app", "-o", "json")
	requireOK(t, res)
	var fr sharelogv1.FetchOffsetsResponse
	require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &fr))
	require.Len(t, fr.GetTopics(), 1)
	assert.Equal(t, int64(4), fr.GetTopics()[0].GetPartitions()[0].GetLag())

	res = ctl("", "consumer-groups", "reset-offsets", "app", "--topic", "orders", "--to-offset", "9", "--execute", "-o", "json")
	requireOK(t, res)
	assert.True(t, strings.Contains(res.stdout, `"offset": "5"`) || strings.Contains(res.stdout, `"offset":"5"`), "clamped to the log end: %s", res.stdout)

	res = ctl("", "consumer-groups", "delete", "app")
	requireOK(t, res)
	assert.Equal(t, "Deletion of requested consumer groups ('app') was successful.\n", res.stdout)
	requireFailure(t, ctl("", "consumer-groups", "describe", "app"), "GROUP_ID_NOT_FOUND")
}
