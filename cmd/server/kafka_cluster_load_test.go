package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kconn is a raw Kafka connection whose failures are errors (the broker
// may be killed under it), for the share consumer below.
type kconn struct {
	nc   net.Conn
	rd   *bufio.Reader
	fmt  *kmsg.RequestFormatter
	corr int32
}

func dialK(addr string) (*kconn, error) {
	nc, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	return &kconn{nc: nc, rd: bufio.NewReader(nc), fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("kcluster-share"))}, nil
}

func (k *kconn) do(req kmsg.Request) (kmsg.Response, error) {
	k.corr++
	if err := k.nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := k.nc.Write(k.fmt.AppendRequest(nil, req, k.corr)); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(k.rd, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(k.rd, body); err != nil {
		return nil, err
	}
	if len(body) < 4 || int32(binary.BigEndian.Uint32(body)) != k.corr {
		return nil, errors.New("bad correlation id")
	}
	body = body[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && resp.Key() != 18 {
		b := kbin{body}
		for n := b.uvarint(); n > 0; n-- {
			b.uvarint()
			b.skip(int(b.uvarint()))
		}
		body = b.src
	}
	return resp, resp.ReadFrom(body)
}

// tpo names one record: topic id, partition, offset.
type tpo struct {
	topic [16]byte
	part  int32
	off   int64
}

type ktp struct {
	topic [16]byte
	part  int32
}

// kshareSession is the consumer's share session at one broker.
type kshareSession struct {
	epoch int32
	parts map[ktp]bool
	acks  map[ktp][]int64 // acquired here, to ACCEPT with the next fetch
}

// kafkaShareConsumer is a share consumer over the Kafka protocol that
// follows leaders and coordinators as a Kafka client does: heartbeats at
// the coordinator FindCoordinator names, a share session at each
// partition's leader (from Metadata), ACCEPT of every acquired record
// piggybacked on the next ShareFetch to the same broker; on
// NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR or a lost connection it looks
// the leaders and the coordinator up again. It counts the ACCEPTs the
// brokers confirmed per record.
type kafkaShareConsumer struct {
	seeds         []string
	group, member string
	topic         string

	conns    map[int32]*kconn
	addrs    map[int32]string
	leaders  map[ktp]int32
	topicID  [16]byte
	coord    int32
	epoch    int32 // member epoch
	assigned []int32
	lastHB   time.Time
	stale    bool
	sessions map[int32]*kshareSession

	mu       sync.Mutex
	accepted map[tpo]int  // confirmed ACCEPTs per record
	unknown  map[tpo]bool // ACCEPTs whose outcome was lost with a broker
	afterAck []tpo        // records delivered again after a confirmed ACCEPT
	deliv    map[tpo]int  // deliveries per record
	ackErr   map[tpo]int16
	log      []string
}

func newKafkaShareConsumer(seeds []string, group, topic string) *kafkaShareConsumer {
	return &kafkaShareConsumer{seeds: seeds, group: group, member: uuid.NewString(), topic: topic,
		conns: map[int32]*kconn{}, addrs: map[int32]string{}, leaders: map[ktp]int32{}, coord: -1,
		sessions: map[int32]*kshareSession{}, accepted: map[tpo]int{}, unknown: map[tpo]bool{}, stale: true,
		deliv: map[tpo]int{}, ackErr: map[tpo]int16{}}
}

func (c *kafkaShareConsumer) logf(format string, args ...any) {
	c.mu.Lock()
	c.log = append(c.log, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

// any sends req to any seed that answers.
func (c *kafkaShareConsumer) any(req kmsg.Request) (kmsg.Response, error) {
	var last error
	for _, addr := range c.seeds {
		k, err := dialK(addr)
		if err != nil {
			last = err
			continue
		}
		resp, err := k.do(req)
		k.nc.Close()
		if err == nil {
			return resp, nil
		}
		last = err
	}
	return nil, last
}

// at sends req to node, dropping the connection (and the node's session)
// on failure.
func (c *kafkaShareConsumer) at(node int32, req kmsg.Request) (kmsg.Response, error) {
	k := c.conns[node]
	if k == nil {
		addr, ok := c.addrs[node]
		if !ok {
			return nil, fmt.Errorf("no address for broker %d", node)
		}
		var err error
		if k, err = dialK(addr); err != nil {
			return nil, err
		}
		c.conns[node] = k
	}
	resp, err := k.do(req)
	if err != nil {
		k.nc.Close()
		delete(c.conns, node)
		c.stale = true
	}
	return resp, err
}

func (c *kafkaShareConsumer) refresh() {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = &c.topic
	req.Topics = append(req.Topics, rt)
	r, err := c.any(req)
	if err != nil {
		return
	}
	resp := r.(*kmsg.MetadataResponse)
	for _, b := range resp.Brokers {
		c.addrs[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	for _, t := range resp.Topics {
		if t.ErrorCode != 0 {
			return
		}
		c.topicID = t.TopicID
		for _, p := range t.Partitions {
			c.leaders[ktp{t.TopicID, p.Partition}] = p.Leader
		}
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version = 4
	fc.CoordinatorKeys = []string{c.group}
	if r, err := c.any(fc); err == nil {
		if co := r.(*kmsg.FindCoordinatorResponse).Coordinators; len(co) == 1 && co[0].ErrorCode == 0 {
			c.coord = co[0].NodeID
			c.addrs[co[0].NodeID] = net.JoinHostPort(co[0].Host, strconv.Itoa(int(co[0].Port)))
		}
	}
	c.stale = false
}

func (c *kafkaShareConsumer) heartbeat() {
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.MemberEpoch = c.group, c.member, c.epoch
	req.SubscribedTopicNames = []string{c.topic}
	if c.coord < 0 {
		c.stale = true
		return
	}
	r, err := c.at(c.coord, req)
	if err != nil {
		c.logf("heartbeat at %d: %v", c.coord, err)
		return
	}
	resp := r.(*kmsg.ShareGroupHeartbeatResponse)
	switch resp.ErrorCode {
	case 0:
	case kerr.UnknownMemberID.Code, kerr.FencedMemberEpoch.Code:
		c.epoch = 0
		return
	default:
		c.logf("heartbeat at %d: %v", c.coord, kerr.ErrorForCode(resp.ErrorCode))
		c.stale = true
		return
	}
	c.lastHB = time.Now()
	c.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		c.assigned = nil
		for _, tp := range resp.Assignment.TopicPartitions {
			c.assigned = append(c.assigned, tp.Partitions...)
		}
	}
}

// fetchAt does one ShareFetch at node for the assigned partitions it
// leads, with the ACCEPTs of what its session acquired.
func (c *kafkaShareConsumer) fetchAt(node int32, parts []ktp) {
	s := c.sessions[node]
	if s == nil {
		s = &kshareSession{parts: map[ktp]bool{}, acks: map[ktp][]int64{}}
		c.sessions[node] = s
	}
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 2
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &c.group, &c.member, s.epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 200, 1, 1<<20, 200, 200
	want := map[ktp]bool{}
	for _, p := range parts {
		want[p] = true
	}
	sent := map[ktp][]int64{}
	byTopic := map[[16]byte]*kmsg.ShareFetchRequestTopic{}
	add := func(p ktp) *kmsg.ShareFetchRequestTopicPartition {
		t := byTopic[p.topic]
		if t == nil {
			nt := kmsg.NewShareFetchRequestTopic()
			nt.TopicID = p.topic
			req.Topics = append(req.Topics, nt)
			t = &req.Topics[len(req.Topics)-1]
			byTopic[p.topic] = t
		}
		rp := kmsg.NewShareFetchRequestTopicPartition()
		rp.Partition = p.part
		t.Partitions = append(t.Partitions, rp)
		return &t.Partitions[len(t.Partitions)-1]
	}
	for p := range want {
		rp := add(p)
		if s.epoch > 0 {
			for _, off := range s.acks[p] {
				rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{
					FirstOffset: off, LastOffset: off, AcknowledgeTypes: []int8{1}})
			}
			sent[p] = s.acks[p]
		}
	}
	if s.epoch > 0 {
		for p := range s.parts {
			if !want[p] {
				ft := kmsg.NewShareFetchRequestForgottenTopicsData()
				ft.TopicID, ft.Partitions = p.topic, []int32{p.part}
				req.ForgottenTopicsData = append(req.ForgottenTopicsData, ft)
			}
		}
	}
	// Acquisitions of partitions no longer fetched here are dropped: their
	// locks expire and they come back at the new leader.
	s.acks = map[ktp][]int64{}
	lost := func(why string) {
		c.logf("share fetch at %d: %s", node, why)
		c.mu.Lock()
		for p, offs := range sent {
			for _, off := range offs {
				c.unknown[tpo{p.topic, p.part, off}] = true
			}
		}
		c.mu.Unlock()
		delete(c.sessions, node)
		c.stale = true
	}
	r, err := c.at(node, req)
	if err != nil {
		lost(err.Error())
		return
	}
	resp := r.(*kmsg.ShareFetchResponse)
	if resp.ErrorCode != 0 {
		lost(kerr.ErrorForCode(resp.ErrorCode).Error())
		return
	}
	s.epoch++
	s.parts = want
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			p := ktp{t.TopicID, rp.Partition}
			if offs := sent[p]; len(offs) > 0 {
				for _, off := range offs {
					if rp.AcknowledgeErrorCode == 0 {
						c.accepted[tpo{p.topic, p.part, off}]++
					} else {
						c.ackErr[tpo{p.topic, p.part, off}] = rp.AcknowledgeErrorCode
					}
				}
				delete(sent, p)
			}
			if rp.ErrorCode != 0 {
				c.log = append(c.log, fmt.Sprintf("partition %d at %d: %v", rp.Partition, node, kerr.ErrorForCode(rp.ErrorCode)))
				c.stale = true
			}
			for _, a := range rp.AcquiredRecords {
				for off := a.FirstOffset; off <= a.LastOffset; off++ {
					if c.accepted[tpo{p.topic, p.part, off}] > 0 {
						c.afterAck = append(c.afterAck, tpo{p.topic, p.part, off})
					}
					s.acks[p] = append(s.acks[p], off)
					c.deliv[tpo{p.topic, p.part, off}]++
				}
			}
		}
	}
	for p, offs := range sent { // acknowledged partitions the answer left out
		for _, off := range offs {
			c.unknown[tpo{p.topic, p.part, off}] = true
		}
	}
}

// step is one round: heartbeat when due, refresh what is stale, and one
// fetch at every broker leading an assigned partition.
func (c *kafkaShareConsumer) step() {
	if c.stale || len(c.addrs) == 0 {
		c.refresh()
	}
	if c.epoch == 0 || time.Since(c.lastHB) > time.Second {
		c.heartbeat()
	}
	byNode := map[int32][]ktp{}
	for _, p := range c.assigned {
		tp := ktp{c.topicID, p}
		if node, ok := c.leaders[tp]; ok && node >= 0 {
			byNode[node] = append(byNode[node], tp)
		} else {
			c.stale = true
		}
	}
	for node, s := range c.sessions {
		if _, ok := byNode[node]; !ok && len(s.acks) > 0 {
			byNode[node] = nil // a last fetch to send its ACCEPTs
		}
	}
	if len(byNode) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	for node, parts := range byNode {
		c.fetchAt(node, parts)
	}
}

// Three partitioned instances, each a Kafka broker: a kgo producer
// (acks=all), a kgo consumer, kgo's share consumer and a Kafka-protocol
// share consumer counting every confirmed ACCEPT (kafkaShareConsumer), in
// two groups, run while the owner of two partitions that also coordinates
// one group is SIGKILLed. The same kgo clients go on with the moved
// partitions at their new leaders; every acknowledged record is stored at
// its offset and read by the consumer, every one is ACCEPTed in each group,
// none twice, and a record comes again only where the leader changed.
func TestKafkaClusterKillOwnerUnderLoad(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	members := map[string]*kafkaMember{}
	var seeds []string
	for _, id := range []string{"a", "b", "c"} {
		members[id] = startKafkaMember(t, js.URL(), prefix, id, "--cluster-mode", "partitioned")
		members[id].waitReadyz(t, "cluster: partitioned", 15*time.Second)
		seeds = append(seeds, members[id].kafka)
	}
	const topic, parts = "load", 6
	k := dialKafka(t, members["a"].kafka)
	require.Eventually(t, func() bool {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Version = 7
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, 1
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 5000
		c := k.do(req).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
		return c == 0 || c == kerr.TopicAlreadyExists.Code
	}, 15*time.Second, 200*time.Millisecond)
	waitSpread(t, members["a"].child, parts, []string{"a", "b", "c"}, 20*time.Second)
	meta, leaders := waitKafkaLeaders(t, members["a"].kafka, topic, parts, 3, 15*time.Second)
	ids := brokerIDs(meta)

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.RecordRetries(100), kgo.RetryTimeout(60*time.Second),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(cl.Close)

	type acked struct {
		value string
		at    time.Time
	}
	var pmu sync.Mutex
	produced := map[[2]int64]acked{} // (partition, offset) → value
	var failed int
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := fmt.Sprintf("r%d", i)
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}, func(r *kgo.Record, err error) {
				pmu.Lock()
				defer pmu.Unlock()
				if err != nil {
					failed++
					return
				}
				produced[[2]int64{int64(r.Partition), r.Offset}] = acked{string(r.Value), time.Now()}
			})
			time.Sleep(2 * time.Millisecond)
		}
	})
	// The groups read from the start: the records produced before their
	// share-partitions are first fetched count too.
	for _, group := range []string{"kgroup", "kgo-share"} {
		require.Eventually(t, func() bool {
			req := kmsg.NewPtrIncrementalAlterConfigsRequest()
			req.Version = 1
			r := kmsg.NewIncrementalAlterConfigsRequestResource()
			r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
			c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
			v := "earliest"
			c.Name, c.Value = "share.auto.offset.reset", &v
			r.Configs = append(r.Configs, c)
			req.Resources = append(req.Resources, r)
			resp := k.do(req).(*kmsg.IncrementalAlterConfigsResponse)
			return resp.Resources[0].ErrorCode == 0
		}, 15*time.Second, 200*time.Millisecond, "set the share.auto.offset.reset of %s", group)
	}
	// kgo's own share consumer, in a second group, ACCEPTs everything
	// across the kill: the delivery counts of each record are recorded.
	var smu sync.Mutex
	shareDeliv := map[[2]int64][]int32{} // (partition, offset) → delivery counts seen
	var shareAckErrs []error
	sh, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ShareGroup("kgo-share"), kgo.ConsumeTopics(topic),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
			smu.Lock()
			defer smu.Unlock()
			for _, r := range rs {
				if r.Err != nil {
					shareAckErrs = append(shareAckErrs, fmt.Errorf("%s/%d: %w", r.Topic, r.Partition, r.Err))
				}
			}
		}))
	require.NoError(t, err)
	t.Cleanup(sh.Close)
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	var swg sync.WaitGroup
	swg.Go(func() {
		for sctx.Err() == nil {
			fs := sh.PollFetches(sctx)
			smu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				k := [2]int64{int64(r.Partition), r.Offset}
				shareDeliv[k] = append(shareDeliv[k], int32(r.DeliveryCount()))
				r.Ack(kgo.AckAccept)
			})
			smu.Unlock()
		}
	})
	// A kgo consumer reads the topic throughout, across the kill: it
	// follows the leaders and validates its positions with their epochs
	// (OffsetForLeaderEpoch).
	follower, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond), kgo.MetadataMinAge(250*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(follower.Close)
	var fmu sync.Mutex
	followed := map[[2]int64]string{}
	var followErrs []error
	fctx, fcancel := context.WithCancel(context.Background())
	var fwg sync.WaitGroup
	fwg.Go(func() {
		for fctx.Err() == nil {
			fs := follower.PollFetches(fctx)
			fmu.Lock()
			fs.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.Canceled) {
					followErrs = append(followErrs, fmt.Errorf("%s/%d: %w", topic, p, err))
				}
			})
			fs.EachRecord(func(r *kgo.Record) { followed[[2]int64{int64(r.Partition), r.Offset}] = string(r.Value) })
			fmu.Unlock()
		}
	})
	sc := newKafkaShareConsumer(seeds, "kgroup", topic)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			sc.step()
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range members {
				t.Logf("last log lines of %s:\n%s", m.id, strings.Join(m.logs.Tail(60), "\n"))
			}
			sc.mu.Lock()
			t.Logf("share consumer log (last 40):\n%s", strings.Join(sc.log[max(0, len(sc.log)-40):], "\n"))
			sc.mu.Unlock()
		}
	})
	// Load on every partition before the kill.
	require.Eventually(t, func() bool {
		pmu.Lock()
		defer pmu.Unlock()
		seen := map[int64]bool{}
		for k := range produced {
			seen[k[0]] = true
		}
		return len(seen) == parts && len(produced) > 200
	}, 30*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return len(sc.accepted) > 100
	}, 30*time.Second, 100*time.Millisecond, "the share consumer ACCEPTs")

	// The victim is the group's coordinator (the instance the first
	// heartbeat reached), and owner of two partitions.
	// COORDINATOR_NOT_AVAILABLE is retriable (a Kafka client asks again):
	// under this load a lookup of the group's lease may not answer at once.
	var co kmsg.FindCoordinatorResponseCoordinator
	require.Eventually(t, func() bool {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.Version = 4
		fc.CoordinatorKeys = []string{"kgroup"}
		co = k.do(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0]
		return co.ErrorCode != kerr.CoordinatorNotAvailable.Code
	}, 10*time.Second, 100*time.Millisecond, "FindCoordinator keeps answering COORDINATOR_NOT_AVAILABLE")
	require.Zero(t, co.ErrorCode)
	var victim *kafkaMember
	for _, m := range members {
		if ids[m.kafka] == co.NodeID {
			victim = m
		}
	}
	require.NotNil(t, victim, "coordinator %d is a member", co.NodeID)
	victimNode := co.NodeID
	t.Logf("killing %s (broker %d), the group's coordinator", victim.id, victimNode)
	victim.kill(t)
	delete(members, victim.id)
	killed := time.Now()
	var live *kafkaMember
	for _, m := range members {
		live = m
	}
	_, after := waitKafkaLeaders(t, live.kafka, topic, parts, 2, leaseTTL+20*time.Second)
	var movedParts []int32
	for p, l := range leaders {
		if l.leader == victimNode {
			movedParts = append(movedParts, p)
			require.Greater(t, after[p].epoch, l.epoch)
		}
	}
	require.NotEmpty(t, movedParts)
	// The same client writes to the moved partitions at their new leaders.
	require.Eventually(t, func() bool {
		pmu.Lock()
		defer pmu.Unlock()
		n := 0
		for k, a := range produced {
			for _, p := range movedParts {
				if k[0] == int64(p) && a.at.After(killed) {
					n++
				}
			}
		}
		return n >= 20*len(movedParts)
	}, 60*time.Second, 100*time.Millisecond, "the kgo client produces to the moved partitions after the kill")
	close(stop)
	wg.Wait()
	cl.Flush(context.Background())

	// Drain: the share consumer goes on until every acknowledged record is
	// ACCEPTed — confirmed, or by an ACCEPT whose answer was lost with the
	// killed broker (such a record is not delivered again if the ACCEPT
	// held, and comes back after its lock if it did not) — and the group's
	// share-partitions start at the end of their partitions: every record
	// is ACCEPTed (none is released or rejected here), none left out.
	pmu.Lock()
	want := make(map[[2]int64]acked, len(produced))
	for k, v := range produced {
		want[k] = v
	}
	pmu.Unlock()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(90 * time.Second)
	for {
		var why []string
		sc.mu.Lock()
		for k := range want {
			r := tpo{sc.topicID, int32(k[0]), k[1]}
			if sc.accepted[r] == 0 && !sc.unknown[r] {
				why = append(why, fmt.Sprintf("%d/%d delivered %d, ack error %d", k[0], k[1], sc.deliv[r], sc.ackErr[r]))
			}
		}
		sc.mu.Unlock()
		if len(why) == 0 {
			lag := shareLag(t, adm, live.kafka, "kgroup", topic, parts)
			if lag == "" {
				break
			}
			why = append(why, lag)
		}
		if time.Now().After(deadline) {
			t.Fatalf("acknowledged records not ACCEPTed within 90 s: %v", why)
		}
		sc.step()
	}
	sc.mu.Lock()
	for r, n := range sc.accepted {
		require.Equal(t, 1, n, "record %d/%d ACCEPTed %d times", r.part, r.off, n)
	}
	require.Empty(t, sc.afterAck, "records delivered again after a confirmed ACCEPT")
	for r := range sc.unknown {
		if sc.accepted[r] == 0 {
			require.Equal(t, 1, sc.deliv[r], "record %d/%d: its ACCEPT of unknown outcome held, so it was delivered once", r.part, r.off)
		}
	}
	t.Logf("%d records acknowledged (%d produce failures), %d ACCEPTed, %d ACCEPTs with a lost outcome; partitions %v moved",
		len(want), failed, len(sc.accepted), len(sc.unknown), movedParts)
	sc.mu.Unlock()

	// kgo's share consumer got every acknowledged record and ACCEPTed
	// each: its group starts at the end of every partition. A record is
	// delivered again only on the partitions that moved: acquired at the
	// killed owner without an ACCEPT that held, it is available again at
	// the next with its last durable delivery count (docs/cluster.md).
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		smu.Lock()
		var missing [][2]int64
		for k := range want {
			if len(shareDeliv[k]) == 0 {
				missing = append(missing, k)
			}
		}
		errs := slices.Clone(shareAckErrs)
		smu.Unlock()
		lag := shareLag(t, adm, live.kafka, "kgo-share", topic, parts)
		if len(missing) == 0 && lag == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kgo's share consumer did not ACCEPT every acknowledged record within 90 s: %d never delivered (%v), lag %s, ack errors %v",
				len(missing), missing[:min(len(missing), 20)], lag, errs)
		}
	}
	scancel()
	swg.Wait()
	// The partitions whose leader changed: the victim's, and any whose
	// lease lapsed on a loaded machine and was taken again (a new epoch).
	_, final := waitKafkaLeaders(t, live.kafka, topic, parts, 2, 30*time.Second)
	var changed []int32
	for p, l := range leaders {
		if final[p].epoch != l.epoch {
			changed = append(changed, p)
		}
	}
	smu.Lock()
	redelivered := 0
	for k, counts := range shareDeliv {
		if len(counts) > 1 {
			redelivered++
			require.Contains(t, changed, int32(k[0]), "record %d/%d of a partition that kept its leader delivered %v", k[0], k[1], counts)
		}
	}
	t.Logf("kgo's share consumer: %d records, %d delivered again, ack errors %v", len(shareDeliv), redelivered, shareAckErrs)
	smu.Unlock()

	// Every acknowledged record is stored at its offset: the kgo consumer
	// that ran across the kill reads every one, without data loss or any
	// other error.
	require.Eventually(t, func() bool {
		fmu.Lock()
		defer fmu.Unlock()
		for k, a := range want {
			if followed[k] != a.value {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "the kgo consumer reads every acknowledged record")
	fcancel()
	fwg.Wait()
	fmu.Lock()
	defer fmu.Unlock()
	for _, err := range followErrs {
		var loss *kgo.ErrDataLoss
		require.False(t, errors.As(err, &loss), "the consumer saw data loss: %v", err)
	}
	t.Logf("the kgo consumer saw %d errors across the kill: %v", len(followErrs), followErrs)
}

// shareLag is "" when the group's start offset on each of topic's parts
// partitions (DescribeShareGroupOffsets at addr) is the partition's end
// offset, else what differs.
func shareLag(t *testing.T, adm *kadm.Client, addr, group, topic string, parts int32) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil || ends.Error() != nil {
		return fmt.Sprintf("end offsets: %v %v", err, ends.Error())
	}
	k, err := dialK(addr)
	if err != nil {
		return err.Error()
	}
	defer k.nc.Close()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	req.Version = 1
	rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	rg.GroupID = group
	rt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	rt.Topic = topic
	for p := range parts {
		rt.Partitions = append(rt.Partitions, p)
	}
	rg.Topics = append(rg.Topics, rt)
	req.Groups = append(req.Groups, rg)
	r, err := k.do(req)
	if err != nil {
		return err.Error()
	}
	var diff []string
	for _, g := range r.(*kmsg.DescribeShareGroupOffsetsResponse).Groups {
		if g.ErrorCode != 0 {
			return kerr.ErrorForCode(g.ErrorCode).Error()
		}
		for _, gt := range g.Topics {
			for _, p := range gt.Partitions {
				end, _ := ends.Lookup(topic, p.Partition)
				if p.ErrorCode != 0 || p.StartOffset != end.Offset {
					diff = append(diff, fmt.Sprintf("%d: start %d, end %d, %v", p.Partition, p.StartOffset, end.Offset, kerr.ErrorForCode(p.ErrorCode)))
				}
			}
		}
	}
	return strings.Join(diff, "; ")
}
