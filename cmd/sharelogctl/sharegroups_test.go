package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// shareClients are direct gRPC clients of the test server, to act as
// share consumers around the commands under test.
type shareClients struct {
	log sharelogv1.LogServiceClient
	sg  sharelogv1.ShareGroupServiceClient
}

func (s *testServer) clients() shareClients {
	s.t.Helper()
	conn := testsupport.Dial(s.t, s.addr)
	return shareClients{log: sharelogv1.NewLogServiceClient(conn), sg: sharelogv1.NewShareGroupServiceClient(conn)}
}

func (c shareClients) produce(t *testing.T, topic string, partition int32, timestamps ...int64) {
	t.Helper()
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &partition}
	for i, ts := range timestamps {
		req.Records = append(req.Records, &sharelogv1.Record{Timestamp: ts, Value: fmt.Appendf(nil, "v%d", i)})
	}
	_, err := c.log.Produce(context.Background(), req)
	require.NoError(t, err)
}

func (c shareClients) heartbeat(t *testing.T, group, member string, epoch int32, subs ...string) *sharelogv1.ShareGroupHeartbeatResponse {
	t.Helper()
	r, err := c.sg.ShareGroupHeartbeat(context.Background(), &sharelogv1.ShareGroupHeartbeatRequest{
		GroupId: group, MemberId: member, MemberEpoch: epoch, SubscribedTopicNames: subs})
	require.NoError(t, err)
	return r
}

func (c shareClients) config(t *testing.T, group string, cfg *sharelogv1.ShareGroupConfig) {
	t.Helper()
	_, err := c.sg.UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{GroupId: group, Config: cfg})
	require.NoError(t, err)
}

// fetch opens (epoch 0) or continues a share session of member on topic/0
// and returns what it acquired.
func (c shareClients) fetch(t *testing.T, group, member string, epoch int32, topic string) []*sharelogv1.AcquiredRecords {
	t.Helper()
	r, err := c.sg.ShareFetch(context.Background(), &sharelogv1.ShareFetchRequest{GroupId: group, MemberId: member, ShareSessionEpoch: epoch,
		Topics: []*sharelogv1.ShareFetchTopic{{Topic: topic, Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}}}}})
	require.NoError(t, err)
	var out []*sharelogv1.AcquiredRecords
	for _, tr := range r.GetResponses() {
		for _, p := range tr.GetPartitions() {
			out = append(out, p.GetAcquiredRecords()...)
		}
	}
	return out
}

// accept acknowledges [first, last] of topic/0 as ACCEPT.
func (c shareClients) accept(t *testing.T, group, member string, epoch int32, topic string, first, last int64) {
	t.Helper()
	r, err := c.sg.ShareAcknowledge(context.Background(), &sharelogv1.ShareAcknowledgeRequest{GroupId: group, MemberId: member, ShareSessionEpoch: epoch,
		Topics: []*sharelogv1.ShareFetchTopic{{Topic: topic, Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0,
			AcknowledgementBatches: []*sharelogv1.AcknowledgementBatch{{FirstOffset: first, LastOffset: last,
				AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}}}}}}}})
	require.NoError(t, err)
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, r.GetResponses()[0].GetPartitions()[0].GetErrorCode())
}

