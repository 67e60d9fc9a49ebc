package kafkawire

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// newShareFixture is a fixture whose listener serves share groups, with a
// manager over its store (lock durations down to 10ms).
func newShareFixture(t *testing.T) *fixture {
	t.Helper()
	return withShare(newFixture(t), nil)
}

// withShare restarts f's listener with share groups on, their manager
// given tx for read-committed groups (nil: none).
func withShare(f *fixture, tx sharegroup.Transactions) *fixture {
	t := f.t
	t.Helper()
	m, err := sharegroup.Open(f.store, sharestate.NewMem(), sharegroup.Options{MinRecordLockDuration: 10 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond, SessionTimeout: 5 * time.Second, Transactions: tx})
	if err != nil {
		t.Fatal(err)
	}
	// Restart the listener with share groups on (the handler table is built at Listen).
	if err := f.l.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := f.l.cfg
	cfg.Share = m
	f.log.Subscribe(func(ev broker.TopicEvent) {
		if ev.Kind == broker.TopicDeleted {
			m.TopicDeleted(ev.Topic.ID)
		}
	})
	l, err := Listen(cfg, f.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		m.Close()
	})
	f.l, f.addr = l, l.Addr().String()
	return f
}

func (f *fixture) setGroupConfig(group string, kv ...string) {
	f.t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i < len(kv); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		v := kv[i+1]
		c.Name, c.Op, c.Value = kv[i], kmsg.IncrementalAlterConfigOpSet, &v
		r.Configs = append(r.Configs, c)
	}
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(testCtx(f.t), f.client())
	if err != nil {
		f.t.Fatal(err)
	}
	if code := resp.Resources[0].ErrorCode; code != 0 {
		f.t.Fatalf("alter group config: %v %v", kerr.ErrorForCode(code), resp.Resources[0].ErrorMessage)
	}
}

// TestShareConsumerAcks drives kgo's share consumer: accept, release,
// reject and renew, and checks what is redelivered.
func TestShareConsumerAcks(t *testing.T) {
	f := newShareFixture(t)
	f.createTopic("q", 1)
	p := f.client(kgo.DefaultProduceTopic("q"))
	for i := range 8 {
		if err := p.ProduceSync(testCtx(t), &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	f.setGroupConfig("g", "share.auto.offset.reset", "earliest")
	var ackErrs []error
	c := f.client(kgo.ShareGroup("g"), kgo.ConsumeTopics("q"),
		kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
			if err := rs.Error(); err != nil {
				ackErrs = append(ackErrs, err)
			}
		}))
	ctx := testCtx(t)
	var got []*kgo.Record
	for len(got) < 8 {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of 8 records", len(got))
		}
		got = append(got, fs.Records()...)
	}
	// 0-2 accept, 3-4 release, 5 reject, 6 renew then accept, 7 accept.
	for _, r := range got {
		switch {
		case r.Offset <= 2 || r.Offset == 7:
			r.Ack(kgo.AckAccept)
		case r.Offset <= 4:
			r.Ack(kgo.AckRelease)
		case r.Offset == 5:
			r.Ack(kgo.AckReject)
		case r.Offset == 6:
			r.Ack(kgo.AckRenew)
		}
		if r.DeliveryCount() != 1 {
			t.Fatalf("offset %d: delivery count %d", r.Offset, r.DeliveryCount())
		}
	}
	if err := c.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.Offset == 6 {
			r.Ack(kgo.AckAccept)
		}
	}
	if err := c.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	var again []*kgo.Record
	for len(again) < 2 {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("redelivery: got %d of 2 records", len(again))
		}
		again = append(again, fs.Records()...)
	}
	offs := []int64{again[0].Offset, again[1].Offset}
	slices.Sort(offs)
	if len(again) != 2 || !slices.Equal(offs, []int64{3, 4}) || again[0].DeliveryCount() != 2 {
		t.Fatalf("redelivered %v (count %d), want the released 3 and 4 with count 2", offs, again[0].DeliveryCount())
	}
	for _, r := range again {
		r.Ack(kgo.AckAccept)
	}
	if err := c.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ackErrs) > 0 {
		t.Fatalf("ack errors: %v", ackErrs)
	}
	// Everything is terminal: the share-partition start offset is 8.
	offsets, err := f.l.cfg.Share.DescribeOffsets(ctx, "g", []sharegroup.TopicPartitions{{Topic: "q", Partitions: []int32{0}}})
	if err != nil {
		t.Fatal(err)
	}
	if so := offsets[0].Partitions[0].StartOffset; so != 8 {
		t.Fatalf("share-partition start offset %d, want 8", so)
	}
}

