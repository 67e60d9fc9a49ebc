package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// diffOutcome is what one side answered for one partition (or one topic, for
// CreateTopic): the reason ("" for none) and the values both transports
// report. A value the answer does not carry is -1.
type diffOutcome struct {
	Reason    apierr.Reason
	Offset    int64 // purge: the low watermark; list offsets: the offset; fetch: the first record's
	Timestamp int64 // list offsets
	LogStart  int64 // fetch
	HW        int64 // fetch
	Records   int   // fetch: records returned; create: partitions
}

func diffNone() diffOutcome { return diffOutcome{Offset: -1, Timestamp: -1, LogStart: -1, HW: -1} }

func diffFailed(r apierr.Reason) diffOutcome { o := diffNone(); o.Reason = r; return o }

// diffSide runs a case against one transport; topic names a logical
// topic of the case (each side has its own copy, named topic+"-"+side).
type diffSide struct {
	name  string
	topic func(logical string) string
}

// diffCase is one edge case, run through gRPC and through the Kafka
// listener. grpc is nil where gRPC has no such call (list offsets -3).
// kafkaCode, when set, is the Kafka code that refines gRPC's
// INVALID_REQUEST (Kafka's CreateTopics names the faulty part); want, when
// set, is the diffOutcome both must give.
type diffCase struct {
	name      string
	grpc      func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome
	kafka     func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome
	kafkaCode int16
	want      []diffOutcome
}

