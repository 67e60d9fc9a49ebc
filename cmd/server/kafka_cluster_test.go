package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaMember is a cluster-mode child with a Kafka listener.
type kafkaMember struct {
	*child
	id    string
	kafka string // its Kafka address
}

// startKafkaMember runs a cluster-mode child with --kafka-addr.
func startKafkaMember(t *testing.T, natsURL, prefix, id string, extra ...string) *kafkaMember {
	t.Helper()
	c := startMember(t, natsURL, prefix, id, append([]string{"--kafka-addr", "127.0.0.1:0", "--kafka-default-partitions", "1"}, extra...)...)
	return &kafkaMember{child: c, id: id, kafka: kafkaAddrOf(t, c)}
}

// kafkaMetadata is a Metadata v12 answer from exactly addr (all topics).
func kafkaMetadata(t *testing.T, addr string, topics ...string) *kmsg.MetadataResponse {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	if len(topics) > 0 {
		for _, name := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = &name
			req.Topics = append(req.Topics, rt)
		}
	}
	return k.do(req).(*kmsg.MetadataResponse)
}

// brokerIDs maps each broker's host:port to its node id.
func brokerIDs(resp *kmsg.MetadataResponse) map[string]int32 {
	out := map[string]int32{}
	for _, b := range resp.Brokers {
		out[net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))] = b.NodeID
	}
	return out
}

// partLeader is a partition's leader and epoch in a Metadata answer.
type partLeader struct {
	leader, epoch int32
	code          int16
}

func leadersOf(resp *kmsg.MetadataResponse, topic string) map[int32]partLeader {
	out := map[int32]partLeader{}
	for _, rt := range resp.Topics {
		if rt.Topic == nil || *rt.Topic != topic {
			continue
		}
		for _, p := range rt.Partitions {
			out[p.Partition] = partLeader{p.Leader, p.LeaderEpoch, p.ErrorCode}
		}
	}
	return out
}