// table splits a tabwriter table into rows of fields.
func table(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestE2EShareGroupsListAndDescribe(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl := s.ctl
	c := s.clients()

	res := ctl("", "share-groups", "list")
	requireOK(t, res)
	assert.Empty(t, res.stdout)

	requireOK(t, ctl("", "topics", "create", "orders", "--partitions", "2"))
	c.config(t, "idle", &sharelogv1.ShareGroupConfig{})
	c.config(t, "workers", &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")})
	c.produce(t, "orders", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	acq := c.fetch(t, "workers", "m1", 0, "orders")
	require.Len(t, acq, 1)
	require.EqualValues(t, 9, acq[0].GetLastOffset())
	c.accept(t, "workers", "m1", 1, "orders", 0, 4)

	t.Run("list", func(t *testing.T) {
		res := ctl("", "share-groups", "list")
		requireOK(t, res)
		assert.Equal(t, "idle\nworkers\n", res.stdout)
		res = ctl("", "share-groups", "list", "--state", "all")
		requireOK(t, res)
		assert.Equal(t, "GROUP    STATE\nidle     Empty\nworkers  Empty\n", res.stdout)
		res = ctl("", "share-groups", "list", "--state", "stable")
		requireOK(t, res)
		assert.Equal(t, "GROUP  STATE\n", res.stdout)
		res = ctl("", "share-groups", "list", "-o", "json")
		requireOK(t, res)
		var list sharelogv1.ListShareGroupsResponse
		require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &list))
		assert.Len(t, list.GetGroups(), 2)
		res = ctl("", "share-groups", "list", "--state", "Bogus")
		assert.Equal(t, 1, res.code)
		assert.Contains(t, res.stderr, "valid states are Empty, Stable and Dead")
	})

	t.Run("offsets", func(t *testing.T) {
		// Lag falls as the consumer acknowledges (5 of 10 accepted).
		res := ctl("", "share-groups", "describe", "workers")
		requireOK(t, res)
		assert.Equal(t, [][]string{
			{"GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"},
			{"workers", "orders", "0", "5", "5"},
			{"workers", "orders", "1", "-", "-"},
		}, table(res.stdout))
		c.accept(t, "workers", "m1", 2, "orders", 5, 9)
		res = ctl("", "share-groups", "describe", "workers", "--offsets")
		requireOK(t, res)
		assert.Equal(t, []string{"workers", "orders", "0", "10", "0"}, table(res.stdout)[1], "lag 0 once everything is acknowledged")
		res = ctl("", "share-groups", "describe", "idle")
		requireOK(t, res)
		assert.Equal(t, "Share group 'idle' has no offset information.\n", res.stdout)
		res = ctl("", "share-groups", "describe", "workers", "-o", "json")
		requireOK(t, res)
		var offs sharelogv1.DescribeShareGroupOffsetsResponse
		require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &offs))
		assert.EqualValues(t, 10, offs.GetTopics()[0].GetPartitions()[0].GetStartOffset())
	})

	t.Run("members and state", func(t *testing.T) {
		res := ctl("", "share-groups", "describe", "workers", "--members")
		requireOK(t, res)
		assert.Equal(t, "Share group 'workers' has no active members.\n", res.stdout)
		hb := c.heartbeat(t, "workers", "m1", 0, "orders")
		c.heartbeat(t, "workers", "m2", 0, "orders")
		c.heartbeat(t, "workers", "m1", hb.GetMemberEpoch())
		res = ctl("", "share-groups", "describe", "workers", "--members")
		requireOK(t, res)
		assert.Equal(t, [][]string{
			{"GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"},
			{"workers", "m1", "127.0.0.1", "-", "1", "orders:0"},
			{"workers", "m2", "127.0.0.1", "-", "1", "orders:1"},
		}, table(res.stdout))
		res = ctl("", "share-groups", "describe", "workers", "--members", "-v")
		requireOK(t, res)
		assert.Equal(t, []string{"GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"}, table(res.stdout)[0])
		assert.Equal(t, []string{"workers", "m1", "127.0.0.1", "-", "1", "2", "orders:0"}, table(res.stdout)[1])

		res = ctl("", "share-groups", "describe", "workers", "--state")
		requireOK(t, res)
		assert.Equal(t, [][]string{{"GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"}, {"workers", s.addr, "(0)", "Stable", "2"}}, table(res.stdout))
		res = ctl("", "share-groups", "describe", "workers", "--state", "--verbose")
		requireOK(t, res)
		rows := table(res.stdout)
		assert.Equal(t, []string{"GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"}, rows[0])
		assert.Equal(t, []string{"workers", s.addr, "(0)", "Stable", "2", "2", "2"}, rows[1])
		c.config(t, "workers", &sharelogv1.ShareGroupConfig{DeadLetterTopic: proto.String("dlq.orders")})
		res = ctl("", "share-groups", "describe", "workers", "--state")
		requireOK(t, res)
		assert.Equal(t, [][]string{
			{"GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS", "DEAD-LETTER-TOPIC", "DEAD-LETTERED", "DLQ-SKIPPED"},
			{"workers", s.addr, "(0)", "Stable", "2", "dlq.orders", "0", "0"},
		}, table(res.stdout))
		res = ctl("", "share-groups", "describe", "workers", "--state", "-o", "json")
		requireOK(t, res)
		var d sharelogv1.DescribeShareGroupResponse
		require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &d))
		assert.Len(t, d.GetMembers(), 2)
		res = ctl("", "share-groups", "list", "--state", "Stable,Empty")
		requireOK(t, res)
		assert.Equal(t, "GROUP    STATE\nidle     Empty\nworkers  Stable\n", res.stdout)
	})

	t.Run("errors", func(t *testing.T) {
		for _, mode := range []string{"--offsets", "--members", "--state"} {
			requireFailure(t, ctl("", "share-groups", "describe", "nope", mode), "GROUP_ID_NOT_FOUND")
		}
		res := ctl("", "share-groups", "describe", "workers", "--members", "--state")
		assert.Equal(t, 1, res.code)
		assert.Contains(t, res.stderr, "none of the others can be")
		res = ctl("", "share-groups", "describe")
		assert.Equal(t, 1, res.code)
	})
}

