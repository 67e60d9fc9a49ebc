package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The server binary, end to end: partitions added over REST and gRPC,
// configs set over Kafka, every transport seeing one stored config
// (max.message.bytes refused over gRPC, REST and Kafka alike), and all of
// it there again after a SIGKILL and after a clean restart.
func TestCreatePartitionsAndTopicConfigsSurviveRestarts(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--fsync", "always", "--kafka-addr", "127.0.0.1:0"}
	ctx := context.Background()
	c := startChild(t, dir, args...)
	logc := sharelogv1.NewLogServiceClient(c.conn)
	_, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "grow", Partitions: 1,
		Config: &sharelogv1.TopicConfig{RetentionBytes: proto.Int64(1 << 30)}})
	require.NoError(t, err)
	_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "grow", Records: []*sharelogv1.Record{{Value: []byte("first")}}})
	require.NoError(t, err)

	// REST: the count is the new total.
	code, body := c.restJSON(t, http.MethodPost, "/v1/topics/grow:createPartitions", `{"count":3}`)
	require.Equal(t, http.StatusOK, code, body)
	var resp struct {
		Topic struct {
			PartitionCount int `json:"partitionCount"`
			Config         struct {
				RetentionBytes string   `json:"retentionBytes"`
				Overrides      []string `json:"overrides"`
			} `json:"config"`
		} `json:"topic"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &resp))
	assert.Equal(t, 3, resp.Topic.PartitionCount)
	assert.Equal(t, "1073741824", resp.Topic.Config.RetentionBytes)
	assert.Equal(t, []string{"retention.bytes"}, resp.Topic.Config.Overrides)
	code, _, ans := c.rest(t, http.MethodPost, "/v1/topics/grow:createPartitions", `{"count":2}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "INVALID_REQUEST", ans.reason())
	assert.Contains(t, ans.Message, "partitions can only be added")
	code, _, ans = c.rest(t, http.MethodPost, "/v1/topics/none:createPartitions", `{"count":2}`)
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "UNKNOWN_TOPIC_OR_PARTITION", ans.reason())

	// gRPC, with validate_only first.
	v, err := logc.CreatePartitions(ctx, &sharelogv1.CreatePartitionsRequest{Topic: "grow", Count: 4, ValidateOnly: true})
	require.NoError(t, err)
	assert.EqualValues(t, 4, v.GetTopic().GetPartitionCount())
	d, err := logc.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "grow"})
	require.NoError(t, err)
	assert.EqualValues(t, 3, d.GetPartitionCount())
	g, err := logc.CreatePartitions(ctx, &sharelogv1.CreatePartitionsRequest{Topic: "grow", Count: 4})
	require.NoError(t, err)
	require.Len(t, g.GetTopic().GetPartitions(), 4)
	_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "grow", Partition: proto.Int32(3), Records: []*sharelogv1.Record{{Value: []byte("on 3")}}})
	require.NoError(t, err)

	// Kafka: max.message.bytes and LogAppendTime on the same topic.
	k := dialKafka(t, c.kafkaAddr(t))
	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, "grow"
	for name, value := range map[string]string{"max.message.bytes": "100", "message.timestamp.type": "LogAppendTime"} {
		e := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		e.Name, e.Op, e.Value = name, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(value)
		r.Configs = append(r.Configs, e)
	}
	alter.Resources = append(alter.Resources, r)
	ares := k.do(alter).(*kmsg.IncrementalAlterConfigsResponse)
	require.Zero(t, ares.Resources[0].ErrorCode, "%v", ares.Resources[0].ErrorMessage)

	tooLarge := func(t *testing.T, c *child) {
		t.Helper()
		big := []*sharelogv1.Record{{Value: []byte(strings.Repeat("x", 101))}}
		_, err := sharelogv1.NewLogServiceClient(c.conn).Produce(ctx, &sharelogv1.ProduceRequest{Topic: "grow", Records: big})
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "gRPC: %v", err)
		assert.Contains(t, err.Error(), "max.message.bytes")
		code, _, ans := c.rest(t, http.MethodPost, "/v1/topics/grow/records", `{"records":[{"value":"`+base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 101)))+`"}]}`)
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Equal(t, "MESSAGE_TOO_LARGE", ans.reason())
		kc, _ := dialKafka(t, c.kafkaAddr(t)).kproduce("grow", 0, oneBigBatch(200))
		assert.Equal(t, int16(10), kc, "Kafka: MESSAGE_TOO_LARGE")
	}
	tooLarge(t, c)
	stamped := func(t *testing.T, c *child, p int32) {
		t.Helper()
		lc := sharelogv1.NewLogServiceClient(c.conn)
		pr, err := lc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "grow", Partition: proto.Int32(p), Records: []*sharelogv1.Record{{Value: []byte("ts"), Timestamp: 5}}})
		require.NoError(t, err)
		f, err := lc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "grow", Partition: p, Offset: pr.GetResults()[0].GetOffset()})
		require.NoError(t, err)
		require.Len(t, f.GetRecords(), 1)
		assert.Equal(t, pr.GetLogAppendTime(), f.GetRecords()[0].GetTimestamp(), "LogAppendTime replaced the producer's timestamp")
	}
	stamped(t, c, 2)

	check := func(t *testing.T, c *child) {
		t.Helper()
		d, err := sharelogv1.NewLogServiceClient(c.conn).DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "grow"})
		require.NoError(t, err)
		assert.EqualValues(t, 4, d.GetPartitionCount())
		require.Len(t, d.GetPartitions(), 4)
		assert.EqualValues(t, 1, d.GetPartitions()[0].GetHighWatermark())
		assert.EqualValues(t, 1, d.GetPartitions()[3].GetHighWatermark())
		cfg := d.GetConfig()
		assert.EqualValues(t, 100, cfg.GetMaxMessageBytes())
		assert.Equal(t, "LogAppendTime", cfg.GetMessageTimestampType())
		assert.EqualValues(t, 1<<30, cfg.GetRetentionBytes())
		assert.Equal(t, []string{"max.message.bytes", "message.timestamp.type", "retention.bytes"}, cfg.GetOverrides())
		// DescribeConfigs over Kafka agrees.
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.Version = 4
		dr := kmsg.NewDescribeConfigsRequestResource()
		dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeTopic, "grow"
		req.Resources = append(req.Resources, dr)
		got := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, e := range dialKafka(t, c.kafkaAddr(t)).do(req).(*kmsg.DescribeConfigsResponse).Resources[0].Configs {
			got[e.Name] = e
		}
		assert.Equal(t, "100", *got["max.message.bytes"].Value)
		assert.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, got["max.message.bytes"].Source)
		assert.Equal(t, kmsg.ConfigSourceDefaultConfig, got["retention.ms"].Source)
		meta := kmsg.NewPtrMetadataRequest()
		meta.Version = 12
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr("grow")
		meta.Topics = append(meta.Topics, mt)
		assert.Len(t, dialKafka(t, c.kafkaAddr(t)).do(meta).(*kmsg.MetadataResponse).Topics[0].Partitions, 4)
	}
	check(t, c)

	c.kill(t)
	c = startChild(t, dir, args...)
	t.Run("after SIGKILL", func(t *testing.T) {
		check(t, c)
		tooLarge(t, c)
	})
	c.stop(t)
	c = startChild(t, dir, args...)
	t.Run("after a clean restart", func(t *testing.T) {
		check(t, c)
		tooLarge(t, c)
		// A partition added before the restarts still takes records.
		_, err := sharelogv1.NewLogServiceClient(c.conn).Produce(ctx, &sharelogv1.ProduceRequest{Topic: "grow", Partition: proto.Int32(1),
			Records: []*sharelogv1.Record{{Value: []byte("later")}}})
		require.NoError(t, err)
		stamped(t, c, 1)
	})
}