// rawShare is a share-group member on one hand-driven connection.
type rawShare struct {
	c       *rawConn
	member  string
	epoch   int32
	topicID [16]byte
}

func (f *fixture) rawMember(member, topic string) *rawShare {
	f.t.Helper()
	info, err := f.store.TopicInfo(context.Background(), topic)
	if err != nil {
		f.t.Fatal(err)
	}
	s := &rawShare{c: f.dial(), member: member, topicID: topicID(info.ID)}
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.SetVersion(1)
	hb.GroupID, hb.MemberID, hb.MemberEpoch, hb.SubscribedTopicNames = "g", member, 0, []string{topic}
	s.c.send(hb)
	hr := kmsg.NewPtrShareGroupHeartbeatResponse()
	hr.SetVersion(1)
	s.c.recv(hr)
	if hr.ErrorCode != 0 {
		f.t.Fatalf("heartbeat: %v", kerr.ErrorForCode(hr.ErrorCode))
	}
	return s
}

// fetch sends a ShareFetch at the member's epoch (then advances it) with
// the given acknowledgements of partition 0.
func (s *rawShare) fetch(wait time.Duration, acks ...kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) *kmsg.ShareFetchResponse {
	s.c.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.SetVersion(2)
	g, m := "g", s.member
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &g, &m, s.epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = int32(wait.Milliseconds()), 1, 1<<20, 100, 100
	t := kmsg.NewShareFetchRequestTopic()
	t.TopicID = s.topicID
	p := kmsg.NewShareFetchRequestTopicPartition()
	p.AcknowledgementBatches = acks
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	s.c.send(req)
	resp := kmsg.NewPtrShareFetchResponse()
	resp.SetVersion(2)
	s.c.recv(resp)
	if s.epoch == -1 {
		return resp
	}
	if resp.ErrorCode == 0 {
		s.epoch++
	}
	return resp
}

func acquired(resp *kmsg.ShareFetchResponse) (ranges [][3]int64) {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			for _, a := range p.AcquiredRecords {
				ranges = append(ranges, [3]int64{a.FirstOffset, a.LastOffset, int64(a.DeliveryCount)})
			}
		}
	}
	return ranges
}

// recordsIn decodes the batches of a share-fetch partition.
func recordsIn(t *testing.T, raw []byte) []int64 {
	t.Helper()
	var offs []int64
	for len(raw) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			t.Fatal(err)
		}
		if crc32Checksum(raw[batchCRCStart:12+b.Length]) != uint32(b.CRC) {
			t.Fatal("bad CRC in a returned batch")
		}
		recs, err := appendRecords(nil, b.Records, b.NumRecords, b.FirstTimestamp, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			offs = append(offs, b.FirstOffset+int64(i))
		}
		raw = raw[12+b.Length:]
	}
	return offs
}

