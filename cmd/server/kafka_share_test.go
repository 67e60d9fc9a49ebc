package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// kafkaConn is one raw Kafka connection to a child's --kafka-addr: each
// request goes out exactly when the test sends it, at the version it
// sets, so the order of heartbeats and fetches is the test's, not a
// client library's.
type kafkaConn struct {
	t    *testing.T
	nc   net.Conn
	rd   *bufio.Reader
	fmt  *kmsg.RequestFormatter
	corr int32
}

func dialKafka(t *testing.T, addr string) *kafkaConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	return &kafkaConn{t: t, nc: nc, rd: bufio.NewReader(nc), fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("kshare-test"))}
}

// do sends req (its Version set) and decodes the answer into a new response.
func (k *kafkaConn) do(req kmsg.Request) kmsg.Response {
	k.t.Helper()
	k.corr++
	require.NoError(k.t, k.nc.SetDeadline(time.Now().Add(15*time.Second)))
	_, err := k.nc.Write(k.fmt.AppendRequest(nil, req, k.corr))
	require.NoError(k.t, err)
	var size [4]byte
	_, err = io.ReadFull(k.rd, size[:])
	require.NoError(k.t, err)
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err = io.ReadFull(k.rd, body)
	require.NoError(k.t, err)
	require.GreaterOrEqual(k.t, len(body), 4)
	require.Equal(k.t, k.corr, int32(binary.BigEndian.Uint32(body)), "correlation id")
	body = body[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && resp.Key() != 18 { // ApiVersions answers with header v0
		b := kbin{body}
		for n := b.uvarint(); n > 0; n-- {
			b.uvarint()
			b.skip(int(b.uvarint()))
		}
		body = b.src
	}
	require.NoError(k.t, resp.ReadFrom(body))
	return resp
}

// kbin reads the unsigned varints of a response header's tagged fields.
type kbin struct{ src []byte }

func (b *kbin) uvarint() uint64 {
	v, n := binary.Uvarint(b.src)
	if n <= 0 {
		b.src = nil
		return 0
	}
	b.src = b.src[n:]
	return v
}

func (b *kbin) skip(n int) { b.src = b.src[min(n, len(b.src)):] }

func (k *kafkaConn) createTopic(name string, partitions int32) [16]byte {
	k.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 7
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	resp := k.do(req).(*kmsg.CreateTopicsResponse)
	require.Len(k.t, resp.Topics, 1)
	require.Zero(k.t, resp.Topics[0].ErrorCode, "create %s: %v", name, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
	return resp.Topics[0].TopicID
}

func (k *kafkaConn) deleteTopic(name string) {
	k.t.Helper()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.Version = 6
	dt := kmsg.NewDeleteTopicsRequestTopic()
	dt.Topic = &name
	req.Topics = append(req.Topics, dt)
	req.TimeoutMillis = 5000
	resp := k.do(req).(*kmsg.DeleteTopicsResponse)
	require.Len(k.t, resp.Topics, 1)
	require.Zero(k.t, resp.Topics[0].ErrorCode, "delete %s: %v", name, kerr.ErrorForCode(resp.Topics[0].ErrorCode))
}

// heartbeat sends a ShareGroupHeartbeat and returns the member epoch and
// the assignment (topic id → partitions; nil when the answer has none).
func (k *kafkaConn) heartbeat(group, member string, epoch int32, topics []string) (int32, map[[16]byte][]int32) {
	k.t.Helper()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.Version = 1
	req.GroupID, req.MemberID, req.MemberEpoch, req.SubscribedTopicNames = group, member, epoch, topics
	resp := k.do(req).(*kmsg.ShareGroupHeartbeatResponse)
	require.Zero(k.t, resp.ErrorCode, "heartbeat: %v %v", kerr.ErrorForCode(resp.ErrorCode), resp.ErrorMessage)
	if resp.Assignment == nil {
		return resp.MemberEpoch, nil
	}
	out := map[[16]byte][]int32{}
	for _, tp := range resp.Assignment.TopicPartitions {
		out[tp.TopicID] = tp.Partitions
	}
	return resp.MemberEpoch, out
}

// acquiredRun is one AcquiredRecords entry of a ShareFetch answer.
type acquiredRun struct {
	First, Last int64
	Count       int16
}

type kshareFetch struct {
	group, member string
	epoch         int32
	maxRecords    int32
	acquireMode   int8
	topics        map[[16]byte][]int32
	acks          map[[16]byte]map[int32][]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch
	forget        map[[16]byte][]int32
}

// shareFetch sends a ShareFetch v2 and returns the answer.
func (k *kafkaConn) shareFetch(f kshareFetch) *kmsg.ShareFetchResponse {
	k.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.Version = 2
	req.GroupID, req.MemberID, req.ShareSessionEpoch = &f.group, &f.member, f.epoch
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 1, 1<<20
	req.MaxRecords, req.BatchSize, req.ShareAcquireMode = f.maxRecords, 500, f.acquireMode
	if req.MaxRecords == 0 {
		req.MaxRecords = 500
	}
	for id, parts := range f.topics {
		t := kmsg.NewShareFetchRequestTopic()
		t.TopicID = id
		for _, p := range parts {
			rp := kmsg.NewShareFetchRequestTopicPartition()
			rp.Partition = p
			rp.AcknowledgementBatches = f.acks[id][p]
			t.Partitions = append(t.Partitions, rp)
		}
		req.Topics = append(req.Topics, t)
	}
	for id, parts := range f.forget {
		ft := kmsg.NewShareFetchRequestForgottenTopicsData()
		ft.TopicID, ft.Partitions = id, parts
		req.ForgottenTopicsData = append(req.ForgottenTopicsData, ft)
	}
	resp := k.do(req).(*kmsg.ShareFetchResponse)
	require.Zero(k.t, resp.ErrorCode, "share fetch: %v %v", kerr.ErrorForCode(resp.ErrorCode), resp.ErrorMessage)
	return resp
}

// acquiredOf lists a ShareFetch answer's acquired runs by topic id and partition.
func acquiredOf(resp *kmsg.ShareFetchResponse) map[[16]byte]map[int32][]acquiredRun {
	out := map[[16]byte]map[int32][]acquiredRun{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			for _, a := range p.AcquiredRecords {
				if out[t.TopicID] == nil {
					out[t.TopicID] = map[int32][]acquiredRun{}
				}
				out[t.TopicID][p.Partition] = append(out[t.TopicID][p.Partition], acquiredRun{a.FirstOffset, a.LastOffset, a.DeliveryCount})
			}
		}
	}
	return out
}

func produceGRPC(t *testing.T, logc sharelogv1.LogServiceClient, topic string, partition int32, n int, tag string) {
	t.Helper()
	recs := make([]*sharelogv1.Record, n)
	for i := range recs {
		recs[i] = &sharelogv1.Record{Value: fmt.Appendf(nil, "%s-%d", tag, i)}
	}
	_, err := logc.Produce(context.Background(), &sharelogv1.ProduceRequest{Topic: topic, Partition: &partition, Records: recs})
	require.NoError(t, err)
}

func acceptBatch(first, last int64) []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch {
	b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = first, last, []int8{1}
	return []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{b}
}

// TestKafkaShareTopicRecreateHeartbeatFirst is librdkafka's
// 0184_share_consumer_topic_recreate "recreate-shrink-hb-first" (and the
// same with an unchanged partition count) over raw Kafka requests in its
// order: a member consumes a 3-partition topic (accepting some records,
// holding others), keeps heartbeating while the topic is deleted and
// re-created, learns the new topic id from a heartbeat before its first
// fetch of it, and fetches in the same share session. Nothing of the old
// topic may show under the new id: offset 0 comes with delivery count 1,
// the new id's partitions answer without errors, and the old topic's
// partitions are reported (if at all) under the old id.
func TestKafkaShareTopicRecreateHeartbeatFirst(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions int32
	}{{"shrink", 1}, {"same", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			kafkaShareRecreate(t, tc.partitions)
		})
	}
}

