package kafkawire

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// The differential suite runs one scenario table against franz-go's kfake
// (a reference Kafka server) and against this listener, and compares what
// a client observes. Every difference must be fixed or listed in
// knownDeviations, which docs/kafka.md's "Kafka clients" section documents.

type diffEnv struct {
	t     *testing.T
	addr  string
	admin *kadm.Client
	newCl func(opts ...kgo.Opt) *kgo.Client
}

type scenario struct {
	name string
	run  func(ctx context.Context, e *diffEnv) []string
}

// knownDeviations: scenario name → why sharelog answers differently.
var knownDeviations = map[string]string{
	"delete records":               "a partition that fails a DeleteRecords reports low watermark -1, as Apache Kafka does; kfake leaves 0",
	"produce errors":               "a partition that fails a Produce reports base offset -1, as Apache Kafka does; kfake leaves 0",
	"consumer group unknown group": "for a group that does not exist, Heartbeat answers UNKNOWN_MEMBER_ID, OffsetFetch offset -1 with no error, DescribeGroups v0-5 state Dead with no error and OffsetCommit v9 with a generation GROUP_ID_NOT_FOUND, as Apache Kafka's group coordinator does; kfake answers GROUP_ID_NOT_FOUND to the first three and ILLEGAL_GENERATION (Kafka's answer below v9) to the last",
}

func codeName(err error) string {
	if err == nil {
		return "OK"
	}
	if ke, ok := err.(*kerr.Error); ok {
		return ke.Message
	}
	return "ERR " + err.Error()
}

func (e *diffEnv) topic(ctx context.Context, name string, partitions int32) {
	e.t.Helper()
	res, err := e.admin.CreateTopic(ctx, partitions, 1, nil, name)
	if err != nil || res.Err != nil {
		e.t.Fatalf("create %s: %v %v", name, err, res.Err)
	}
}

func (e *diffEnv) produce(ctx context.Context, topic string, n int) []string {
	cl := e.newCl(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprint(i)), Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))})
	}
	var out []string
	for _, r := range cl.ProduceSync(ctx, recs...) {
		out = append(out, fmt.Sprintf("produced %d %s", r.Record.Offset, codeName(r.Err)))
	}
	return out
}

