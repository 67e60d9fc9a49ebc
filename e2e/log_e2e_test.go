package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestCreateTopic(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()

	topic := s.createTopic(t, "orders", 3, nil)
	assert.Equal(t, "orders", topic.GetName())
	assert.Regexp(t, uuidRE, topic.GetTopicId())
	assert.EqualValues(t, 3, topic.GetPartitionCount())
	require.Len(t, topic.GetPartitions(), 3)
	assert.EqualValues(t, 64<<20, topic.GetConfig().GetSegmentBytes(), "server default --segment-bytes")
	assert.EqualValues(t, -1, topic.GetConfig().GetRetentionMs())
	assert.Equal(t, "delete", topic.GetConfig().GetCleanupPolicy())
	for i, p := range topic.GetPartitions() {
		assert.EqualValues(t, i, p.GetPartition())
		assert.Zero(t, p.GetLogStartOffset())
		assert.Zero(t, p.GetHighWatermark())
	}

	custom := s.createTopic(t, "custom.topic_1-x", 1, &sharelogv1.TopicConfig{
		SegmentBytes: proto.Int64(4096), RetentionMs: proto.Int64(60000), CleanupPolicy: proto.String("compact,delete")})
	assert.EqualValues(t, 4096, custom.GetConfig().GetSegmentBytes())
	assert.EqualValues(t, 60000, custom.GetConfig().GetRetentionMs())
	assert.Equal(t, "compact,delete", custom.GetConfig().GetCleanupPolicy())

	_, err := s.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
	requireReason(t, err, codes.AlreadyExists, "TOPIC_ALREADY_EXISTS")

	bad := []struct {
		name string
		req  *sharelogv1.CreateTopicRequest
	}{
		{"empty name", &sharelogv1.CreateTopicRequest{Name: "", Partitions: 1}},
		{"slash in name", &sharelogv1.CreateTopicRequest{Name: "a/b", Partitions: 1}},
		{"reserved prefix", &sharelogv1.CreateTopicRequest{Name: "__internal", Partitions: 1}},
		{"dot", &sharelogv1.CreateTopicRequest{Name: ".", Partitions: 1}},
		{"too long", &sharelogv1.CreateTopicRequest{Name: strings.Repeat("a", 250), Partitions: 1}},
		{"zero partitions", &sharelogv1.CreateTopicRequest{Name: "p0", Partitions: 0}},
		{"too many partitions", &sharelogv1.CreateTopicRequest{Name: "p1", Partitions: 10001}},
		{"tiny segment", &sharelogv1.CreateTopicRequest{Name: "s", Partitions: 1, Config: &sharelogv1.TopicConfig{SegmentBytes: proto.Int64(10)}}},
		{"bad retention", &sharelogv1.CreateTopicRequest{Name: "r", Partitions: 1, Config: &sharelogv1.TopicConfig{RetentionMs: proto.Int64(-2)}}},
		{"bad cleanup policy", &sharelogv1.CreateTopicRequest{Name: "c", Partitions: 1, Config: &sharelogv1.TopicConfig{CleanupPolicy: proto.String("forever")}}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.log.CreateTopic(ctx, tc.req)
			requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		})
	}
	list, err := s.log.ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
	require.NoError(t, err)
	assert.Len(t, list.GetTopics(), 2, "failed creations leave nothing behind")
}

func TestDeleteAndListTopics(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	first := s.createTopic(t, "b-topic", 1, nil)
	s.createTopic(t, "a-topic", 2, nil)
	s.produce(t, "b-topic", 0, "x", "y")

	list, err := s.log.ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetTopics(), 2)
	assert.Equal(t, "a-topic", list.GetTopics()[0].GetName(), "sorted by name")
	assert.Equal(t, "b-topic", list.GetTopics()[1].GetName())

	_, err = s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "b-topic"})
	require.NoError(t, err)
	_, err = s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "b-topic"})
	requireReason(t, err, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION")
	_, err = s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "b-topic"})
	requireReason(t, err, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION")
	_, err = s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{})
	requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")

	again := s.createTopic(t, "b-topic", 1, nil)
	assert.NotEqual(t, first.GetTopicId(), again.GetTopicId(), "a re-created topic gets a new id")
	assert.Zero(t, again.GetPartitions()[0].GetHighWatermark(), "a re-created topic starts empty")
}