func kafkaShareRecreate(t *testing.T, newPartitions int32) {
	c := startChild(t, t.TempDir(), "--kafka-addr", "127.0.0.1:0")
	logc := sharelogv1.NewLogServiceClient(c.conn)
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	k := dialKafka(t, c.kafkaAddr(t))
	const group, member, topic = "recreate-hb-first", "5f0c3a52-7e0a-4c39-9a43-0d1c2e3f4a5b", "orders"
	_, err := sg.UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{GroupId: group,
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)

	oldID := k.createTopic(topic, 3)
	for p := range int32(3) {
		produceGRPC(t, logc, topic, p, 10, "old")
	}
	epoch, assigned := k.heartbeat(group, member, 0, []string{topic})
	require.Equal(t, map[[16]byte][]int32{oldID: {0, 1, 2}}, assigned)

	resp := k.shareFetch(kshareFetch{group: group, member: member, epoch: 0, topics: map[[16]byte][]int32{oldID: {0, 1, 2}}})
	require.Equal(t, map[[16]byte]map[int32][]acquiredRun{oldID: {0: {{0, 9, 1}}, 1: {{0, 9, 1}}, 2: {{0, 9, 1}}}}, acquiredOf(resp))
	// Accept 0..4 of partition 0 and all of partition 1; 0/5..9 and all
	// of partition 2 stay acquired by the session.
	resp = k.shareFetch(kshareFetch{group: group, member: member, epoch: 1,
		topics: map[[16]byte][]int32{oldID: {0, 1}},
		acks:   map[[16]byte]map[int32][]kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{oldID: {0: acceptBatch(0, 4), 1: acceptBatch(0, 9)}}})
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			require.Zero(t, p.AcknowledgeErrorCode, "ack of partition %d", p.Partition)
		}
	}
	epoch, _ = k.heartbeat(group, member, epoch, nil)

	k.deleteTopic(topic)
	newID := k.createTopic(topic, newPartitions)
	require.NotEqual(t, oldID, newID)
	produceGRPC(t, logc, topic, 0, 5, "new")

	// The heartbeat comes first and brings the new id.
	want := map[[16]byte][]int32{newID: []int32{0, 1, 2}[:newPartitions]}
	var got map[[16]byte][]int32
	for range 3 {
		var a map[[16]byte][]int32
		epoch, a = k.heartbeat(group, member, epoch, nil)
		if a != nil {
			got = a
		}
	}
	require.Equal(t, want, got, "the heartbeat assigns the re-created topic by its new id")

	resp = k.shareFetch(kshareFetch{group: group, member: member, epoch: 2,
		topics: want, forget: map[[16]byte][]int32{oldID: {0, 1, 2}}})
	assert.Equal(t, map[[16]byte]map[int32][]acquiredRun{newID: {0: {{0, 4, 1}}}}, acquiredOf(resp),
		"the re-created topic's records come once each, with delivery count 1, and nothing of the old topic")
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			switch tp.TopicID {
			case newID:
				assert.Zero(t, p.ErrorCode, "new topic partition %d: %v", p.Partition, kerr.ErrorForCode(p.ErrorCode))
			case oldID:
				assert.NotZero(t, p.ErrorCode, "old topic partition %d answers only with an error", p.Partition)
				assert.Empty(t, p.AcquiredRecords)
			default:
				t.Errorf("a partition reported under topic id %x, neither the old nor the new one", tp.TopicID)
			}
		}
	}
}