var scenarios = []scenario{
	{"produce and consume", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s1", 1)
		out := e.produce(ctx, "s1", 3)
		cl := e.newCl(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"s1": {0: kgo.NewOffset().AtStart()}}))
		defer cl.Close()
		for n := 0; n < 3; {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return append(out, "timeout")
			}
			for _, r := range fs.Records() {
				out = append(out, fmt.Sprintf("consumed %d %s %d", r.Offset, r.Value, r.Timestamp.UnixMilli()))
				n++
			}
		}
		return out
	}},
	{"list offsets", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s2", 1)
		out := e.produce(ctx, "s2", 4)
		for name, list := range map[string]func(context.Context, ...string) (kadm.ListedOffsets, error){
			"start": e.admin.ListStartOffsets, "end": e.admin.ListEndOffsets, "maxts": e.admin.ListMaxTimestampOffsets,
		} {
			lo, err := list(ctx, "s2")
			o, _ := lo.Lookup("s2", 0)
			out = append(out, fmt.Sprintf("%s %d %s %s", name, o.Offset, codeName(err), codeName(o.Err)))
		}
		lo, err := e.admin.ListOffsetsAfterMilli(ctx, 1_700_000_000_002, "s2")
		o, _ := lo.Lookup("s2", 0)
		out = append(out, fmt.Sprintf("after %d %d %s", o.Offset, o.Timestamp, codeName(err)))
		lo, _ = e.admin.ListOffsetsAfterMilli(ctx, 1_800_000_000_000, "s2")
		o, _ = lo.Lookup("s2", 0)
		out = append(out, fmt.Sprintf("after the last %d", o.Offset))
		slices.Sort(out)
		return out
	}},
	{"delete records", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s3", 2)
		out := e.produce(ctx, "s3", 5)
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "s3", Partition: 0, At: 2})
		os.Add(kadm.Offset{Topic: "s3", Partition: 1, At: 1}) // empty partition: above its high watermark 0
		res, err := e.admin.DeleteRecords(ctx, os)
		out = append(out, codeName(err))
		for p := int32(0); p < 2; p++ {
			r, _ := res.Lookup("s3", p)
			out = append(out, fmt.Sprintf("p%d low %d %s", p, r.LowWatermark, codeName(r.Err)))
		}
		starts, _ := e.admin.ListStartOffsets(ctx, "s3")
		s, _ := starts.Lookup("s3", 0)
		out = append(out, fmt.Sprintf("start %d", s.Offset))
		var all kadm.Offsets
		all.Add(kadm.Offset{Topic: "s3", Partition: 0, At: -1})
		res, _ = e.admin.DeleteRecords(ctx, all)
		r, _ := res.Lookup("s3", 0)
		out = append(out, fmt.Sprintf("-1 low %d %s", r.LowWatermark, codeName(r.Err)))
		return out
	}},
	{"fetch out of range", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s4", 1)
		out := e.produce(ctx, "s4", 3)
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: "s4", Partition: 0, At: 2})
		if _, err := e.admin.DeleteRecords(ctx, os); err != nil {
			return append(out, codeName(err))
		}
		cl := e.newCl()
		defer cl.Close()
		for _, off := range []int64{1, 2, 3, 4} {
			req := kmsg.NewPtrFetchRequest()
			req.SetVersion(11)
			req.MaxBytes, req.SessionEpoch = 1<<20, -1
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = "s4"
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.FetchOffset, fp.PartitionMaxBytes = off, 1<<20
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				out = append(out, codeName(err))
				continue
			}
			rp := resp.Topics[0].Partitions[0]
			out = append(out, fmt.Sprintf("fetch %d: %s hw %d lso %d logstart %d records %t", off,
				codeName(kerr.ErrorForCode(rp.ErrorCode)), rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset, len(rp.RecordBatches) > 0))
		}
		return out
	}},
	{"topic admin errors", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s5", 1)
		res, _ := e.admin.CreateTopic(ctx, 1, 1, nil, "s5")
		dres, _ := e.admin.DeleteTopic(ctx, "does-not-exist")
		del, _ := e.admin.DeleteTopic(ctx, "s5")
		return []string{"create again " + codeName(res.Err), "delete unknown " + codeName(dres.Err), "delete " + codeName(del.Err)}
	}},
	{"produce errors", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s6", 1)
		cl := e.newCl()
		defer cl.Close()
		good := appendBatch(nil, sampleRecs)
		bad := append([]byte(nil), good...)
		bad[len(bad)-1] ^= 1
		var out []string
		for _, tc := range []struct {
			name, topic string
			raw         []byte
		}{{"bad crc", "s6", bad}, {"unknown topic", "nope", good}, {"good", "s6", good}} {
			resp, err := produceRequest(tc.topic, tc.raw).RequestWith(ctx, cl)
			if err != nil {
				out = append(out, tc.name+" "+codeName(err))
				continue
			}
			rp := resp.Topics[0].Partitions[0]
			out = append(out, fmt.Sprintf("%s: %s base %d", tc.name, codeName(kerr.ErrorForCode(rp.ErrorCode)), rp.BaseOffset))
		}
		return out
	}},
	{"unknown topic id", func(ctx context.Context, e *diffEnv) []string {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(12)
		req.Topics = []kmsg.MetadataRequestTopic{{TopicID: [16]byte{1, 2, 3}}}
		cl := e.newCl()
		defer cl.Close()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return []string{codeName(err)}
		}
		return []string{codeName(kerr.ErrorForCode(resp.Topics[0].ErrorCode))}
	}},
	{"share consume and accept", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s8", 1)
		out := e.produce(ctx, "s8", 3)
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "g8"
		v := "earliest"
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = "share.auto.offset.reset", &v
		r.Configs = append(r.Configs, c)
		req.Resources = append(req.Resources, r)
		cl := e.newCl()
		defer cl.Close()
		if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Resources[0].ErrorCode != 0 {
			return append(out, "alter config failed")
		}
		sc := e.newCl(kgo.ShareGroup("g8"), kgo.ConsumeTopics("s8"))
		var got []string
		for len(got) < 3 {
			fs := sc.PollFetches(ctx)
			if ctx.Err() != nil {
				return append(out, "timeout")
			}
			for _, rec := range fs.Records() {
				got = append(got, fmt.Sprintf("share %d count %d", rec.Offset, rec.DeliveryCount()))
				rec.Ack(kgo.AckAccept)
			}
		}
		if err := sc.FlushAcks(ctx); err != nil {
			got = append(got, "flush "+codeName(err))
		}
		sc.Close()
		slices.Sort(got)
		offs, err := e.admin.DescribeShareGroupOffsets(ctx, "g8")
		o, _ := offs["g8"].Offsets.Lookup("s8", 0)
		return append(append(out, got...), fmt.Sprintf("spso %d %s", o.StartOffset, codeName(err)))
	}},
	{"consumer group consume and commit", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s9", 2)
		out := e.produce(ctx, "s9", 4)
		cl := e.newCl(kgo.ConsumerGroup("g9"), kgo.ConsumeTopics("s9"), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var got []string
		for len(got) < 4 {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return append(out, "timeout")
			}
			for _, r := range fs.Records() {
				got = append(got, fmt.Sprintf("consumed %d/%d", r.Partition, r.Offset))
			}
		}
		slices.Sort(got)
		out = append(out, got...)
		out = append(out, "commit "+codeName(cl.CommitUncommittedOffsets(ctx)))
		d, err := e.admin.DescribeGroups(ctx, "g9")
		out = append(out, fmt.Sprintf("describe %s %s %s %s %d", codeName(err), d["g9"].State, d["g9"].ProtocolType, d["g9"].Protocol, len(d["g9"].Members)))
		cl.Close()
		offs, err := e.admin.FetchOffsets(ctx, "g9")
		out = append(out, "fetch "+codeName(err))
		offs.Each(func(o kadm.OffsetResponse) {
			out = append(out, fmt.Sprintf("committed %d/%d %s", o.Partition, o.At, codeName(o.Err)))
		})
		lg, err := e.admin.ListGroups(ctx)
		out = append(out, fmt.Sprintf("list %s %v", codeName(err), lg.Groups()))
		dg, err := e.admin.DeleteGroup(ctx, "g9")
		out = append(out, fmt.Sprintf("delete %s %s", codeName(err), codeName(dg.Err)))
		slices.Sort(out)
		return out
	}},
	{"consumer group errors", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s10", 1)
		cl := e.newCl()
		var out []string
		code := func(what string, resp kmsg.Response, err error, c func(kmsg.Response) int16) {
			if err != nil {
				out = append(out, what+" "+codeName(err))
				return
			}
			out = append(out, what+" "+codeName(kerr.ErrorForCode(c(resp))))
		}
		del := kmsg.NewPtrDeleteGroupsRequest()
		del.Version, del.Groups = 2, []string{"nog"}
		dr, err := del.RequestWith(ctx, cl)
		code("delete unknown group", dr, err, func(r kmsg.Response) int16 { return r.(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode })

		join := kmsg.NewPtrJoinGroupRequest()
		join.Version, join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = 9, "g10", 10000, 10000, "consumer"
		join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: (&kmsg.ConsumerMemberMetadata{Topics: []string{"s10"}}).AppendTo(nil)}}
		jr, err := join.RequestWith(ctx, cl)
		if err != nil {
			out = append(out, "join "+codeName(err))
		} else {
			out = append(out, fmt.Sprintf("join new member %s id given %v", codeName(kerr.ErrorForCode(jr.ErrorCode)), jr.MemberID != ""))
		}
		bad := *join
		bad.SessionTimeoutMillis = 1
		br, err := bad.RequestWith(ctx, cl)
		code("join session timeout 1ms", br, err, func(r kmsg.Response) int16 { return r.(*kmsg.JoinGroupResponse).ErrorCode })

		lv := kmsg.NewPtrLeaveGroupRequest()
		lv.Version, lv.Group = 5, "g10"
		lv.Members = []kmsg.LeaveGroupRequestMember{{MemberID: "nobody"}}
		if r, err := lv.RequestWith(ctx, cl); err != nil {
			out = append(out, "leave "+codeName(err))
		} else {
			out = append(out, fmt.Sprintf("leave unknown member %s %s", codeName(kerr.ErrorForCode(r.ErrorCode)), codeName(kerr.ErrorForCode(r.Members[0].ErrorCode))))
		}
		return out
	}},
	{"consumer group unknown group", func(ctx context.Context, e *diffEnv) []string {
		e.topic(ctx, "s11", 1)
		cl := e.newCl()
		var out []string
		code := func(what string, resp kmsg.Response, err error, c func(kmsg.Response) int16) {
			if err != nil {
				out = append(out, what+" "+codeName(err))
				return
			}
			out = append(out, what+" "+codeName(kerr.ErrorForCode(c(resp))))
		}
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Version, hb.Group, hb.MemberID, hb.Generation = 4, "nog", "m", 1
		r, err := hb.RequestWith(ctx, cl)
		code("heartbeat unknown group", r, err, func(r kmsg.Response) int16 { return r.(*kmsg.HeartbeatResponse).ErrorCode })

		// kgo sends the highest version both sides speak (v9 here).
		oc := kmsg.NewPtrOffsetCommitRequest()
		oc.Group, oc.Generation, oc.MemberID = "nog", 5, "m"
		oc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "s11", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1, LeaderEpoch: -1}}}}
		cr, err := oc.RequestWith(ctx, cl)
		code("commit unknown group with generation", cr, err, func(r kmsg.Response) int16 {
			return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
		})
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Version, of.Group = 5, "nog"
		of.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "s11", Partitions: []int32{0}}}
		if r, err := of.RequestWith(ctx, cl); err != nil {
			out = append(out, "fetch "+codeName(err))
		} else {
			s := fmt.Sprintf("fetch unknown group %s", codeName(kerr.ErrorForCode(r.ErrorCode)))
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					s += fmt.Sprintf(" %s/%d %d %d %s", t.Topic, p.Partition, p.Offset, p.LeaderEpoch, codeName(kerr.ErrorForCode(p.ErrorCode)))
				}
			}
			out = append(out, s)
		}
		dg := kmsg.NewPtrDescribeGroupsRequest()
		dg.Version, dg.Groups = 5, []string{"nog"}
		if r, err := dg.RequestWith(ctx, cl); err != nil {
			out = append(out, "describe "+codeName(err))
		} else {
			out = append(out, fmt.Sprintf("describe unknown group %s %s", r.Groups[0].State, codeName(kerr.ErrorForCode(r.Groups[0].ErrorCode))))
		}
		return out
	}},
}