// oneBigBatch is oneRecordBatch with a value of n bytes.
func oneBigBatch(n int) []byte {
	rec := kmsg.NewRecord()
	rec.Value = []byte(strings.Repeat("v", n))
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	b := kmsg.NewRecordBatch()
	b.Magic, b.NumRecords, b.FirstTimestamp, b.MaxTimestamp = 2, 1, 1, 1
	b.ProducerID, b.ProducerEpoch, b.FirstSequence = -1, -1, -1
	b.Records = rec.AppendTo(nil)
	return finishBatch(b)
}

// A share group's member is assigned the partitions added to its topic at
// its next heartbeats, and can fetch a record from a new one.
func TestShareGroupSeesAddedPartitions(t *testing.T) {
	c := startChild(t, t.TempDir(), "--fsync", "never")
	ctx := context.Background()
	logc := sharelogv1.NewLogServiceClient(c.conn)
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	_, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "jobs", Partitions: 1})
	require.NoError(t, err)
	_, err = sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "workers",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)
	const member = "member-of-workers-000000000000000001"
	hb, err := sg.ShareGroupHeartbeat(ctx, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "workers", MemberId: member, SubscribedTopicNames: []string{"jobs"}})
	require.NoError(t, err)
	epoch := hb.GetMemberEpoch()
	var assigned []int32 // the last assignment a heartbeat carried
	note := func(hb *sharelogv1.ShareGroupHeartbeatResponse) {
		if hb.GetAssignment() == nil {
			return // unchanged
		}
		assigned = nil
		for _, tp := range hb.GetAssignment().GetTopicPartitions() {
			assigned = append(assigned, tp.GetPartitions()...)
		}
		slices.Sort(assigned)
	}
	note(hb)
	beat := func() {
		hb, err := sg.ShareGroupHeartbeat(ctx, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "workers", MemberId: member, MemberEpoch: epoch})
		require.NoError(t, err)
		epoch = hb.GetMemberEpoch()
		note(hb)
	}
	require.Eventually(t, func() bool { beat(); return slices.Equal([]int32{0}, assigned) }, 10*time.Second, 50*time.Millisecond)

	_, err = logc.CreatePartitions(ctx, &sharelogv1.CreatePartitionsRequest{Topic: "jobs", Count: 3})
	require.NoError(t, err)
	require.Eventually(t, func() bool { beat(); return slices.Equal([]int32{0, 1, 2}, assigned) },
		10*time.Second, 50*time.Millisecond, "the new partitions are assigned: %v", assigned)

	_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "jobs", Partition: proto.Int32(2), Records: []*sharelogv1.Record{{Value: []byte("job")}}})
	require.NoError(t, err)
	var got []string
	var sessionEpoch int32
	require.Eventually(t, func() bool {
		f, err := sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "workers", MemberId: member, ShareSessionEpoch: sessionEpoch,
			Topics: []*sharelogv1.ShareFetchTopic{{Topic: "jobs", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}, {Partition: 1}, {Partition: 2}}}}})
		require.NoError(t, err)
		sessionEpoch++
		for _, tr := range f.GetResponses() {
			for _, pr := range tr.GetPartitions() {
				for _, r := range pr.GetRecords() {
					got = append(got, string(r.GetValue()))
				}
			}
		}
		return len(got) > 0
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, []string{"job"}, got)
}