// restJSON sends a JSON request to the child's REST gateway and decodes the
// JSON answer into a map; it requires status 200.
func restJSON(t *testing.T, c *child, method, path, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.httpAddr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, path, raw)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return out
}

// restAcquired lists a REST ShareFetch answer's acquired runs by
// "topic/partition", and its per-partition error codes.
func restAcquired(resp map[string]any) (map[string][]acquiredRun, map[string]string) {
	runs, errs := map[string][]acquiredRun{}, map[string]string{}
	ts, _ := resp["responses"].([]any)
	for _, ti := range ts {
		tm := ti.(map[string]any)
		ps, _ := tm["partitions"].([]any)
		for _, pi := range ps {
			pm := pi.(map[string]any)
			key := fmt.Sprintf("%s/%v", tm["topic"], pm["partition"])
			if pm["partition"] == nil {
				key = fmt.Sprintf("%s/0", tm["topic"])
			}
			if code, _ := pm["errorCode"].(string); code != "" && code != "ERROR_CODE_NONE" {
				errs[key] = code
			}
			ars, _ := pm["acquiredRecords"].([]any)
			for _, ai := range ars {
				am := ai.(map[string]any)
				num := func(k string) int64 {
					v, _ := strconv.ParseInt(fmt.Sprint(am[k]), 10, 64)
					return v
				}
				runs[key] = append(runs[key], acquiredRun{num("firstOffset"), num("lastOffset"), int16(num("deliveryCount"))})
			}
		}
	}
	return runs, errs
}