func TestE2EShareGroupsResetOffsets(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl := s.ctl
	c := s.clients()
	requireOK(t, ctl("", "topics", "create", "orders", "--partitions", "2"))
	base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	c.produce(t, "orders", 0, base, base+1000, base+2000, base+3000) // offsets 0..3, one second apart
	c.produce(t, "orders", 1, base, base)
	c.config(t, "g", &sharelogv1.ShareGroupConfig{})
	describe := func() [][]string {
		res := ctl("", "share-groups", "describe", "g")
		requireOK(t, res)
		return table(res.stdout)
	}

	tests := []struct {
		name string
		args []string
		want [][]string
	}{
		{"earliest, one partition", []string{"--to-earliest", "--topic", "orders:0"},
			[][]string{{"GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"}, {"g", "orders", "0", "0"}}},
		{"latest, whole topic", []string{"--to-latest", "--topic", "orders"},
			[][]string{{"GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"}, {"g", "orders", "0", "4"}, {"g", "orders", "1", "2"}}},
		{"datetime with zone", []string{"--to-datetime", "2026-05-01T12:00:01.500Z", "--topic", "orders:0,1"},
			[][]string{{"Warn:", "Partition", "1", "from", "topic", "orders", "is", "empty.", "Falling", "back", "to", "latest", "known", "offset."},
				{"GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"}, {"g", "orders", "0", "2"}, {"g", "orders", "1", "2"}}},
		{"datetime in local time", []string{"--to-datetime", time.UnixMilli(base + 1000).Local().Format("2006-01-02T15:04:05.000"), "--topic", "orders:0"},
			[][]string{{"GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"}, {"g", "orders", "0", "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := describe()
			res := ctl("", append([]string{"share-groups", "reset-offsets", "g"}, tt.args...)...)
			requireOK(t, res)
			assert.Equal(t, tt.want, table(res.stdout))
			assert.Equal(t, before, describe(), "dry run by default: nothing changed")
			res = ctl("", append([]string{"share-groups", "reset-offsets", "g", "--dry-run"}, tt.args...)...)
			requireOK(t, res)
			assert.Equal(t, tt.want, table(res.stdout))
			assert.Equal(t, before, describe())

			res = ctl("", append([]string{"share-groups", "reset-offsets", "g", "--execute"}, tt.args...)...)
			requireOK(t, res)
			assert.Equal(t, tt.want, table(res.stdout))
			after := describe()
			for _, row := range tt.want[1:] {
				if row[0] != "g" {
					continue
				}
				found := false
				for _, r := range after[1:] {
					if r[1] == row[1] && r[2] == row[2] {
						assert.Equal(t, row[3], r[3], "START-OFFSET of %s/%s", row[1], row[2])
						found = true
					}
				}
				assert.True(t, found, "%v in %v", row, after)
			}
		})
	}

	t.Run("all topics", func(t *testing.T) {
		res := ctl("", "share-groups", "reset-offsets", "g", "--to-earliest", "--all-topics", "--execute")
		requireOK(t, res)
		assert.Equal(t, [][]string{{"GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"}, {"g", "orders", "0", "0"}, {"g", "orders", "1", "0"}}, table(res.stdout))
		assert.Equal(t, [][]string{{"GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"}, {"g", "orders", "0", "0", "4"}, {"g", "orders", "1", "0", "2"}}, describe())
		res = ctl("", "share-groups", "reset-offsets", "g", "--to-latest", "--all-topics", "-o", "json")
		requireOK(t, res)
		var req sharelogv1.AlterShareGroupOffsetsRequest
		require.NoError(t, protojson.Unmarshal([]byte(res.stdout), &req))
		assert.EqualValues(t, 4, req.GetTopics()[0].GetPartitions()[0].GetStartOffset())
	})

	t.Run("a group that does not exist yet is created by --execute", func(t *testing.T) {
		res := ctl("", "share-groups", "reset-offsets", "fresh", "--to-earliest", "--topic", "orders:1", "--execute")
		requireOK(t, res)
		res = ctl("", "share-groups", "list")
		assert.Equal(t, "fresh\ng\n", res.stdout)
		requireFailure(t, ctl("", "share-groups", "reset-offsets", "nope", "--to-earliest", "--all-topics"), "GROUP_ID_NOT_FOUND")
	})

	t.Run("errors", func(t *testing.T) {
		c.heartbeat(t, "g", "m", 0, "orders")
		requireFailure(t, ctl("", "share-groups", "reset-offsets", "g", "--to-earliest", "--all-topics"), "NON_EMPTY_GROUP")
		requireFailure(t, ctl("", "share-groups", "reset-offsets", "g", "--to-earliest", "--all-topics", "--execute"), "NON_EMPTY_GROUP")
		c.heartbeat(t, "g", "m", -1)
		requireFailure(t, ctl("", "share-groups", "reset-offsets", "g", "--to-earliest", "--topic", "nope"), "UNKNOWN_TOPIC_OR_PARTITION")
		requireFailure(t, ctl("", "share-groups", "reset-offsets", "g", "--to-earliest", "--topic", "orders:7"), "UNKNOWN_TOPIC_OR_PARTITION")
		for _, args := range [][]string{
			{"--topic", "orders"}, // no target
			{"--to-earliest"},     // no scope
			{"--to-earliest", "--to-latest", "--topic", "orders"},  // two targets
			{"--to-earliest", "--topic", "orders", "--all-topics"}, // two scopes
			{"--to-earliest", "--topic", "orders", "--dry-run", "--execute"},
			{"--to-datetime", "yesterday", "--topic", "orders"},
			{"--to-earliest", "--topic", "orders:x"},
		} {
			res := ctl("", append([]string{"share-groups", "reset-offsets", "g"}, args...)...)
			assert.Equal(t, 1, res.code, "%v: %s", args, res.stdout)
			assert.True(t, strings.HasPrefix(res.stderr, "error: "), "%v: %s", args, res.stderr)
		}
	})
}

func TestE2EShareGroupsDelete(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl := s.ctl
	c := s.clients()
	requireOK(t, ctl("", "topics", "create", "orders"))
	requireOK(t, ctl("", "topics", "create", "other"))
	c.produce(t, "orders", 0, 0, 0, 0)
	requireOK(t, ctl("", "share-groups", "reset-offsets", "g", "--to-earliest", "--topic", "orders", "--execute"))

	hb := c.heartbeat(t, "g", "m", 0, "orders")
	requireFailure(t, ctl("", "share-groups", "delete-offsets", "g", "--topic", "orders"), "NON_EMPTY_GROUP")
	requireFailure(t, ctl("", "share-groups", "delete", "g"), "NON_EMPTY_GROUP")
	c.heartbeat(t, "g", "m", hb.GetMemberEpoch())
	c.heartbeat(t, "g", "m", -1)

	requireFailure(t, ctl("", "share-groups", "delete-offsets", "nope", "--topic", "orders"), "GROUP_ID_NOT_FOUND")
	res := ctl("", "share-groups", "delete-offsets", "g", "--topic", "orders", "--topic", "other")
	assert.Equal(t, 1, res.code, "other has no share state")
	assert.Equal(t, [][]string{{"TOPIC", "STATUS"}, {"orders", "Successful"},
		{"other", "Error:", "there", "is", "no", "offset", "information", "to", "delete", "for", "this", "topic", "(UNKNOWN_TOPIC_OR_PARTITION)"}}, table(res.stdout))
	assert.Equal(t, "error: deleting offsets failed for 1 of 2 topics\n", res.stderr)
	res = ctl("", "share-groups", "describe", "g")
	requireOK(t, res)
	assert.Equal(t, "Share group 'g' has no offset information.\n", res.stdout)
	res = ctl("", "share-groups", "reset-offsets", "g", "--to-earliest", "--topic", "orders", "--execute")
	requireOK(t, res)
	res = ctl("", "share-groups", "delete-offsets", "g", "--topic", "orders")
	requireOK(t, res)
	assert.Equal(t, "TOPIC   STATUS\norders  Successful\n", res.stdout)

	requireFailure(t, ctl("", "share-groups", "delete", "nope"), "GROUP_ID_NOT_FOUND")
	res = ctl("", "share-groups", "delete", "g")
	requireOK(t, res)
	assert.Equal(t, "Deletion of requested share groups ('g') was successful.\n", res.stdout)
	requireFailure(t, ctl("", "share-groups", "describe", "g", "--state"), "GROUP_ID_NOT_FOUND")
	res = ctl("", "share-groups", "list")
	requireOK(t, res)
	assert.Empty(t, res.stdout)
	res = ctl("", "share-groups", "delete-offsets", "g")
	assert.Equal(t, 1, res.code, "--topic is required")
}

func TestParseDateTime(t *testing.T) {
	local := func(s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02T15:04:05.000", s, time.Local)
		require.NoError(t, err)
		return tm
	}
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{in: "2026-05-01T12:00:01.500Z", want: time.Date(2026, 5, 1, 12, 0, 1, 5e8, time.UTC)},
		{in: "2026-05-01T14:00:01.500+02:00", want: time.Date(2026, 5, 1, 12, 0, 1, 5e8, time.UTC)},
		{in: "2026-05-01T14:00:01.500+0200", want: time.Date(2026, 5, 1, 12, 0, 1, 5e8, time.UTC)},
		{in: "2026-05-01T12:00:01Z", want: time.Date(2026, 5, 1, 12, 0, 1, 0, time.UTC)},
		{in: "2026-05-01T12:00:01.250", want: local("2026-05-01T12:00:01.250")},
		{in: "2026-05-01 12:00:01", wantErr: true},
		{in: "2026-05-01", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseDateTime(tt.in)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.True(t, tt.want.Equal(got), "want %v, got %v", tt.want, got)
		})
	}
}