func TestDescribeTopic(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "d", 2, nil)
	s.produce(t, "d", 1, "a", "b", "c")
	topic, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "d"})
	require.NoError(t, err)
	require.Len(t, topic.GetPartitions(), 2)
	assert.Zero(t, topic.GetPartitions()[0].GetHighWatermark())
	p1 := topic.GetPartitions()[1]
	assert.EqualValues(t, 3, p1.GetHighWatermark())
	assert.Positive(t, p1.GetSizeBytes())
	assert.EqualValues(t, 1, p1.GetSegmentCount())

	_, err = s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "nope"})
	requireReason(t, err, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION")
	_, err = s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{})
	requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
}

func TestProduceAndFetch(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "t", 1, nil)

	p := int32(0)
	resp, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p, Records: []*sharelogv1.Record{
		{Key: []byte("k1"), Value: []byte("v1"), Timestamp: 1000, Headers: []*sharelogv1.RecordHeader{{Key: "h", Value: []byte("hv")}}},
		{Value: []byte("no key")},
		{Key: []byte("deleted")}, // tombstone: no value
		{Key: []byte{}, Value: []byte{}},
	}})
	require.NoError(t, err)
	require.Len(t, resp.GetResults(), 4)
	for i, r := range resp.GetResults() {
		assert.EqualValues(t, i, r.GetOffset(), "dense offsets in request order")
		assert.Zero(t, r.GetPartition())
	}
	assert.InDelta(t, time.Now().UnixMilli(), resp.GetLogAppendTime(), 60000)

	fetched, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Partition: 0, Offset: 0})
	require.NoError(t, err)
	assert.EqualValues(t, 4, fetched.GetHighWatermark())
	assert.Zero(t, fetched.GetLogStartOffset())
	recs := fetched.GetRecords()
	require.Len(t, recs, 4)
	assert.Equal(t, []byte("k1"), recs[0].Key)
	assert.Equal(t, []byte("v1"), recs[0].Value)
	assert.EqualValues(t, 1000, recs[0].GetTimestamp(), "producer timestamp kept")
	require.Len(t, recs[0].GetHeaders(), 1)
	assert.Equal(t, "h", recs[0].GetHeaders()[0].GetKey())
	assert.Equal(t, []byte("hv"), recs[0].GetHeaders()[0].GetValue())
	assert.Nil(t, recs[1].Key, "keyless stays keyless")
	assert.Equal(t, resp.GetLogAppendTime(), recs[1].GetTimestamp(), "timestamp 0 becomes the log append time")
	assert.Nil(t, recs[2].Value, "tombstone stays a tombstone")
	assert.NotNil(t, recs[3].Key, "an empty key is not an absent key")
	assert.NotNil(t, recs[3].Value, "an empty value is not a tombstone")
	assert.Empty(t, recs[3].Value)

	limited, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: 1, MaxRecords: 2})
	require.NoError(t, err)
	require.Len(t, limited.GetRecords(), 2)
	assert.EqualValues(t, 1, limited.GetRecords()[0].GetOffset())

	oneByte, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: 0, MaxBytes: 1})
	require.NoError(t, err)
	assert.Len(t, oneByte.GetRecords(), 1, "the first record comes even when larger than max_bytes")

	atHW, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: 4})
	require.NoError(t, err)
	assert.Empty(t, atHW.GetRecords())
}