// TestRESTShareTopicRecreate is the same steps as the Kafka test over the
// REST gateway, where topics are named by name: after the re-creation with
// fewer partitions the session's old partitions are reported deleted once,
// and the new topic's records come with delivery count 1.
func TestRESTShareTopicRecreate(t *testing.T) {
	c := startChild(t, t.TempDir())
	const g = "/v1/share-groups/recreate-rest"
	member := `"memberId":"5f0c3a52-7e0a-4c39-9a43-0d1c2e3f4a5b"`
	restJSON(t, c, http.MethodPatch, g+"/config", `{"config":{"autoOffsetReset":"earliest"}}`)
	restJSON(t, c, http.MethodPost, "/v1/topics", `{"name":"orders","partitions":3}`)
	for p := range 3 {
		restJSON(t, c, http.MethodPost, "/v1/topics/orders/records",
			fmt.Sprintf(`{"partition":%d,"records":[{"value":"b2xk"},{"value":"b2xk"},{"value":"b2xk"}]}`, p))
	}
	hb := restJSON(t, c, http.MethodPost, g+":heartbeat", `{`+member+`,"memberEpoch":0,"subscribedTopicNames":["orders"]}`)
	epoch := hb["memberEpoch"]
	runs, errs := restAcquired(restJSON(t, c, http.MethodPost, g+":fetch", `{`+member+`,"shareSessionEpoch":0,
		"topics":[{"topic":"orders","partitions":[{"partition":0},{"partition":1},{"partition":2}]}]}`))
	require.Empty(t, errs)
	require.Equal(t, map[string][]acquiredRun{"orders/0": {{0, 2, 1}}, "orders/1": {{0, 2, 1}}, "orders/2": {{0, 2, 1}}}, runs)
	// Accept 0..1 of partition 0; the rest stays acquired.
	restJSON(t, c, http.MethodPost, g+":acknowledge", `{`+member+`,"shareSessionEpoch":1,
		"topics":[{"topic":"orders","partitions":[{"partition":0,"acknowledgementBatches":[{"firstOffset":0,"lastOffset":1,"acknowledgeTypes":["ACKNOWLEDGE_TYPE_ACCEPT"]}]}]}]}`)
	hb = restJSON(t, c, http.MethodPost, g+":heartbeat", fmt.Sprintf(`{%s,"memberEpoch":%v}`, member, epoch))
	epoch = hb["memberEpoch"]

	restJSON(t, c, http.MethodDelete, "/v1/topics/orders", "")
	restJSON(t, c, http.MethodPost, "/v1/topics", `{"name":"orders","partitions":1}`)
	restJSON(t, c, http.MethodPost, "/v1/topics/orders/records", `{"partition":0,"records":[{"value":"bmV3"},{"value":"bmV3"}]}`)
	restJSON(t, c, http.MethodPost, g+":heartbeat", fmt.Sprintf(`{%s,"memberEpoch":%v}`, member, epoch))

	runs, errs = restAcquired(restJSON(t, c, http.MethodPost, g+":fetch", `{`+member+`,"shareSessionEpoch":2,
		"topics":[{"topic":"orders","partitions":[{"partition":0}]}]}`))
	assert.Equal(t, map[string][]acquiredRun{"orders/0": {{0, 1, 1}}}, runs, "the new topic's records, delivery count 1")
	assert.Equal(t, map[string]string{"orders/1": "ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION", "orders/2": "ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION"}, errs,
		"the old topic's other partitions are reported deleted once")
}

func countAcquired(runs map[[16]byte]map[int32][]acquiredRun) int64 {
	var n int64
	for _, ps := range runs {
		for _, rs := range ps {
			for _, r := range rs {
				n += r.Last - r.First + 1
			}
		}
	}
	return n
}

// TestKafkaShareFetchMaxRecordsAcrossPartitions: ShareFetch MaxRecords is
// a limit of the whole response, not of each partition (as Kafka's share
// fetch divides it: each partition acquires at most what the partitions
// before it left), in both acquire modes of ShareFetch v2.
func TestKafkaShareFetchMaxRecordsAcrossPartitions(t *testing.T) {
	c := startChild(t, t.TempDir(), "--kafka-addr", "127.0.0.1:0")
	logc := sharelogv1.NewLogServiceClient(c.conn)
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	k := dialKafka(t, c.kafkaAddr(t))
	id := k.createTopic("jobs", 2)
	for p := range int32(2) {
		produceGRPC(t, logc, "jobs", p, 100, "r")
	}
	for _, tc := range []struct {
		name string
		mode int8
	}{{"batch-optimized", 0}, {"record-limit", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			group, member := "max-records-"+tc.name, "7d1f0a6e-3b2c-4e5f-8a9b-0c1d2e3f4a5b"
			_, err := sg.UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{GroupId: group,
				Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
			require.NoError(t, err)
			var total int64
			for epoch := int32(0); epoch < 4; epoch++ {
				resp := k.shareFetch(kshareFetch{group: group, member: member, epoch: epoch, maxRecords: 50, acquireMode: tc.mode,
					topics: map[[16]byte][]int32{id: {0, 1}}})
				n := countAcquired(acquiredOf(resp))
				assert.Equal(t, int64(50), n, "fetch %d of the session: MaxRecords 50 over two partitions", epoch)
				total += n
			}
			assert.Equal(t, int64(200), total, "four fetches take every record once")
		})
	}
}
