package kafkawire

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// CreatePartitions (37) through kadm: growth, Kafka's refusals, validate_only,
// and the new partitions produced to and fetched from.
func TestCreatePartitionsKafka(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	f.createTopic("grow", 2)
	adm := f.admin()

	res, err := adm.ValidateCreatePartitions(ctx, 3, "grow")
	require.NoError(t, err)
	require.NoError(t, res["grow"].Err)
	info, err := f.store.TopicInfo(ctx, "grow")
	require.NoError(t, err)
	assert.Equal(t, int32(2), info.Partitions, "validate_only changes nothing")

	res, err = adm.UpdatePartitions(ctx, 5, "grow") // kadm's "set the total to 5"
	require.NoError(t, err)
	require.NoError(t, res["grow"].Err)
	info, err = f.store.TopicInfo(ctx, "grow")
	require.NoError(t, err)
	assert.Equal(t, int32(5), info.Partitions)

	for name, tc := range map[string]struct {
		count int
		want  error
	}{
		"the same count": {5, kerr.InvalidPartitions},
		"fewer":          {3, kerr.InvalidPartitions},
		"too many":       {10001, kerr.InvalidPartitions},
	} {
		res, err := adm.UpdatePartitions(ctx, tc.count, "grow")
		require.NoError(t, err, name)
		assert.ErrorIs(t, res["grow"].Err, tc.want, name)
		assert.NotEmpty(t, res["grow"].ErrMessage, name)
	}
	res, err = adm.UpdatePartitions(ctx, 3, "missing")
	require.NoError(t, err)
	assert.ErrorIs(t, res["missing"].Err, kerr.UnknownTopicOrPartition)

	// A topic named twice, and a manual assignment, as Kafka answers them.
	req := kmsg.NewPtrCreatePartitionsRequest()
	for range 2 {
		rt := kmsg.NewCreatePartitionsRequestTopic()
		rt.Topic, rt.Count = "grow", 8
		req.Topics = append(req.Topics, rt)
	}
	assigned := kmsg.NewCreatePartitionsRequestTopic()
	assigned.Topic, assigned.Count = "other", 2
	assigned.Assignment = []kmsg.CreatePartitionsRequestTopicAssignment{{Replicas: []int32{0}}}
	req.Topics = append(req.Topics, assigned)
	resp, err := req.RequestWith(ctx, f.client())
	require.NoError(t, err)
	require.Len(t, resp.Topics, 3)
	assert.Equal(t, kerr.InvalidRequest.Code, resp.Topics[0].ErrorCode)
	assert.Equal(t, kerr.InvalidRequest.Code, resp.Topics[1].ErrorCode)
	assert.Equal(t, kerr.InvalidReplicaAssignment.Code, resp.Topics[2].ErrorCode)
	info, _ = f.store.TopicInfo(ctx, "grow")
	assert.Equal(t, int32(5), info.Partitions)

	// A producer and a consumer see the new partitions.
	cl := f.client(kgo.DefaultProduceTopic("grow"), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ConsumeTopics("grow"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Partition: 4, Value: []byte("on 4")}).FirstErr())
	fetches := cl.PollFetches(ctx)
	require.NoError(t, fetches.Err())
	recs := fetches.Records()
	require.Len(t, recs, 1)
	assert.Equal(t, int32(4), recs[0].Partition)
	assert.Equal(t, int64(0), recs[0].Offset)
}

// describeTopicConfigs returns DescribeConfigs' answer for one topic, by
// name.
func describeTopicConfigs(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, docs bool) map[string]kmsg.DescribeConfigsResponseResourceConfig {
	t.Helper()
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	req.Resources = append(req.Resources, r)
	req.IncludeSynonyms, req.IncludeDocumentation = docs, docs
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp.Resources, 1)
	require.Zero(t, resp.Resources[0].ErrorCode, "%v", resp.Resources[0].ErrorMessage)
	out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
	for _, c := range resp.Resources[0].Configs {
		out[c.Name] = c
	}
	return out
}