func runScenarios(t *testing.T, addr string) map[string][]string {
	out := map[string][]string{}
	for _, sc := range scenarios {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		e := &diffEnv{t: t, addr: addr}
		var clients []*kgo.Client
		// Both servers are spoken to at the versions this listener serves
		// (Produce and Fetch by topic name, below v13).
		versions := kversion.Stable()
		versions.SetMaxKeyVersion(0, 12)
		versions.SetMaxKeyVersion(1, 12)
		versions.SetMaxKeyVersion(8, 9) // OffsetCommit and OffsetFetch v10 name topics by id
		versions.SetMaxKeyVersion(9, 9)
		e.newCl = func(opts ...kgo.Opt) *kgo.Client {
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.MaxVersions(versions), kgo.MetadataMinAge(50 * time.Millisecond), kgo.RetryTimeout(3 * time.Second)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, cl)
			return cl
		}
		e.admin = kadm.NewClient(e.newCl())
		out[sc.name] = sc.run(ctx, e)
		for _, cl := range clients {
			cl.Close()
		}
		cancel()
	}
	return out
}

func TestDifferentialAgainstKfake(t *testing.T) {
	ref, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want := runScenarios(t, ref.ListenAddrs()[0])
	f := withGroups(newShareFixture(t))
	got := runScenarios(t, f.addr)
	for _, sc := range scenarios {
		w, g := strings.Join(want[sc.name], "\n"), strings.Join(got[sc.name], "\n")
		why, known := knownDeviations[sc.name]
		switch {
		case w != g && !known:
			t.Errorf("%s: differs from kfake\n--- kfake\n%s\n--- sharelog\n%s", sc.name, w, g)
		case w == g && known:
			t.Errorf("%s: listed as a deviation (%s) but now matches kfake: remove it", sc.name, why)
		}
	}
}