func TestProduceRouting(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "routed", 3, nil)

	// Keyless records go round-robin.
	var keyless []*sharelogv1.Record
	for i := range 6 {
		keyless = append(keyless, &sharelogv1.Record{Value: fmt.Appendf(nil, "v%d", i)})
	}
	resp, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "routed", Records: keyless})
	require.NoError(t, err)
	counts := map[int32]int{}
	for _, r := range resp.GetResults() {
		counts[r.GetPartition()]++
	}
	assert.Equal(t, map[int32]int{0: 2, 1: 2, 2: 2}, counts)

	// The same key always lands on the same partition: Kafka's murmur2 choice.
	// Kafka: Utils.toPositive(Utils.murmur2("foobar".getBytes())) % 3 == 1
	// (murmur2("foobar") = -790332482).
	var keyed []*sharelogv1.Record
	for range 4 {
		keyed = append(keyed, &sharelogv1.Record{Key: []byte("foobar"), Value: []byte("x")})
	}
	resp, err = s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "routed", Records: keyed})
	require.NoError(t, err)
	for i, r := range resp.GetResults() {
		assert.EqualValues(t, 1357151166%3, r.GetPartition())
		if i > 0 {
			assert.Equal(t, resp.GetResults()[i-1].GetOffset()+1, r.GetOffset(), "contiguous in one partition")
		}
	}
}

func TestProduceErrors(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, func(c *app.Config) { c.MaxRequestBytes = 64 << 10 })
	ctx := context.Background()
	s.createTopic(t, "t", 2, nil)
	p := func(v int32) *int32 { return &v }
	one := []*sharelogv1.Record{{Value: []byte("x")}}
	many := make([]*sharelogv1.Record, 10001)
	for i := range many {
		many[i] = &sharelogv1.Record{}
	}
	cases := []struct {
		name   string
		req    *sharelogv1.ProduceRequest
		code   codes.Code
		reason string
	}{
		{"no topic", &sharelogv1.ProduceRequest{Records: one}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"unknown topic", &sharelogv1.ProduceRequest{Topic: "nope", Records: one}, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"partition too high", &sharelogv1.ProduceRequest{Topic: "t", Partition: p(2), Records: one}, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"negative partition", &sharelogv1.ProduceRequest{Topic: "t", Partition: p(-1), Records: one}, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"no records", &sharelogv1.ProduceRequest{Topic: "t"}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"too many records", &sharelogv1.ProduceRequest{Topic: "t", Records: many}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"negative timestamp", &sharelogv1.ProduceRequest{Topic: "t", Records: []*sharelogv1.Record{{Timestamp: -5}}}, codes.InvalidArgument, "INVALID_REQUEST"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.log.Produce(ctx, tc.req)
			requireReason(t, err, tc.code, tc.reason)
		})
	}
	t.Run("request above --max-request-bytes", func(t *testing.T) {
		_, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Records: []*sharelogv1.Record{{Value: make([]byte, 100<<10)}}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "larger than max")
	})
	topic, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "t"})
	require.NoError(t, err)
	for _, part := range topic.GetPartitions() {
		assert.Zero(t, part.GetHighWatermark(), "a refused produce appends nothing")
	}
}

func TestFetchErrors(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "t", 1, nil)
	s.produce(t, "t", 0, "a", "b")
	cases := []struct {
		name   string
		req    *sharelogv1.FetchRequest
		code   codes.Code
		reason string
	}{
		{"no topic", &sharelogv1.FetchRequest{}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"unknown topic", &sharelogv1.FetchRequest{Topic: "nope"}, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"unknown partition", &sharelogv1.FetchRequest{Topic: "t", Partition: 1}, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"negative partition", &sharelogv1.FetchRequest{Topic: "t", Partition: -1}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"above high watermark", &sharelogv1.FetchRequest{Topic: "t", Offset: 3}, codes.OutOfRange, "OFFSET_OUT_OF_RANGE"},
		{"negative offset", &sharelogv1.FetchRequest{Topic: "t", Offset: -1}, codes.OutOfRange, "OFFSET_OUT_OF_RANGE"},
		{"negative max_records", &sharelogv1.FetchRequest{Topic: "t", MaxRecords: -1}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"huge max_records", &sharelogv1.FetchRequest{Topic: "t", MaxRecords: 10001}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"negative max_bytes", &sharelogv1.FetchRequest{Topic: "t", MaxBytes: -1}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"negative max_wait_ms", &sharelogv1.FetchRequest{Topic: "t", MaxWaitMs: -1}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"max_wait_ms above a minute", &sharelogv1.FetchRequest{Topic: "t", MaxWaitMs: 60001}, codes.InvalidArgument, "INVALID_REQUEST"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.log.Fetch(ctx, tc.req)
			requireReason(t, err, tc.code, tc.reason)
		})
	}
	t.Run("out of range carries the bounds", func(t *testing.T) {
		_, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: 9})
		info := requireReason(t, err, codes.OutOfRange, "OFFSET_OUT_OF_RANGE")
		assert.Equal(t, "0", info.GetMetadata()["log_start_offset"])
		assert.Equal(t, "2", info.GetMetadata()["high_watermark"])
	})
}