// config set and get, with the proto's names and Kafka's; the ordering
// and backoff configs (docs/queues.md).
func TestE2EShareGroupsConfig(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl := s.ctl
	res := ctl("", "share-groups", "config", "set", "jobs", "ordering=key", "share.redelivery.backoff.initial.ms=250", "redelivery_backoff_multiplier=1.5")
	requireOK(t, res)
	assert.Contains(t, res.stdout, "ordering                        key\n")
	assert.Contains(t, res.stdout, "redelivery_backoff_initial_ms   250\n")
	assert.Contains(t, res.stdout, "redelivery_backoff_max_ms       60000\n")
	assert.Contains(t, res.stdout, "redelivery_backoff_multiplier   1.5\n")
	res = ctl("", "share-groups", "config", "get", "jobs")
	requireOK(t, res)
	assert.Contains(t, res.stdout, "ordering                        key\n")
	requireFailure(t, ctl("", "share-groups", "config", "set", "jobs", "redelivery_backoff_multiplier=20"), "INVALID_REQUEST")
	res = ctl("", "share-groups", "config", "set", "jobs", "ordering=fifo")
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, `ordering: "fifo" is not none or key`)
	requireFailure(t, ctl("", "share-groups", "config", "get", "nope"), "GROUP_ID_NOT_FOUND")
	res = ctl("", "share-groups", "config", "get", "jobs")
	assert.Contains(t, res.stdout, "redelivery_backoff_multiplier   1.5\n", "nothing changed by the refused updates")
}
