package kafkawire

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/broker"
)

func produceN(t *testing.T, cl *kgo.Client, topic string, partition int32, n int, ts time.Time) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Value: []byte{byte(i)}, Timestamp: ts.Add(time.Duration(i) * time.Millisecond)})
	}
	if err := cl.ProduceSync(testCtx(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestDeleteRecordsThenConsumeAndListOffsets purges with kadm, then checks
// ListOffsets and that a consumer from the start begins at the new log
// start, and that the purge rules hold per partition.
func TestDeleteRecordsThenConsumeAndListOffsets(t *testing.T) {
	f := newFixture(t)
	f.createTopic("t", 2)
	ctx := testCtx(t)
	p := f.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceN(t, p, "t", 0, 10, time.UnixMilli(1_700_000_000_000))
	produceN(t, p, "t", 1, 3, time.UnixMilli(1_700_000_000_000))
	adm := f.admin()

	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "t", Partition: 0, At: 4})
	os.Add(kadm.Offset{Topic: "t", Partition: 1, At: 9}) // above the high watermark 3
	res, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := res.Lookup("t", 0); r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("partition 0: %+v", r)
	}
	if r, _ := res.Lookup("t", 1); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Fatalf("partition 1 above the high watermark: %+v", r)
	}
	// -1 = the high watermark.
	var all kadm.Offsets
	all.Add(kadm.Offset{Topic: "t", Partition: 1, At: -1})
	res, err = adm.DeleteRecords(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := res.Lookup("t", 1); r.Err != nil || r.LowWatermark != 3 {
		t.Fatalf("partition 1 at -1: %+v", r)
	}

	starts, err := adm.ListStartOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[int32][2]int64{0: {4, 10}, 1: {3, 3}} {
		s, _ := starts.Lookup("t", p)
		e, _ := ends.Lookup("t", p)
		if s.Err != nil || e.Err != nil || s.Offset != want[0] || e.Offset != want[1] {
			t.Fatalf("partition %d: start %+v end %+v, want %v", p, s, e, want)
		}
	}
	maxTs, err := adm.ListMaxTimestampOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := maxTs.Lookup("t", 0); m.Err != nil || m.Offset != 9 || m.Timestamp != 1_700_000_000_009 {
		t.Fatalf("max timestamp: %+v", m)
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, 1_700_000_000_002, "t")
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := after.Lookup("t", 0); a.Err != nil || a.Offset != 4 { // offsets 2, 3 are purged
		t.Fatalf("after milli: %+v", a)
	}

	c := f.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart()}}))
	got := poll(t, c, 6)
	if got[0].Offset != 4 || got[5].Offset != 9 {
		t.Fatalf("consumed offsets %d..%d, want 4..9", got[0].Offset, got[5].Offset)
	}

	// A fetch below the log start is OFFSET_OUT_OF_RANGE.
	fr := kmsg.NewPtrFetchRequest()
	fr.SetVersion(11)
	fr.MaxWaitMillis, fr.MaxBytes, fr.SessionEpoch = 0, 1<<20, -1
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "t"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = 0, 2, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	resp, err := fr.RequestWith(ctx, f.client())
	if err != nil {
		t.Fatal(err)
	}
	if rp := resp.Topics[0].Partitions[0]; rp.ErrorCode != kerr.OffsetOutOfRange.Code || rp.LogStartOffset != 4 || rp.HighWatermark != 10 {
		t.Fatalf("fetch below the log start: %+v", rp)
	}
	// At the high watermark: no records, sent as an empty (not null) set,
	// which librdkafka needs.
	fr.Topics[0].Partitions[0].FetchOffset = 10
	resp, err = fr.RequestWith(ctx, f.client())
	if err != nil {
		t.Fatal(err)
	}
	if rp := resp.Topics[0].Partitions[0]; rp.ErrorCode != 0 || rp.RecordBatches == nil || len(rp.RecordBatches) != 0 || rp.HighWatermark != 10 {
		t.Fatalf("fetch at the high watermark: %+v", rp)
	}
}