func TestFetchLongPoll(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "t", 1, nil)

	t.Run("woken by a produce", func(t *testing.T) {
		got := make(chan *sharelogv1.FetchResponse, 1)
		errs := make(chan error, 1)
		go func() {
			resp, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: 0, MaxWaitMs: 30000})
			errs <- err
			got <- resp
		}()
		s.awaitLongPolls(t, 1)
		s.produce(t, "t", 0, "late")
		require.NoError(t, <-errs)
		resp := <-got
		require.Len(t, resp.GetRecords(), 1, "the waiting fetch returns the new record, long before its 30 s wait")
		assert.Equal(t, []byte("late"), resp.GetRecords()[0].GetValue())
	})
	t.Run("times out empty", func(t *testing.T) {
		start := time.Now()
		resp, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: 1, MaxWaitMs: 100})
		require.NoError(t, err)
		assert.Empty(t, resp.GetRecords())
		assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "it waited max_wait_ms")
	})
}

func TestListOffsets(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "t", 1, nil)
	p := int32(0)
	_, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p, Records: []*sharelogv1.Record{
		{Timestamp: 1000}, {Timestamp: 2000}, {Timestamp: 3000},
	}})
	require.NoError(t, err)
	cases := []struct {
		name       string
		spec       sharelogv1.OffsetSpec
		ts         int64
		wantOffset int64
		wantTS     int64
	}{
		{"earliest", sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST, 0, 0, -1},
		{"latest", sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST, 0, 3, -1},
		{"timestamp exact", sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 2000, 1, 2000},
		{"timestamp between", sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 1500, 1, 2000},
		{"timestamp before all", sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 1, 0, 1000},
		{"timestamp after all", sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, 3001, -1, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.log.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "t", Spec: tc.spec, Timestamp: tc.ts})
			require.NoError(t, err)
			assert.Equal(t, tc.wantOffset, resp.GetOffset())
			assert.Equal(t, tc.wantTS, resp.GetTimestamp())
		})
	}
	errCases := []struct {
		name   string
		req    *sharelogv1.ListOffsetsRequest
		code   codes.Code
		reason string
	}{
		{"no spec", &sharelogv1.ListOffsetsRequest{Topic: "t"}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"no topic", &sharelogv1.ListOffsetsRequest{Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST}, codes.InvalidArgument, "INVALID_REQUEST"},
		{"unknown topic", &sharelogv1.ListOffsetsRequest{Topic: "nope", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST}, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"unknown partition", &sharelogv1.ListOffsetsRequest{Topic: "t", Partition: 5, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST}, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"negative timestamp", &sharelogv1.ListOffsetsRequest{Topic: "t", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, Timestamp: -1}, codes.InvalidArgument, "INVALID_REQUEST"},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.log.ListOffsets(ctx, tc.req)
			requireReason(t, err, tc.code, tc.reason)
		})
	}
}