// Topic configs at CreateTopics, through IncrementalAlterConfigs and
// AlterConfigs, and DescribeConfigs with every config and its source.
func TestTopicConfigsKafka(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	adm := f.admin()
	cl := f.client()
	maxMsg, tsType := "2000", "LogAppendTime"
	created, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &maxMsg, "message.timestamp.type": &tsType}, "cfg")
	require.NoError(t, err)
	require.NoError(t, created.Err)
	require.Len(t, created.Configs, 11, "CreateTopics answers every config")
	assert.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, created.Configs["max.message.bytes"].Source)
	assert.Equal(t, kmsg.ConfigSourceDefaultConfig, created.Configs["retention.ms"].Source)

	got := describeTopicConfigs(t, ctx, cl, "cfg", true)
	want := map[string]string{
		"cleanup.policy": "delete", "compression.type": "producer", "delete.retention.ms": "86400000",
		"max.message.bytes": "2000", "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.5",
		"min.insync.replicas": "1", "retention.bytes": "-1", "retention.ms": "-1", "segment.bytes": "1048576",
		"segment.ms": "604800000",
	}
	require.Len(t, got, len(want))
	for name, v := range want {
		c := got[name]
		require.NotNil(t, c.Value, name)
		assert.Equal(t, v, *c.Value, name)
		dynamic := name == "max.message.bytes" || name == "message.timestamp.type"
		if dynamic {
			assert.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, c.Source, name)
		} else {
			assert.Equal(t, kmsg.ConfigSourceDefaultConfig, c.Source, name)
		}
		assert.False(t, c.ReadOnly, name)
		assert.False(t, c.IsSensitive, name)
		require.Len(t, c.ConfigSynonyms, 1, name)
		assert.Equal(t, c.Source, c.ConfigSynonyms[0].Source, name)
		require.NotNil(t, c.Documentation, name)
		assert.NotZero(t, c.ConfigType, name)
	}
	assert.Equal(t, kmsg.ConfigTypeDouble, got["min.cleanable.dirty.ratio"].ConfigType)
	assert.Equal(t, kmsg.ConfigTypeList, got["cleanup.policy"].ConfigType)

	// max.message.bytes is enforced on a batch as sent: MESSAGE_TOO_LARGE.
	p := f.client(kgo.DefaultProduceTopic("cfg"), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(0))
	err = p.ProduceSync(ctx, &kgo.Record{Value: bytes.Repeat([]byte("x"), 3000)}).FirstErr()
	require.ErrorIs(t, err, kerr.MessageTooLarge)
	_, hw, err := f.store.Bounds("cfg", 0)
	require.NoError(t, err)
	assert.Zero(t, hw, "nothing appended")

	// LogAppendTime: the broker's time, and the batch says so.
	before := time.Now().Add(-time.Second)
	preq := produceRequest("cfg", appendBatch(nil, []logstore.Record{{Timestamp: 5, Value: []byte("small")}}))
	presp, err := preq.RequestWith(ctx, cl)
	require.NoError(t, err)
	prp := presp.Topics[0].Partitions[0]
	require.Zero(t, prp.ErrorCode)
	assert.Greater(t, prp.LogAppendTime, before.UnixMilli(), "the produce answer's log append time")
	c := f.client(kgo.ConsumeTopics("cfg"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fetches := c.PollFetches(ctx)
	require.NoError(t, fetches.Err())
	recs := fetches.Records()
	require.Len(t, recs, 1)
	assert.Equal(t, int8(1), recs[0].Attrs.TimestampType(), "LogAppendTime")
	assert.True(t, recs[0].Timestamp.After(before), "the broker's time, not the producer's: %v", recs[0].Timestamp)

	// IncrementalAlterConfigs: SET, DELETE, APPEND; all of a resource or none.
	alter := func(ops ...kadm.AlterConfig) kadm.AlterConfigsResponses {
		res, err := adm.AlterTopicConfigs(ctx, ops, "cfg")
		require.NoError(t, err)
		return res
	}
	res := alter(kadm.AlterConfig{Name: "max.message.bytes", Op: kadm.DeleteConfig},
		kadm.AlterConfig{Name: "retention.ms", Value: new("3600000")},
		kadm.AlterConfig{Name: "cleanup.policy", Op: kadm.AppendConfig, Value: new("compact")})
	require.NoError(t, res[0].Err)
	got = describeTopicConfigs(t, ctx, cl, "cfg", false)
	assert.Equal(t, "67108864", *got["max.message.bytes"].Value)
	assert.Equal(t, kmsg.ConfigSourceDefaultConfig, got["max.message.bytes"].Source)
	assert.Equal(t, "3600000", *got["retention.ms"].Value)
	assert.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, got["retention.ms"].Source)
	assert.Equal(t, "compact,delete", *got["cleanup.policy"].Value)
	assert.Nil(t, got["cleanup.policy"].ConfigSynonyms, "no synonyms unless asked")

	for name, ops := range map[string][]kadm.AlterConfig{
		"unknown name": {{Name: "retention.ms", Value: new("1")}, {Name: "kfake.is_internal", Value: new("true")}},
		"bad value":    {{Name: "retention.ms", Value: new("1")}, {Name: "segment.ms", Value: new("soon")}},
		"not a list":   {{Name: "retention.ms", Op: kadm.AppendConfig, Value: new("1")}},
	} {
		res := alter(ops...)
		assert.ErrorIs(t, res[0].Err, kerr.InvalidConfig, name)
		assert.NotEmpty(t, res[0].ErrMessage, name)
		assert.Equal(t, "3600000", *describeTopicConfigs(t, ctx, cl, "cfg", false)["retention.ms"].Value, "nothing changed: %s", name)
	}
	vres, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: new("5")}}, "cfg")
	require.NoError(t, err)
	require.NoError(t, vres[0].Err)
	assert.Equal(t, "3600000", *describeTopicConfigs(t, ctx, cl, "cfg", false)["retention.ms"].Value, "validate_only")
	res, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: new("5")}}, "missing")
	require.NoError(t, err)
	assert.ErrorIs(t, res[0].Err, kerr.UnknownTopicOrPartition)

	// AlterConfigs (33): the configs named are the topic's; the others go
	// back to their defaults.
	sres, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "segment.ms", Value: new("60000")}}, "cfg")
	require.NoError(t, err)
	require.NoError(t, sres[0].Err)
	got = describeTopicConfigs(t, ctx, cl, "cfg", false)
	assert.Equal(t, "60000", *got["segment.ms"].Value)
	assert.Equal(t, "-1", *got["retention.ms"].Value)
	assert.Equal(t, "delete", *got["cleanup.policy"].Value)
	assert.Equal(t, "CreateTime", *got["message.timestamp.type"].Value)
	for name, c := range got {
		if name == "segment.ms" {
			assert.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, c.Source, name)
		} else {
			assert.Equal(t, kmsg.ConfigSourceDefaultConfig, c.Source, name)
		}
	}
	sres, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "flush.ms", Value: new("1")}}, "cfg")
	require.NoError(t, err)
	assert.ErrorIs(t, sres[0].Err, kerr.InvalidConfig)
	assert.Equal(t, "60000", *describeTopicConfigs(t, ctx, cl, "cfg", false)["segment.ms"].Value)
}