// TestCreateDeleteTopics creates topics with configs through kadm, checks
// the store, rejects a bad config and deletes.
func TestCreateDeleteTopics(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t)
	adm := f.admin()
	retention, policy := "60000", "compact"
	res, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"retention.ms": &retention, "cleanup.policy": &policy}, "orders")
	if err != nil || res.Err != nil {
		t.Fatalf("create: %v %+v", err, res)
	}
	info, err := f.store.TopicInfo(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if info.Partitions != 3 || info.Config.RetentionMs != 60000 || info.Config.CleanupPolicy != "compact" {
		t.Fatalf("created topic %+v", info)
	}
	if res.ID != topicID(info.ID) {
		t.Fatalf("topic id %v, store id %s", res.ID, info.ID)
	}
	res, _ = adm.CreateTopic(ctx, 1, 1, nil, "orders")
	if !errors.Is(res.Err, kerr.TopicAlreadyExists) {
		t.Fatalf("create twice: %+v", res)
	}
	bogus := "1"
	res, _ = adm.CreateTopic(ctx, 1, 1, map[string]*string{"flush.ms": &bogus}, "other")
	if !errors.Is(res.Err, kerr.InvalidConfig) {
		t.Fatalf("unsupported config: %+v", res)
	}
	tiny := "10"
	res, _ = adm.CreateTopic(ctx, 1, 1, map[string]*string{"segment.bytes": &tiny}, "other")
	if !errors.Is(res.Err, kerr.InvalidConfig) {
		t.Fatalf("segment.bytes 10: %+v", res)
	}
	res, _ = adm.CreateTopic(ctx, 1, 3, nil, "other")
	if !errors.Is(res.Err, kerr.InvalidReplicationFactor) {
		t.Fatalf("replication factor 3: %+v", res)
	}
	res, _ = adm.CreateTopic(ctx, 1, 1, nil, "__bad")
	if !errors.Is(res.Err, kerr.InvalidTopicException) {
		t.Fatalf("invalid name: %+v", res)
	}

	var deleted []string
	f.log.Subscribe(func(ev broker.TopicEvent) {
		if ev.Kind == broker.TopicDeleted {
			deleted = append(deleted, ev.Topic.ID)
		}
	})
	dres, err := adm.DeleteTopic(ctx, "orders")
	if err != nil || dres.Err != nil {
		t.Fatalf("delete: %v %+v", err, dres)
	}
	if len(deleted) != 1 || deleted[0] != info.ID {
		t.Fatalf("topic deleted events %v, want [%s]", deleted, info.ID)
	}
	dres, _ = adm.DeleteTopic(ctx, "orders")
	if !errors.Is(dres.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("delete twice: %+v", dres)
	}
}

// TestAutoCreateTopics: with the flag, Produce to an unknown topic creates
// it with the default partitions; without, it fails.
func TestAutoCreateTopics(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.AutoCreateTopics, c.DefaultPartitions = true, 3 })
	p := f.client(kgo.AllowAutoTopicCreation())
	if err := p.ProduceSync(testCtx(t), &kgo.Record{Topic: "auto", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	info, err := f.store.TopicInfo(testCtx(t), "auto")
	if err != nil || info.Partitions != 3 {
		t.Fatalf("auto-created %+v, %v", info, err)
	}

	off := newFixture(t)
	md := kmsg.NewPtrMetadataRequest()
	name := "missing"
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: &name}}
	md.AllowAutoTopicCreation = true
	resp, err := md.RequestWith(testCtx(t), off.client())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("without the flag: %+v", resp.Topics[0])
	}
	if _, err := off.store.TopicInfo(testCtx(t), "missing"); err == nil {
		t.Fatal("topic created without --kafka-auto-create-topics")
	}
}