// A Kafka consumer group's member is given the partitions added to its
// topic: its client sees them at a metadata refresh and the group
// rebalances, as against Kafka.
func TestConsumerGroupSeesAddedPartitions(t *testing.T) {
	c := startChild(t, t.TempDir(), "--fsync", "never", "--kafka-addr", "127.0.0.1:0", "--group-initial-rebalance-delay", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logc := sharelogv1.NewLogServiceClient(c.conn)
	_, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "cgrow", Partitions: 1})
	require.NoError(t, err)
	cons := kgoClient(t, c.kafkaAddr(t), kgo.ConsumerGroup("cg"), kgo.ConsumeTopics("cgrow"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(300*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "cgrow", Partition: proto.Int32(0), Records: []*sharelogv1.Record{{Value: []byte("on 0")}}})
	require.NoError(t, err)
	seen := map[int32][]string{}
	poll := func(want int32) {
		t.Helper()
		for len(seen[want]) == 0 {
			fs := cons.PollFetches(ctx)
			require.NoError(t, ctx.Err(), "no record of partition %d: %v", want, seen)
			fs.EachRecord(func(r *kgo.Record) { seen[r.Partition] = append(seen[r.Partition], string(r.Value)) })
		}
	}
	poll(0)

	_, err = logc.CreatePartitions(ctx, &sharelogv1.CreatePartitionsRequest{Topic: "cgrow", Count: 3})
	require.NoError(t, err)
	_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "cgrow", Partition: proto.Int32(2), Records: []*sharelogv1.Record{{Value: []byte("on 2")}}})
	require.NoError(t, err)
	poll(2)
	assert.Equal(t, map[int32][]string{0: {"on 0"}, 2: {"on 2"}}, seen)
}
