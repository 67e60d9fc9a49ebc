package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// kafkaCreateTopic creates topic with n partitions at addr, retrying while
// the cluster settles.
func kafkaCreateTopic(t *testing.T, addr, topic string, n int32) {
	t.Helper()
	k := dialKafka(t, addr)
	require.Eventually(t, func() bool {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version, req.TimeoutMillis = 7, 5000
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, 1
		req.Topics = append(req.Topics, rt)
		c := k.do(req).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
		return c == 0 || c == kerr.TopicAlreadyExists.Code
	}, 15*time.Second, 200*time.Millisecond)
}

// kafkaGrow sends CreatePartitions (topic to count) to addr and returns
// the topic's code.
func kafkaGrow(t *testing.T, addr, topic string, count int32) int16 {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.Version, req.TimeoutMillis = 3, 5000
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = topic, count
	req.Topics = append(req.Topics, rt)
	return k.do(req).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode
}

// kafkaSetConfig sets one topic config at addr and returns the code.
func kafkaSetConfig(t *testing.T, addr, topic, name, value string) int16 {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	e := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	e.Name, e.Op, e.Value = name, kmsg.IncrementalAlterConfigOpSet, &value
	r.Configs = append(r.Configs, e)
	req.Resources = append(req.Resources, r)
	return k.do(req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode
}

// produceBigAt produces one record batch of a value of n bytes to addr.
func produceBigAt(t *testing.T, addr, topic string, part int32, n int) int16 {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	code, _ := k.kproduce(topic, part, oneBigBatch(n))
	return code
}

// Partitioned mode on the JetStream store: partitions added at one
// instance (passed to the controller) get owners, which lead and serve
// them over Kafka and gRPC; a config altered at one instance is the
// config of every instance (one metadata entry), and max.message.bytes is
// refused at the leader.
func TestPartitionedCreatePartitionsAndConfigs(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	members := map[string]*kafkaMember{}
	for _, id := range []string{"a", "b"} {
		members[id] = startKafkaMember(t, js.URL(), prefix, id, "--cluster-mode", "partitioned")
		members[id].waitReadyz(t, "cluster: partitioned", 15*time.Second)
	}
	a, b := members["a"], members["b"]
	kafkaCreateTopic(t, a.kafka, "pg", 2)
	waitSpread(t, a.child, 2, []string{"a", "b"}, 20*time.Second)

	// At both instances, one of which is not the controller.
	require.Zero(t, kafkaGrow(t, b.kafka, "pg", 3), "CreatePartitions at b")
	require.Zero(t, kafkaGrow(t, a.kafka, "pg", 4), "CreatePartitions at a")
	assert.Equal(t, kerr.InvalidPartitions.Code, kafkaGrow(t, b.kafka, "pg", 4), "the controller's refusal keeps its Kafka code")
	waitSpread(t, a.child, 4, []string{"a", "b"}, 20*time.Second)
	meta, leaders := waitKafkaLeaders(t, a.kafka, "pg", 4, 2, 20*time.Second)
	ids := brokerIDs(meta)
	byNode := map[int32]*kafkaMember{ids[a.kafka]: a, ids[b.kafka]: b}
	for p := int32(2); p < 4; p++ {
		leader := byNode[leaders[p].leader]
		require.NotNil(t, leader, "partition %d has a live leader: %v", p, leaders)
		assert.Zero(t, produceBigAt(t, leader.kafka, "pg", p, 10), "produce to new partition %d at its leader %s", p, leader.id)
	}
	for _, m := range members {
		_, l := waitKafkaLeaders(t, m.kafka, "pg", 4, 2, 10*time.Second)
		assert.Len(t, l, 4, "Metadata at %s lists the new partitions", m.id)
	}
	// gRPC at any instance reaches a new partition's owner.
	res, err := sharelogv1.NewLogServiceClient(b.conn).Produce(context.Background(), &sharelogv1.ProduceRequest{Topic: "pg",
		Partition: proto.Int32(3), Records: []*sharelogv1.Record{{Value: []byte("grpc")}}})
	require.NoError(t, err)
	assert.Zero(t, res.GetResults()[0].GetErrorCode())

	// One stored config: set at b, refused at a's partitions too.
	require.Zero(t, kafkaSetConfig(t, b.kafka, "pg", "max.message.bytes", "200"))
	for p, l := range leaders {
		leader := byNode[l.leader]
		require.Eventually(t, func() bool { return produceBigAt(t, leader.kafka, "pg", p, 300) == kerr.MessageTooLarge.Code },
			10*time.Second, 100*time.Millisecond, "partition %d at %s refuses a batch over max.message.bytes", p, leader.id)
		assert.Zero(t, produceBigAt(t, leader.kafka, "pg", p, 50), "partition %d takes a small batch", p)
	}
	for _, m := range members {
		d, err := sharelogv1.NewLogServiceClient(m.conn).DescribeTopic(context.Background(), &sharelogv1.DescribeTopicRequest{Name: "pg"})
		require.NoError(t, err)
		assert.EqualValues(t, 4, d.GetPartitionCount(), m.id)
		assert.EqualValues(t, 200, d.GetConfig().GetMaxMessageBytes(), m.id)
		assert.Equal(t, []string{"max.message.bytes"}, d.GetConfig().GetOverrides(), m.id)
	}
}

// Active-standby on the JetStream store: CreatePartitions at the standby
// is made by the active, whose partitions they are; a config altered at
// the standby is the active's.
func TestActiveStandbyCreatePartitionsAndConfigs(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startKafkaMember(t, js.URL(), prefix, "a")
	a.waitReadyz(t, "cluster: active", 20*time.Second)
	b := startKafkaMember(t, js.URL(), prefix, "b")
	b.waitReadyz(t, "forwarding to a", 15*time.Second)
	kafkaCreateTopic(t, b.kafka, "as", 1)
	waitKafkaLeaders(t, b.kafka, "as", 1, 2, 15*time.Second)

	require.Zero(t, kafkaGrow(t, b.kafka, "as", 3), "CreatePartitions at the standby")
	meta, leaders := waitKafkaLeaders(t, b.kafka, "as", 3, 2, 15*time.Second)
	nodeA := brokerIDs(meta)[a.kafka]
	for p, l := range leaders {
		assert.Equal(t, nodeA, l.leader, "partition %d is led by the active", p)
	}
	assert.Zero(t, produceBigAt(t, a.kafka, "as", 2, 10), "the active serves a new partition")
	require.Zero(t, kafkaSetConfig(t, b.kafka, "as", "max.message.bytes", "200"), "a config set at the standby")
	require.Eventually(t, func() bool { return produceBigAt(t, a.kafka, "as", 2, 300) == kerr.MessageTooLarge.Code },
		10*time.Second, 100*time.Millisecond, "the active applies it")
	d, err := sharelogv1.NewLogServiceClient(b.conn).DescribeTopic(context.Background(), &sharelogv1.DescribeTopicRequest{Name: "as"})
	require.NoError(t, err)
	assert.EqualValues(t, 3, d.GetPartitionCount())
	assert.EqualValues(t, 200, d.GetConfig().GetMaxMessageBytes())
}