// __consumer_offsets: listed as internal (so a regex consumer skips it),
// refused for reading and writing.
func TestInternalTopic(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	f.createTopic("regular", 1)
	cl := f.client()

	all := kmsg.NewPtrMetadataRequest() // every topic
	resp, err := all.RequestWith(ctx, cl)
	require.NoError(t, err)
	var names []string
	for _, rt := range resp.Topics {
		names = append(names, *rt.Topic)
		if *rt.Topic == consumerOffsetsTopic {
			assert.True(t, rt.IsInternal)
			require.Len(t, rt.Partitions, 1)
			assert.Equal(t, int32(nodeID), rt.Partitions[0].Leader)
			assert.NotZero(t, rt.TopicID)
		} else {
			assert.False(t, rt.IsInternal, *rt.Topic)
		}
	}
	assert.ElementsMatch(t, []string{"regular", consumerOffsetsTopic}, names)

	named := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(consumerOffsetsTopic)
	named.Topics = append(named.Topics, rt)
	resp2, err := named.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp2.Topics, 1)
	assert.Zero(t, resp2.Topics[0].ErrorCode)
	assert.True(t, resp2.Topics[0].IsInternal)
	assert.Equal(t, resp.Topics[1].TopicID, resp2.Topics[0].TopicID, "a stable id")

	// A regex consumer skips it.
	c := f.client(kgo.ConsumeTopics(".*"), kgo.ConsumeRegex())
	waitFor(t, func() bool { c.ForceMetadataRefresh(); return len(c.GetConsumeTopics()) == 1 })
	assert.Equal(t, []string{"regular"}, c.GetConsumeTopics())

	// Nothing to read or write.
	p := f.client(kgo.RecordRetries(0), kgo.UnknownTopicRetries(0))
	err = p.ProduceSync(ctx, &kgo.Record{Topic: consumerOffsetsTopic, Value: []byte("x")}).FirstErr()
	assert.ErrorContains(t, err, "TOPIC_AUTHORIZATION_FAILED", "produce")
	freq := kmsg.NewPtrFetchRequest()
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = consumerOffsetsTopic
	fp := kmsg.NewFetchRequestTopicPartition()
	ft.Partitions = append(ft.Partitions, fp)
	freq.Topics = append(freq.Topics, ft)
	fresp, err := freq.RequestWith(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, kerr.TopicAuthorizationFailed.Code, fresp.Topics[0].Partitions[0].ErrorCode)
	lreq := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = consumerOffsetsTopic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lreq.Topics = append(lreq.Topics, lt)
	lresp, err := lreq.RequestWith(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, kerr.TopicAuthorizationFailed.Code, lresp.Topics[0].Partitions[0].ErrorCode)
	assert.True(t, strings.HasPrefix(consumerOffsetsTopic, "__"), "no topic of the name can be created")
}