// TestDifferentialGRPCKafka runs one table of log edge cases through the
// gRPC API and through the Kafka listener of one server and requires the
// same diffOutcome: the gRPC reason and the Kafka code compared through
// apierr (Reason.KafkaCode, ReasonOfKafkaCode), and the same offsets,
// timestamps and bounds.
func TestDifferentialGRPCKafka(t *testing.T) {
	st := newStack(t, app.Options{}, func(c *app.Config) { c.KafkaAddr = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(st.srv.KafkaAddr()))
	require.NoError(t, err)
	defer cl.Close()
	kafka := cl.SeedBrokers()[0] // requests go to the one broker as they are

	// Each side gets the same topics with the same contents:
	//   log-<side>: 2 partitions; partition 0 has offsets 0..4 with timestamps
	//   1000, 3000, 2000, 5000, 4000, purged to log start 1 (HW 5);
	//   partition 1 is empty;
	//   cmp-<side>: compacted, 1 partition, 2 keyed records.
	for _, side := range []string{"grpc", "kafka"} {
		_, err := st.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "log-" + side, Partitions: 2})
		require.NoError(t, err)
		p0 := int32(0)
		var recs []*sharelogv1.Record
		for _, ts := range []int64{1000, 3000, 2000, 5000, 4000} {
			recs = append(recs, &sharelogv1.Record{Timestamp: ts, Value: []byte(strconv.FormatInt(ts, 10))})
		}
		_, err = st.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "log-" + side, Partition: &p0, Records: recs})
		require.NoError(t, err)
		pr, err := st.log.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: "log-" + side,
			Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 1}}}}})
		require.NoError(t, err)
		require.Equal(t, int64(1), pr.GetTopics()[0].GetPartitions()[0].GetLowWatermark())

		compact := "compact"
		_, err = st.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "cmp-" + side, Partitions: 1,
			Config: &sharelogv1.TopicConfig{CleanupPolicy: &compact}})
		require.NoError(t, err)
		_, err = st.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "cmp-" + side, Partition: &p0, Records: []*sharelogv1.Record{
			{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}})
		require.NoError(t, err)
	}

	// --- the two sides of each call ---

	grpcReason := func(err error) apierr.Reason {
		st, _ := status.FromError(err)
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				return apierr.Reason(info.GetReason())
			}
		}
		t.Fatalf("no ErrorInfo in %v", err)
		return ""
	}
	grpcMeta := func(err error, key string) int64 {
		st, _ := status.FromError(err)
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				if v, ok := info.GetMetadata()[key]; ok {
					n, err := strconv.ParseInt(v, 10, 64)
					require.NoError(t, err)
					return n
				}
			}
		}
		return -1
	}
	kafkaReq := func(ctx context.Context, req kmsg.Request) kmsg.Response {
		resp, err := kafka.Request(ctx, req)
		require.NoError(t, err)
		return resp
	}

	type tp struct {
		topic     string
		partition int32
		offset    int64
	}
	purgeGRPC := func(parts ...tp) func(context.Context, *testing.T, func(string) string) []diffOutcome {
		return func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome {
			req := &sharelogv1.PurgeRequest{}
			for _, p := range parts {
				req.Topics = append(req.Topics, &sharelogv1.PurgeTopic{Topic: topic(p.topic),
					Partitions: []*sharelogv1.PurgePartition{{Partition: p.partition, Offset: p.offset}}})
			}
			resp, err := st.log.Purge(ctx, req)
			require.NoError(t, err)
			var out []diffOutcome
			for _, rt := range resp.GetTopics() {
				for _, rp := range rt.GetPartitions() {
					o := diffFailed(apierr.ReasonOfKafkaCode(int16(rp.GetErrorCode())))
					o.Offset = rp.GetLowWatermark()
					out = append(out, o)
				}
			}
			return out
		}
	}
	purgeKafka := func(parts ...tp) func(context.Context, *testing.T, func(string) string) []diffOutcome {
		return func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome {
			req := kmsg.NewPtrDeleteRecordsRequest()
			req.TimeoutMillis = 5000
			for _, p := range parts {
				rt := kmsg.NewDeleteRecordsRequestTopic()
				rt.Topic = topic(p.topic)
				rp := kmsg.NewDeleteRecordsRequestTopicPartition()
				rp.Partition, rp.Offset = p.partition, p.offset
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
			}
			resp := kafkaReq(ctx, req).(*kmsg.DeleteRecordsResponse)
			var out []diffOutcome
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					o := diffFailed(apierr.ReasonOfKafkaCode(rp.ErrorCode))
					o.Offset = rp.LowWatermark
					out = append(out, o)
				}
			}
			return out
		}
	}
	purge := func(name string, want []diffOutcome, parts ...tp) diffCase {
		return diffCase{name: "purge " + name, grpc: purgeGRPC(parts...), kafka: purgeKafka(parts...), want: want}
	}

	fetch := func(name, topicName string, partition int32, offset int64, want diffOutcome) diffCase {
		return diffCase{name: "fetch " + name, want: []diffOutcome{want},
			grpc: func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome {
				resp, err := st.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: topic(topicName), Partition: partition, Offset: offset})
				if err != nil {
					o := diffFailed(grpcReason(err))
					o.LogStart, o.HW = grpcMeta(err, "log_start_offset"), grpcMeta(err, "high_watermark")
					return []diffOutcome{o}
				}
				o := diffNone()
				o.LogStart, o.HW, o.Records = resp.GetLogStartOffset(), resp.GetHighWatermark(), len(resp.GetRecords())
				if len(resp.GetRecords()) > 0 {
					o.Offset = resp.GetRecords()[0].GetOffset()
				}
				return []diffOutcome{o}
			},
			kafka: func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome {
				req := kmsg.NewPtrFetchRequest()
				req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.SessionEpoch = -1, 0, 1<<20, -1
				rt := kmsg.NewFetchRequestTopic()
				rt.Topic = topic(topicName)
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.LogStartOffset = partition, offset, 1<<20, -1
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
				resp := kafkaReq(ctx, req).(*kmsg.FetchResponse)
				require.Zero(t, resp.ErrorCode)
				p := resp.Topics[0].Partitions[0]
				o := diffFailed(apierr.ReasonOfKafkaCode(p.ErrorCode))
				o.LogStart, o.HW = p.LogStartOffset, p.HighWatermark
				if p.ErrorCode == 0 {
					fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
						Topic: rt.Topic, Partition: partition, KeepControlRecords: true}, &p, kgo.DefaultDecompressor(), nil)
					require.NoError(t, fp.Err)
					recs := fp.Records
					o.Records = len(recs)
					if len(recs) > 0 {
						o.Offset = recs[0].Offset
					}
				}
				return []diffOutcome{o}
			},
		}
	}

	listGRPC := func(topicName string, partition int32, spec sharelogv1.OffsetSpec, ts int64) func(context.Context, *testing.T, func(string) string) []diffOutcome {
		return func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome {
			resp, err := st.log.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: topic(topicName), Partition: partition, Spec: spec, Timestamp: ts})
			if err != nil {
				return []diffOutcome{diffFailed(grpcReason(err))}
			}
			o := diffNone()
			o.Offset, o.Timestamp = resp.GetOffset(), resp.GetTimestamp()
			return []diffOutcome{o}
		}
	}
	listKafka := func(topicName string, partition int32, ts int64) func(context.Context, *testing.T, func(string) string) []diffOutcome {
		return func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome {
			req := kmsg.NewPtrListOffsetsRequest()
			req.ReplicaID = -1
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = topic(topicName)
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = partition, ts
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp := kafkaReq(ctx, req).(*kmsg.ListOffsetsResponse)
			p := resp.Topics[0].Partitions[0]
			o := diffFailed(apierr.ReasonOfKafkaCode(p.ErrorCode))
			o.Offset, o.Timestamp = p.Offset, p.Timestamp
			return []diffOutcome{o}
		}
	}
	list := func(name, topicName string, partition int32, spec sharelogv1.OffsetSpec, kafkaTS, ts int64, want diffOutcome) diffCase {
		c := diffCase{name: "list offsets " + name, kafka: listKafka(topicName, partition, kafkaTS), want: []diffOutcome{want}}
		if spec != sharelogv1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED {
			c.grpc = listGRPC(topicName, partition, spec, ts)
		}
		return c
	}
	// A failed list offsets: Kafka answers offset and timestamp -1, gRPC
	// nothing (diffNone() has -1 too).
	listFailed := diffFailed

	// create: name is a logical name when fixed is false.
	create := func(name, topicName string, fixed bool, partitions int32, configs map[string]string, kafkaCode int16, want diffOutcome) diffCase {
		pick := func(topic func(string) string) string {
			if fixed {
				return topicName
			}
			return topic(topicName)
		}
		return diffCase{name: "create topic " + name, kafkaCode: kafkaCode, want: []diffOutcome{want},
			grpc: func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome {
				req := &sharelogv1.CreateTopicRequest{Name: pick(topic), Partitions: partitions, Config: &sharelogv1.TopicConfig{}}
				for k, v := range configs {
					switch k {
					case "cleanup.policy":
						req.Config.CleanupPolicy = &v
					case "segment.bytes":
						n, err := strconv.ParseInt(v, 10, 64)
						require.NoError(t, err)
						req.Config.SegmentBytes = &n
					default:
						t.Fatalf("config %s has no gRPC field in this test", k)
					}
				}
				resp, err := st.log.CreateTopic(ctx, req)
				if err != nil {
					return []diffOutcome{diffFailed(grpcReason(err))}
				}
				o := diffNone()
				o.Records = int(resp.GetPartitionCount())
				return []diffOutcome{o}
			},
			kafka: func(ctx context.Context, t *testing.T, topic func(string) string) []diffOutcome {
				req := kmsg.NewPtrCreateTopicsRequest()
				req.TimeoutMillis = 5000
				rt := kmsg.NewCreateTopicsRequestTopic()
				rt.Topic, rt.NumPartitions, rt.ReplicationFactor = pick(topic), partitions, -1
				for k, v := range configs {
					c := kmsg.NewCreateTopicsRequestTopicConfig()
					c.Name, c.Value = k, &v
					rt.Configs = append(rt.Configs, c)
				}
				req.Topics = append(req.Topics, rt)
				resp := kafkaReq(ctx, req).(*kmsg.CreateTopicsResponse)
				r := resp.Topics[0]
				if r.ErrorCode != 0 {
					if kafkaCode != 0 {
						require.Equal(t, kafkaCode, r.ErrorCode, "Kafka's code")
						return []diffOutcome{diffFailed(apierr.InvalidRequest)} // the reason Kafka's code refines
					}
					return []diffOutcome{diffFailed(apierr.ReasonOfKafkaCode(r.ErrorCode))}
				}
				o := diffNone()
				o.Records = int(r.NumPartitions)
				return []diffOutcome{o}
			},
		}
	}

	withValues := func(o diffOutcome, f func(*diffOutcome)) diffOutcome { f(&o); return o }
	ok := diffNone()
	lw := func(n int64) diffOutcome { return withValues(ok, func(o *diffOutcome) { o.Offset = n }) }
	oor := func(logStart, hw int64) diffOutcome {
		return withValues(diffFailed(apierr.OffsetOutOfRange), func(o *diffOutcome) { o.LogStart, o.HW = logStart, hw })
	}
	unknown := diffFailed(apierr.UnknownTopicOrPartition)
	const (
		earliest  = sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST
		latest    = sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST
		timestamp = sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP
		noSpec    = sharelogv1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED
	)
	offsetTS := func(off, ts int64) diffOutcome {
		return withValues(ok, func(o *diffOutcome) { o.Offset, o.Timestamp = off, ts })
	}
	const (
		invalidTopicException = 17 // Kafka's INVALID_TOPIC_EXCEPTION
		invalidPartitions     = 37 // INVALID_PARTITIONS
		invalidConfig         = 40 // INVALID_CONFIG
	)

	cases := []diffCase{
		// Reads first: the purges below change the bounds.
		fetch("below log start", "log", 0, 0, oor(1, 5)),
		fetch("in range", "log", 0, 2, withValues(ok, func(o *diffOutcome) { o.LogStart, o.HW, o.Records, o.Offset = 1, 5, 3, 2 })),
		fetch("at HW", "log", 0, 5, withValues(ok, func(o *diffOutcome) { o.LogStart, o.HW = 1, 5 })),
		fetch("above HW", "log", 0, 6, oor(1, 5)),
		fetch("empty partition at HW", "log", 1, 0, withValues(ok, func(o *diffOutcome) { o.LogStart, o.HW = 0, 0 })),
		fetch("unknown topic", "nope", 0, 0, unknown),
		fetch("unknown partition", "log", 9, 0, unknown),

		list("latest (-1)", "log", 0, latest, -1, 0, offsetTS(5, -1)),
		list("earliest (-2)", "log", 0, earliest, -2, 0, offsetTS(1, -1)),
		list("max timestamp (-3)", "log", 0, noSpec, -3, 0, offsetTS(3, 5000)),
		list("max timestamp (-3) of an empty partition", "log", 1, noSpec, -3, 0, offsetTS(-1, -1)),
		list("by timestamp", "log", 0, timestamp, 2500, 2500, offsetTS(1, 3000)),
		list("by timestamp below the log start's", "log", 0, timestamp, 0, 0, offsetTS(1, 3000)),
		list("by timestamp after the last", "log", 0, timestamp, 9999, 9999, offsetTS(-1, -1)),
		list("latest (-1) of an unknown topic", "nope", 0, latest, -1, 0, listFailed(apierr.UnknownTopicOrPartition)),
		list("earliest (-2) of an unknown topic", "nope", 0, earliest, -2, 0, listFailed(apierr.UnknownTopicOrPartition)),
		list("max timestamp (-3) of an unknown topic", "nope", 0, noSpec, -3, 0, listFailed(apierr.UnknownTopicOrPartition)),
		list("by timestamp of an unknown topic", "nope", 0, timestamp, 10, 10, listFailed(apierr.UnknownTopicOrPartition)),
		list("earliest (-2) of an unknown partition", "log", 7, earliest, -2, 0, listFailed(apierr.UnknownTopicOrPartition)),

		create("bad name", "bad name!", true, 1, nil, invalidTopicException, diffFailed(apierr.InvalidRequest)),
		create("reserved name", "__reserved", true, 1, nil, invalidTopicException, diffFailed(apierr.InvalidRequest)),
		create("duplicate", "log", false, 1, nil, 0, diffFailed(apierr.TopicAlreadyExists)),
		create("0 partitions", "new0", false, 0, nil, invalidPartitions, diffFailed(apierr.InvalidRequest)),
		create("too many partitions", "newmax", false, 10001, nil, invalidPartitions, diffFailed(apierr.InvalidRequest)),
		create("unknown cleanup.policy", "newcp", false, 1, map[string]string{"cleanup.policy": "shred"}, invalidConfig, diffFailed(apierr.InvalidRequest)),
		create("segment.bytes too small", "newsb", false, 1, map[string]string{"segment.bytes": "10"}, invalidConfig, diffFailed(apierr.InvalidRequest)),
		create("segment.bytes too large", "newsb2", false, 1, map[string]string{"segment.bytes": strconv.Itoa(2 << 30)}, invalidConfig, diffFailed(apierr.InvalidRequest)),
		create("good", "fresh", false, 3, map[string]string{"cleanup.policy": "compact", "segment.bytes": "4096"}, 0,
			withValues(ok, func(o *diffOutcome) { o.Records = 3 })),

		purge("unknown topic", []diffOutcome{unknown}, tp{"nope", 0, 0}),
		purge("unknown partition", []diffOutcome{unknown}, tp{"log", 9, 0}),
		purge("above HW", []diffOutcome{diffFailed(apierr.OffsetOutOfRange)}, tp{"log", 0, 6}),
		purge("below -1", []diffOutcome{diffFailed(apierr.OffsetOutOfRange)}, tp{"log", 0, -2}),
		purge("a compacted topic", []diffOutcome{diffFailed(apierr.PolicyViolation)}, tp{"cmp", 0, -1}),
		purge("the same partition twice", []diffOutcome{diffFailed(apierr.InvalidRequest), diffFailed(apierr.InvalidRequest)},
			tp{"log", 1, 0}, tp{"log", 1, 0}),
		purge("the same partition of an unknown topic twice", []diffOutcome{unknown, unknown}, tp{"nope", 0, 0}, tp{"nope", 0, 0}),
		purge("-2 of an unknown topic", []diffOutcome{unknown}, tp{"nope", 0, -2}),
		purge("the same partition of a compacted topic twice", []diffOutcome{diffFailed(apierr.PolicyViolation), diffFailed(apierr.PolicyViolation)},
			tp{"cmp", 0, 0}, tp{"cmp", 0, 0}),
		purge("below the log start", []diffOutcome{lw(1)}, tp{"log", 0, 0}),
		purge("-1 (the high watermark)", []diffOutcome{lw(5)}, tp{"log", 0, -1}),
		purge("one bad partition among good ones", []diffOutcome{lw(5), unknown, lw(0)},
			tp{"log", 0, 3}, tp{"log", 4, 0}, tp{"log", 1, -1}),
		fetch("below log start after the purge", "log", 0, 4, oor(5, 5)),
	}
	sides := []diffSide{
		{name: "grpc", topic: func(l string) string { return l + "-grpc" }},
		{name: "kafka", topic: func(l string) string { return l + "-kafka" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var gotKafka, gotGRPC []diffOutcome
			gotKafka = c.kafka(ctx, t, sides[1].topic)
			if c.grpc != nil {
				gotGRPC = c.grpc(ctx, t, sides[0].topic)
				// The reason and its Kafka code agree both ways.
				for i := range gotGRPC {
					if i < len(gotKafka) && gotGRPC[i].Reason != "" {
						require.Equal(t, gotGRPC[i].Reason.KafkaCode(), gotKafka[i].Reason.KafkaCode(), "Kafka codes")
					}
				}
				require.Equal(t, gotGRPC, gotKafka, "gRPC (first) and Kafka (second) disagree")
			}
			if c.want != nil {
				require.Equal(t, c.want, gotKafka, fmt.Sprintf("want (first), Kafka (second); gRPC %v", gotGRPC))
			}
		})
	}
}