func TestRESTLogService(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, func(c *app.Config) { c.MaxRequestBytes = 4096 })

	r := s.rest(t, http.MethodPost, "/v1/topics", `{"name":"orders","partitions":2}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "orders", r.Body["name"])
	assert.Regexp(t, uuidRE, r.Body["topicId"])

	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/topics", `{"name":"orders","partitions":1}`), http.StatusConflict, "TOPIC_ALREADY_EXISTS")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/topics", `{"name":"bad/name","partitions":1}`), http.StatusBadRequest, "INVALID_REQUEST")
	unknownField := s.rest(t, http.MethodPost, "/v1/topics", `{"name":"x","partitionz":1}`)
	assert.Equal(t, http.StatusBadRequest, unknownField.Status, "a misspelt field is an error: %s", unknownField.Raw)

	r = s.rest(t, http.MethodGet, "/v1/topics", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Len(t, r.Body["topics"], 1)

	key := base64.StdEncoding.EncodeToString([]byte("user-1"))
	val := base64.StdEncoding.EncodeToString([]byte("hello"))
	r = s.rest(t, http.MethodPost, "/v1/topics/orders/records", `{"partition":1,"records":[{"key":"`+key+`","value":"`+val+`"},{"value":"`+val+`"}]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	results := r.Body["results"].([]any)
	require.Len(t, results, 2)
	assert.Equal(t, map[string]any{"partition": float64(1), "offset": "0", "errorCode": "ERROR_CODE_NONE", "errorMessage": ""}, results[0], "zero values are shown, int64 as strings")
	assert.Equal(t, "1", results[1].(map[string]any)["offset"])

	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/topics/nope/records", `{"records":[{"value":"`+val+`"}]}`), http.StatusNotFound, "UNKNOWN_TOPIC_OR_PARTITION")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/topics/orders/records", `{"records":[]}`), http.StatusBadRequest, "INVALID_REQUEST")
	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/topics/orders/records", `{"records":[{"value":"`+strings.Repeat("A", 8000)+`"}]}`), http.StatusRequestEntityTooLarge, "INVALID_REQUEST")

	r = s.rest(t, http.MethodGet, "/v1/topics/orders/partitions/1/records?offset=0&maxRecords=10", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	recs := r.Body["records"].([]any)
	require.Len(t, recs, 2)
	first := recs[0].(map[string]any)
	assert.Equal(t, key, first["key"])
	assert.Equal(t, val, first["value"])
	_, hasKey := recs[1].(map[string]any)["key"]
	assert.False(t, hasKey, "a keyless record has no key field")
	assert.Equal(t, "2", r.Body["highWatermark"])

	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/topics/orders/partitions/1/records?offset=7", ""), http.StatusBadRequest, "OFFSET_OUT_OF_RANGE")
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/topics/orders/partitions/9/records?offset=0", ""), http.StatusNotFound, "UNKNOWN_TOPIC_OR_PARTITION")
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/topics/orders/partitions/1/records?maxRecords=-1", ""), http.StatusBadRequest, "INVALID_REQUEST")

	r = s.rest(t, http.MethodGet, "/v1/topics/orders/partitions/1/offsets?spec=OFFSET_SPEC_LATEST", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "2", r.Body["offset"])
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/topics/orders/partitions/1/offsets", ""), http.StatusBadRequest, "INVALID_REQUEST")
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/topics/nope/partitions/0/offsets?spec=OFFSET_SPEC_EARLIEST", ""), http.StatusNotFound, "UNKNOWN_TOPIC_OR_PARTITION")

	r = s.rest(t, http.MethodGet, "/v1/topics/orders", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	parts := r.Body["partitions"].([]any)
	assert.Equal(t, "2", parts[1].(map[string]any)["highWatermark"])
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/topics/nope", ""), http.StatusNotFound, "UNKNOWN_TOPIC_OR_PARTITION")

	r = s.rest(t, http.MethodDelete, "/v1/topics/orders", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	requireRESTError(t, s.rest(t, http.MethodDelete, "/v1/topics/orders", ""), http.StatusNotFound, "UNKNOWN_TOPIC_OR_PARTITION")
}

func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	r := s.rest(t, http.MethodGet, "/healthz", "")
	assert.Equal(t, http.StatusOK, r.Status)
	r = s.rest(t, http.MethodGet, "/readyz", "")
	assert.Equal(t, http.StatusOK, r.Status)
	r = s.rest(t, http.MethodGet, "/openapi.json", "")
	require.Equal(t, http.StatusOK, r.Status)
	paths := r.Body["paths"].(map[string]any)
	assert.Contains(t, paths, "/v1/topics/{topic}/records")
	assert.Contains(t, paths, "/v1/purge")

	s.createTopic(t, "m", 1, nil)
	s.produce(t, "m", 0, "a")
	r = s.rest(t, http.MethodGet, "/metrics", "")
	require.Equal(t, http.StatusOK, r.Status)
	assert.Contains(t, r.Raw, "sharelog_logstore_appended_records_total")
	assert.Contains(t, r.Raw, "rpc_server_call_duration_seconds")
}