// waitKafkaLeaders waits until Metadata at addr lists want brokers and
// gives each of topic's n partitions a live leader among them.
func waitKafkaLeaders(t *testing.T, addr, topic string, n, want int, within time.Duration) (*kmsg.MetadataResponse, map[int32]partLeader) {
	t.Helper()
	deadline := time.Now().Add(within)
	var resp *kmsg.MetadataResponse
	for {
		resp = kafkaMetadata(t, addr, topic)
		leaders := leadersOf(resp, topic)
		ok := len(resp.Brokers) == want && len(leaders) == n
		ids := map[int32]bool{}
		for _, b := range resp.Brokers {
			ids[b.NodeID] = true
		}
		for _, l := range leaders {
			ok = ok && l.code == 0 && ids[l.leader]
		}
		if ok {
			return resp, leaders
		}
		if time.Now().After(deadline) {
			t.Fatalf("metadata at %s: not %d brokers leading the %d partitions of %s within %v: brokers %v, leaders %v", addr, want, n, topic, within, resp.Brokers, leaders)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// listOffsetsAt sends ListOffsets (latest) for topic's partition to addr
// with the given current leader epoch (-1 = none) and returns its code.
func listOffsetsAt(t *testing.T, addr, topic string, part, epoch int32) int16 {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = 7
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = part, -1, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := k.do(req).(*kmsg.ListOffsetsResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

// fetchAt sends a Fetch v12 of topic's partition from offset 0 to addr
// with the given current leader epoch and returns the partition's answer.
func fetchAt(t *testing.T, addr, topic string, part, epoch int32) kmsg.FetchResponseTopicPartition {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = -1, 0, 1<<20, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = part, 0, 1<<20, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := k.do(req).(*kmsg.FetchResponse)
	return resp.Topics[0].Partitions[0]
}

// produceAt sends a Produce v9 of no records to addr for topic's
// partition and returns the partition's answer: a broker that does not
// lead it answers before looking at the records.
func produceAt(t *testing.T, addr, topic string, part int32) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = part
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := k.do(req).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0]
}

// Three partitioned instances with Kafka listeners: Metadata at each lists
// the three brokers with the same distinct ids, each partition led by its
// owner; a request for a partition at another broker is
// NOT_LEADER_OR_FOLLOWER; after an owner is SIGKILLed its partitions have
// new leaders with higher epochs (the old epoch is FENCED_LEADER_EPOCH, a
// newer one UNKNOWN_LEADER_EPOCH); the restarted instance has its old id.
func TestKafkaClusterBrokersLeadersEpochs(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	members := map[string]*kafkaMember{}
	for _, id := range []string{"a", "b", "c"} {
		members[id] = startKafkaMember(t, js.URL(), prefix, id, "--cluster-mode", "partitioned")
		members[id].waitReadyz(t, "cluster: partitioned", 15*time.Second)
	}
	k := dialKafka(t, members["a"].kafka)
	require.Eventually(t, func() bool {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "kt", 6, 1
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 5000
		resp := k.do(req).(*kmsg.CreateTopicsResponse)
		c := resp.Topics[0].ErrorCode
		return c == 0 || c == kerr.TopicAlreadyExists.Code
	}, 15*time.Second, 200*time.Millisecond)
	waitSpread(t, members["a"].child, 6, []string{"a", "b", "c"}, 20*time.Second)

	meta, leaders := waitKafkaLeaders(t, members["a"].kafka, "kt", 6, 3, 15*time.Second)
	ids := brokerIDs(meta)
	byNode := map[int32]*kafkaMember{}
	for _, m := range members {
		id, ok := ids[m.kafka]
		require.True(t, ok, "broker %s (%s) listed: %v", m.id, m.kafka, ids)
		byNode[id] = m
	}
	require.Len(t, byNode, 3, "distinct node ids: %v", ids)
	for _, m := range members {
		other, _ := waitKafkaLeaders(t, m.kafka, "kt", 6, 3, 15*time.Second)
		require.Equal(t, ids, brokerIDs(other), "the same brokers at %s", m.id)
		require.Equal(t, meta.ControllerID, other.ControllerID, "the same controller at %s", m.id)
		require.Equal(t, *meta.ClusterID, *other.ClusterID, "the same cluster id at %s", m.id)
		// The leaders and epochs every instance names agree (each reads
		// the partition leases; an owner's own from its gates).
		require.Eventually(t, func() bool {
			return assert.ObjectsAreEqual(leaders, leadersOf(kafkaMetadata(t, m.kafka, "kt"), "kt"))
		}, 5*time.Second, 100*time.Millisecond, "the leaders at %s", m.id)
	}
	// Each partition's leader is its owner (DescribeCluster).
	dc := waitSpread(t, members["a"].child, 6, []string{"a", "b", "c"}, 5*time.Second)
	for p, l := range leaders {
		require.Equal(t, dc[fmt.Sprintf("kt/%d", p)].GetOwnerId(), byNode[l.leader].id, "leader of kt/%d", p)
	}

	// At a broker that does not lead it, a partition is
	// NOT_LEADER_OR_FOLLOWER; at its leader it is served.
	for p, l := range leaders {
		leader := byNode[l.leader]
		var other *kafkaMember
		for _, m := range members {
			if m != leader {
				other = m
				break
			}
		}
		require.Equal(t, kerr.NotLeaderForPartition.Code, listOffsetsAt(t, other.kafka, "kt", p, -1), "list offsets of kt/%d at %s", p, other.id)
		require.Equal(t, kerr.NotLeaderForPartition.Code, fetchAt(t, other.kafka, "kt", p, -1).ErrorCode, "fetch of kt/%d at %s", p, other.id)
		pr := produceAt(t, other.kafka, "kt", p)
		require.Equal(t, kerr.NotLeaderForPartition.Code, pr.ErrorCode, "produce of kt/%d at %s", p, other.id)
		require.Equal(t, l.leader, pr.CurrentLeader.LeaderID, "produce answer names the leader of kt/%d", p)
		// acks=0 gets no answer: the connection is closed instead.
		k0, err := dialK(other.kafka)
		require.NoError(t, err)
		p0 := kmsg.NewPtrProduceRequest()
		p0.Version, p0.Acks, p0.TimeoutMillis = 9, 0, 5000
		rt0 := kmsg.NewProduceRequestTopic()
		rt0.Topic = "kt"
		rp0 := kmsg.NewProduceRequestTopicPartition()
		rp0.Partition = p
		rt0.Partitions = append(rt0.Partitions, rp0)
		p0.Topics = append(p0.Topics, rt0)
		_, err = k0.nc.Write(k0.fmt.AppendRequest(nil, p0, 1))
		require.NoError(t, err)
		k0.corr = 1
		_, err = k0.do(kmsg.NewPtrApiVersionsRequest())
		require.Error(t, err, "an acks=0 produce of kt/%d at %s closes the connection", p, other.id)
		k0.nc.Close()
		require.Zero(t, listOffsetsAt(t, leader.kafka, "kt", p, l.epoch), "list offsets of kt/%d at its leader %s", p, leader.id)
		require.Zero(t, fetchAt(t, leader.kafka, "kt", p, l.epoch).ErrorCode, "fetch of kt/%d at its leader", p)
	}

	// Three records in every partition, through a kgo client that follows
	// the leaders.
	cl, err := kgo.NewClient(kgo.SeedBrokers(members["a"].kafka), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	for p := range int32(6) {
		for range 3 {
			require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: "kt", Partition: p, Value: []byte("x")}).FirstErr())
		}
	}
	cl.Close()

	// SIGKILL c: its partitions get new leaders, at higher epochs.
	victim := members["c"]
	victimNode := ids[victim.kafka]
	victim.kill(t)
	delete(members, "c")
	_, after := waitKafkaLeaders(t, members["a"].kafka, "kt", 6, 2, leaseTTL+20*time.Second)
	moved := 0
	for p, l := range leaders {
		a := after[p]
		if l.leader != victimNode {
			require.Equal(t, l, a, "kt/%d kept its leader and epoch", p)
			continue
		}
		moved++
		require.Greater(t, a.epoch, l.epoch, "kt/%d: the new leader's epoch is higher", p)
		newLeader := byNode[a.leader]
		require.Equal(t, kerr.FencedLeaderEpoch.Code, listOffsetsAt(t, newLeader.kafka, "kt", p, l.epoch), "the old epoch of kt/%d is fenced", p)
		require.Equal(t, kerr.FencedLeaderEpoch.Code, fetchAt(t, newLeader.kafka, "kt", p, l.epoch).ErrorCode)
		require.Equal(t, kerr.UnknownLeaderEpoch.Code, fetchAt(t, newLeader.kafka, "kt", p, a.epoch+1).ErrorCode)
		fr := fetchAt(t, newLeader.kafka, "kt", p, a.epoch)
		require.Zero(t, fr.ErrorCode)
		require.GreaterOrEqual(t, len(fr.RecordBatches), 61, "kt/%d: hw %d, log start %d", p, fr.HighWatermark, fr.LogStartOffset)
		require.Equal(t, a.epoch, int32(binary.BigEndian.Uint32(fr.RecordBatches[12:16])), "kt/%d: the batch carries the new leader's epoch", p)
		// A consumer that read under the old leader validates its
		// position: the old epoch ends at the high watermark.
		ep := offsetForLeaderEpochAt(t, newLeader.kafka, "kt", p, a.epoch, l.epoch)
		require.Zero(t, ep.ErrorCode)
		require.Equal(t, l.epoch, ep.LeaderEpoch)
		require.Equal(t, int64(3), ep.EndOffset)
		require.Equal(t, kerr.FencedLeaderEpoch.Code, offsetForLeaderEpochAt(t, newLeader.kafka, "kt", p, l.epoch, l.epoch).ErrorCode)
	}
	require.Equal(t, 2, moved, "c led two of the six partitions")

	// c again, under the same instance ID: the same node id.
	members["c"] = startKafkaMember(t, js.URL(), prefix, "c", "--cluster-mode", "partitioned")
	members["c"].waitReadyz(t, "cluster: partitioned", 15*time.Second)
	meta, _ = waitKafkaLeaders(t, members["a"].kafka, "kt", 6, 3, 20*time.Second)
	require.Equal(t, victimNode, brokerIDs(meta)[members["c"].kafka], "c's node id across its restart: %v", brokerIDs(meta))
}

// Active-standby with Kafka listeners: Metadata at the standby lists both
// brokers and names the active as the controller and every partition's
// leader; the standby answers NOT_LEADER_OR_FOLLOWER and NOT_COORDINATOR
// and points FindCoordinator at the active. A kgo client seeded with the
// standby only produces through the active, and after the active is
// SIGKILLed the same client produces to the new active (a higher leader
// epoch); every acknowledged record is stored.
func TestKafkaActiveStandbyFailover(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startKafkaMember(t, js.URL(), prefix, "a")
	a.waitReadyz(t, "cluster: active", 20*time.Second)
	b := startKafkaMember(t, js.URL(), prefix, "b")
	b.waitReadyz(t, "forwarding to a", 15*time.Second)

	// A topic created at the standby is created by the active.
	kb := dialKafka(t, b.kafka)
	require.Eventually(t, func() bool {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "as", 3, 1
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 5000
		c := kb.do(req).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
		return c == 0 || c == kerr.TopicAlreadyExists.Code
	}, 15*time.Second, 200*time.Millisecond)
	meta, leaders := waitKafkaLeaders(t, b.kafka, "as", 3, 2, 15*time.Second)
	ids := brokerIDs(meta)
	nodeA, nodeB := ids[a.kafka], ids[b.kafka]
	require.NotEqual(t, nodeA, nodeB)
	require.Equal(t, nodeA, meta.ControllerID, "the active is the controller")
	for p, l := range leaders {
		require.Equal(t, nodeA, l.leader, "partition %d is led by the active", p)
	}
	require.Equal(t, leaders, leadersOf(kafkaMetadata(t, a.kafka, "as"), "as"), "the active and the standby agree on leaders and epochs")
	require.Equal(t, kerr.NotLeaderForPartition.Code, listOffsetsAt(t, b.kafka, "as", 0, -1))
	require.Equal(t, kerr.NotLeaderForPartition.Code, fetchAt(t, b.kafka, "as", 0, -1).ErrorCode)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version = 4
	fc.CoordinatorKeys = []string{"g"}
	co := kb.do(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0]
	require.Zero(t, co.ErrorCode)
	require.Equal(t, nodeA, co.NodeID, "the standby points FindCoordinator at the active")
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.Version = 1
	hb.GroupID, hb.MemberID, hb.MemberEpoch, hb.SubscribedTopicNames = "g", "m", 0, []string{"as"}
	require.Equal(t, kerr.NotCoordinator.Code, kb.do(hb).(*kmsg.ShareGroupHeartbeatResponse).ErrorCode)
	var asID [16]byte
	for _, rt := range meta.Topics {
		if rt.Topic != nil && *rt.Topic == "as" {
			asID = rt.TopicID
		}
	}
	sf := kb.shareFetch(kshareFetch{group: "g", member: "m", topics: map[[16]byte][]int32{asID: {0, 1}}})
	require.Len(t, sf.Topics, 1)
	require.Len(t, sf.Topics[0].Partitions, 2)
	for _, p := range sf.Topics[0].Partitions {
		require.Equal(t, kerr.NotLeaderForPartition.Code, p.ErrorCode, "share fetch of as/%d at the standby", p.Partition)
		require.Equal(t, nodeA, p.CurrentLeader.LeaderID)
		require.Equal(t, leaders[p.Partition].epoch, p.CurrentLeader.LeaderEpoch)
	}
	require.Len(t, sf.NodeEndpoints, 1)
	require.Equal(t, nodeA, sf.NodeEndpoints[0].NodeID, "the answer names the active's endpoint")

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.kafka), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.RecordRetries(100), kgo.RetryTimeout(60*time.Second),
		kgo.MetadataMinAge(250*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx := context.Background()
	produced := map[[2]int64]string{}
	produce := func(n int, tag string) {
		for i := range n {
			v := fmt.Sprintf("%s-%d", tag, i)
			r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: "as", Value: []byte(v)}).First()
			require.NoError(t, err, "produce %s", v)
			produced[[2]int64{int64(r.Partition), r.Offset}] = v
		}
	}
	produce(30, "before")

	a.kill(t)
	b.waitReadyz(t, "cluster: active", leaseTTL+20*time.Second)
	produce(30, "after") // the same client, to the new active
	meta, after := waitKafkaLeaders(t, b.kafka, "as", 3, 1, 15*time.Second)
	require.Equal(t, nodeB, meta.ControllerID)
	for p, l := range after {
		require.Equal(t, nodeB, l.leader, "partition %d is led by the new active", p)
		require.Greater(t, l.epoch, leaders[p].epoch, "partition %d: a higher leader epoch", p)
	}
	require.Equal(t, kerr.FencedLeaderEpoch.Code, fetchAt(t, b.kafka, "as", 0, leaders[0].epoch).ErrorCode, "the old epoch is fenced")

	rd, err := kgo.NewClient(kgo.SeedBrokers(b.kafka), kgo.ConsumeTopics("as"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer rd.Close()
	stored := map[[2]int64]string{}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(stored) < len(produced) {
		fs := rd.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "read back %d of %d", len(stored), len(produced))
		fs.EachRecord(func(r *kgo.Record) { stored[[2]int64{int64(r.Partition), r.Offset}] = string(r.Value) })
	}
	for k, v := range produced {
		require.Equal(t, v, stored[k], "record at %d/%d", k[0], k[1])
	}
}

// offsetForLeaderEpochAt sends OffsetForLeaderEpoch v4 for topic's
// partition to addr and returns the partition's answer.
func offsetForLeaderEpochAt(t *testing.T, addr, topic string, part, current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.Version, req.ReplicaID = 4, -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = part, current, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return k.do(req).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
}