// TestShareSessionEndsWithConnection: records held by a session are
// released, uncharged, when its connection closes.
func TestShareSessionEndsWithConnection(t *testing.T) {
	f := newShareFixture(t)
	f.createTopic("q", 1)
	produceN(t, f.client(), "q", 0, 3, time.Now())
	f.setGroupConfig("g", "share.auto.offset.reset", "earliest")
	a := f.rawMember("a", "q")
	resp := a.fetch(time.Second)
	if got := acquired(resp); len(got) != 1 || got[0] != [3]int64{0, 2, 1} {
		t.Fatalf("first acquisition %v", got)
	}
	if offs := recordsIn(t, resp.Topics[0].Partitions[0].Records); !slices.Equal(offs, []int64{0, 1, 2}) {
		t.Fatalf("records %v", offs)
	}
	a.c.nc.Close()

	b := f.rawMember("b", "q")
	resp = b.fetch(5 * time.Second)
	// Released by the session end, not charged: delivered again with count 1.
	if got := acquired(resp); len(got) != 1 || got[0] != [3]int64{0, 2, 1} {
		t.Fatalf("after the connection closed: %v", got)
	}
}

// TestShareRedeliveryAfterLockExpiry: an acquired record not acknowledged
// within the group's lock duration is delivered again with count 2.
func TestShareRedeliveryAfterLockExpiry(t *testing.T) {
	f := newShareFixture(t)
	f.createTopic("q", 1)
	produceN(t, f.client(), "q", 0, 1, time.Now())
	f.setGroupConfig("g", "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "50")
	a := f.rawMember("a", "q")
	if got := acquired(a.fetch(time.Second)); len(got) != 1 || got[0] != [3]int64{0, 0, 1} {
		t.Fatalf("first acquisition %v", got)
	}
	// The same session fetches again: it long-polls until the lock expires.
	if got := acquired(a.fetch(5 * time.Second)); len(got) != 1 || got[0] != [3]int64{0, 0, 2} {
		t.Fatalf("after expiry %v", got)
	}
}

// TestShareFetchErrors: a wrong epoch, an unknown topic id, a bad ack type.
func TestShareFetchErrors(t *testing.T) {
	f := newShareFixture(t)
	f.createTopic("q", 1)
	a := f.rawMember("a", "q")
	a.epoch = 5 // no session yet
	if resp := a.fetch(0); resp.ErrorCode != kerr.ShareSessionNotFound.Code {
		t.Fatalf("epoch 5 without a session: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	a.epoch = 0
	if resp := a.fetch(0); resp.ErrorCode != 0 {
		t.Fatalf("open: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	a.epoch = 7 // expected 1
	if resp := a.fetch(0); resp.ErrorCode != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("wrong epoch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	a.epoch = 1
	a.topicID = [16]byte{9}
	resp := a.fetch(0)
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || resp.Topics[0].Partitions[0].ErrorCode != kerr.UnknownTopicID.Code {
		t.Fatalf("unknown topic id: %+v", resp)
	}
	bad := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
	bad.FirstOffset, bad.LastOffset, bad.AcknowledgeTypes = 0, 0, []int8{9}
	info, _ := f.store.TopicInfo(context.Background(), "q")
	a.topicID = topicID(info.ID)
	if resp := a.fetch(0, bad); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("ack type 9: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}

// TestGroupConfigDescribeAndInvalid: DescribeConfigs shows what
// IncrementalAlterConfigs set; a bad value changes nothing.
func TestGroupConfigDescribeAndInvalid(t *testing.T) {
	f := newShareFixture(t)
	f.setGroupConfig("g", "share.delivery.count.limit", "3", "share.auto.offset.reset", "earliest")
	req := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "g"
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(testCtx(t), f.client())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range resp.Resources[0].Configs {
		got[c.Name] = *c.Value
	}
	if got["share.delivery.count.limit"] != "3" || got["share.auto.offset.reset"] != "earliest" || got["share.record.lock.duration.ms"] != "30000" {
		t.Fatalf("described %v", got)
	}

	alter := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ar := kmsg.NewIncrementalAlterConfigsRequestResource()
	ar.ResourceType, ar.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "g"
	for name, v := range map[string]string{"share.delivery.count.limit": "4", "share.record.lock.duration.ms": "-5"} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = name, &v
		ar.Configs = append(ar.Configs, c)
	}
	alter.Resources = append(alter.Resources, ar)
	aresp, err := alter.RequestWith(testCtx(t), f.client())
	if err != nil {
		t.Fatal(err)
	}
	if code := aresp.Resources[0].ErrorCode; code != kerr.InvalidConfig.Code {
		t.Fatalf("bad lock duration: %v", kerr.ErrorForCode(code))
	}
	cfg, err := f.l.cfg.Share.GetConfig(context.Background(), "g")
	if err != nil || *cfg.DeliveryCountLimit != 3 {
		t.Fatalf("a refused alter changed the config: %v %v", fmt.Sprint(cfg.DeliveryCountLimit), err)
	}
}

// ack sends a ShareAcknowledge of partition 0 at the member's epoch.
func (s *rawShare) ack(renew bool, first, last int64, typ int8) *kmsg.ShareAcknowledgeResponse {
	s.c.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.SetVersion(2)
	g, m := "g", s.member
	req.GroupID, req.MemberID, req.ShareSessionEpoch, req.IsRenewAck = &g, &m, s.epoch, renew
	t := kmsg.NewShareAcknowledgeRequestTopic()
	t.TopicID = s.topicID
	p := kmsg.NewShareAcknowledgeRequestTopicPartition()
	b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = first, last, []int8{typ}
	p.AcknowledgementBatches = append(p.AcknowledgementBatches, b)
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	s.c.send(req)
	resp := kmsg.NewPtrShareAcknowledgeResponse()
	resp.SetVersion(2)
	s.c.recv(resp)
	if resp.ErrorCode == 0 && s.epoch > 0 {
		s.epoch++
	}
	return resp
}

// TestShareAcknowledgeTypes maps Kafka's acknowledge types: RENEW only
// with IsRenewAck, ACCEPT archives for good, GAP and unknown types.
func TestShareAcknowledgeTypes(t *testing.T) {
	f := newShareFixture(t)
	f.createTopic("q", 1)
	produceN(t, f.client(), "q", 0, 3, time.Now())
	f.setGroupConfig("g", "share.auto.offset.reset", "earliest")
	a := f.rawMember("a", "q")
	if got := acquired(a.fetch(time.Second)); len(got) != 1 || got[0] != [3]int64{0, 2, 1} {
		t.Fatalf("acquired %v", got)
	}
	if resp := a.ack(false, 0, 0, kafkaAckRenew); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("RENEW without IsRenewAck: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := a.ack(true, 0, 0, kafkaAckRenew); resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("RENEW: %+v", resp)
	}
	if resp := a.ack(false, 0, 1, kafkaAckAccept); resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("ACCEPT: %+v", resp)
	}
	if resp := a.ack(false, 2, 2, kafkaAckRelease); resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("RELEASE: %+v", resp)
	}
	// Offset 2 is no longer acquired: releasing it again is INVALID_RECORD_STATE.
	if resp := a.ack(false, 2, 2, kafkaAckRelease); resp.Topics[0].Partitions[0].ErrorCode != kerr.InvalidRecordState.Code {
		t.Fatalf("RELEASE of a released record: %v", kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
	}
	if resp := a.ack(false, 2, 2, 7); resp.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("acknowledge type 7: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	// Close the session with ShareAcknowledge epoch -1.
	a.epoch = -1
	if resp := a.ack(false, 2, 2, kafkaAckRelease); resp.ErrorCode != 0 {
		t.Fatalf("close: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	offsets, err := f.l.cfg.Share.DescribeOffsets(testCtx(t), "g", []sharegroup.TopicPartitions{{Topic: "q", Partitions: []int32{0}}})
	if err != nil || offsets[0].Partitions[0].StartOffset != 2 {
		t.Fatalf("start offset after accept 0-1: %+v %v", offsets, err)
	}
}
