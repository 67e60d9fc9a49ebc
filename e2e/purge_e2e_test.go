package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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

func purgeOne(t *testing.T, s *stack, topic string, partition int32, offset int64) *sharelogv1.PurgePartitionResult {
	t.Helper()
	resp, err := s.log.Purge(context.Background(), &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{
		{Topic: topic, Partitions: []*sharelogv1.PurgePartition{{Partition: partition, Offset: offset}}},
	}})
	require.NoError(t, err)
	require.Len(t, resp.GetTopics(), 1)
	require.Len(t, resp.GetTopics()[0].GetPartitions(), 1)
	return resp.GetTopics()[0].GetPartitions()[0]
}

// produceKeyed produces one record per value, keyed by the value.
func (s *stack) produceKeyed(t testing.TB, topic string, partition int32, values ...string) {
	t.Helper()
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &partition}
	for _, v := range values {
		req.Records = append(req.Records, &sharelogv1.Record{Key: []byte(v), Value: []byte(v)})
	}
	_, err := s.log.Produce(context.Background(), req)
	require.NoError(t, err)
}

func TestPurgeRules(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "t", 2, nil)
	s.createTopic(t, "compacted", 1, &sharelogv1.TopicConfig{CleanupPolicy: proto.String("compact")})
	s.createTopic(t, "both", 1, &sharelogv1.TopicConfig{CleanupPolicy: proto.String("compact,delete")})
	for range 10 {
		s.produce(t, "t", 0, "r")
	}
	s.produceKeyed(t, "both", 0, "a", "b", "c") // compacted topics take keyed records only
	s.produceKeyed(t, "compacted", 0, "a", "b")

	none := sharelogv1.ErrorCode_ERROR_CODE_NONE
	cases := []struct {
		name      string
		topic     string
		partition int32
		offset    int64
		code      sharelogv1.ErrorCode
		lowWM     int64
	}{
		{"unknown topic", "nope", 0, 1, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, -1},
		{"unknown partition", "t", 2, 1, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, -1},
		{"negative partition", "t", -1, 1, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, -1},
		{"compact-only topic", "compacted", 0, 1, sharelogv1.ErrorCode_ERROR_CODE_POLICY_VIOLATION, -1},
		{"negative other than -1", "t", 0, -2, sharelogv1.ErrorCode_ERROR_CODE_OFFSET_OUT_OF_RANGE, -1},
		{"beyond the high watermark", "t", 0, 11, sharelogv1.ErrorCode_ERROR_CODE_OFFSET_OUT_OF_RANGE, -1},
		{"moves the log start", "t", 0, 4, none, 4},
		{"below the log start is a no-op", "t", 0, 2, none, 4},
		{"at the log start is a no-op", "t", 0, 4, none, 4},
		{"compact,delete is allowed", "both", 0, 1, none, 1},
		{"-1 means the high watermark", "both", 0, -1, none, 3},
		{"empty partition to 0", "t", 1, 0, none, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := purgeOne(t, s, tc.topic, tc.partition, tc.offset)
			assert.Equal(t, tc.code, res.GetErrorCode(), res.GetErrorMessage())
			assert.Equal(t, tc.lowWM, res.GetLowWatermark())
			assert.Equal(t, tc.partition, res.GetPartition())
			if tc.code != none {
				assert.NotEmpty(t, res.GetErrorMessage())
			}
		})
	}
	compacted, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "compacted"})
	require.NoError(t, err)
	assert.Zero(t, compacted.GetPartitions()[0].GetLogStartOffset(), "a refused purge changes nothing")
	tTopic, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "t"})
	require.NoError(t, err)
	assert.EqualValues(t, 4, tTopic.GetPartitions()[0].GetLogStartOffset(), "out-of-range purges did not move it")

	t.Run("duplicates and bad partitions do not fail the others", func(t *testing.T) {
		resp, err := s.log.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{
			{Topic: "t", Partitions: []*sharelogv1.PurgePartition{{Partition: 1, Offset: 0}, {Partition: 1, Offset: 0}, {Partition: 0, Offset: 6}, {Partition: 7, Offset: 1}}},
		}})
		require.NoError(t, err)
		parts := resp.GetTopics()[0].GetPartitions()
		require.Len(t, parts, 4)
		assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_INVALID_REQUEST, parts[0].GetErrorCode())
		assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_INVALID_REQUEST, parts[1].GetErrorCode())
		assert.Equal(t, none, parts[2].GetErrorCode())
		assert.EqualValues(t, 6, parts[2].GetLowWatermark())
		assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION, parts[3].GetErrorCode())
	})
	t.Run("negative timeout rejects the request", func(t *testing.T) {
		_, err := s.log.Purge(ctx, &sharelogv1.PurgeRequest{TimeoutMs: -1, Topics: []*sharelogv1.PurgeTopic{
			{Topic: "t", Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 8}}}}})
		requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")
		d, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "t"})
		require.NoError(t, err)
		assert.EqualValues(t, 6, d.GetPartitions()[0].GetLogStartOffset(), "nothing was purged")
	})
}

func TestReadersAfterPurge(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "t", 1, nil)
	p := int32(0)
	var recs []*sharelogv1.Record
	for i := range 10 {
		recs = append(recs, &sharelogv1.Record{Timestamp: int64(1000 * (i + 1)), Value: []byte{byte('a' + i)}})
	}
	_, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p, Records: recs})
	require.NoError(t, err)
	require.EqualValues(t, 7, purgeOne(t, s, "t", 0, 7).GetLowWatermark())

	_, err = s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: 6})
	info := requireReason(t, err, codes.OutOfRange, "OFFSET_OUT_OF_RANGE")
	assert.Equal(t, "7", info.GetMetadata()["log_start_offset"])

	f, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Offset: 7})
	require.NoError(t, err)
	require.Len(t, f.GetRecords(), 3)
	assert.EqualValues(t, 7, f.GetRecords()[0].GetOffset(), "the record at the log start stays readable")
	assert.EqualValues(t, 7, f.GetLogStartOffset())

	earliest, err := s.log.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "t", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST})
	require.NoError(t, err)
	assert.EqualValues(t, 7, earliest.GetOffset())
	latest, err := s.log.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "t", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
	require.NoError(t, err)
	assert.EqualValues(t, 10, latest.GetOffset(), "LATEST is unchanged")
	byTS, err := s.log.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "t", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, Timestamp: 2000})
	require.NoError(t, err)
	assert.EqualValues(t, 7, byTS.GetOffset(), "TIMESTAMP never answers below the log start")

	require.EqualValues(t, 10, purgeOne(t, s, "t", 0, -1).GetLowWatermark())
	byTS, err = s.log.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "t", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, Timestamp: 0})
	require.NoError(t, err)
	assert.EqualValues(t, -1, byTS.GetOffset(), "-1 when every matching record is purged")
	d, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "t"})
	require.NoError(t, err)
	assert.EqualValues(t, 10, d.GetPartitions()[0].GetLogStartOffset())
	assert.EqualValues(t, 10, d.GetPartitions()[0].GetHighWatermark())
}

// segmentFiles lists the .log files of a partition under the data dir.
func segmentFiles(t *testing.T, dataDir string, partition int) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".log") && filepath.Base(filepath.Dir(path)) == strconv.Itoa(partition) {
			out = append(out, filepath.Base(path))
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func TestPurgeReclaimsSegments(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "t", 1, &sharelogv1.TopicConfig{SegmentBytes: proto.Int64(1024)})
	for range 50 {
		s.produce(t, "t", 0, strings.Repeat("x", 200))
	}
	before, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "t"})
	require.NoError(t, err)
	segsBefore := before.GetPartitions()[0].GetSegmentCount()
	require.Greater(t, segsBefore, int32(5), "tiny segments roll")
	require.Len(t, segmentFiles(t, s.dataDir, 0), int(segsBefore))

	require.EqualValues(t, 50, purgeOne(t, s, "t", 0, -1).GetLowWatermark())
	require.Eventually(t, func() bool {
		return len(segmentFiles(t, s.dataDir, 0)) == 1
	}, 5*time.Second, 20*time.Millisecond, "every segment but the active one leaves the data dir")
	after, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "t"})
	require.NoError(t, err)
	assert.EqualValues(t, 1, after.GetPartitions()[0].GetSegmentCount(), "the active segment stays")
	assert.Less(t, after.GetPartitions()[0].GetSizeBytes(), before.GetPartitions()[0].GetSizeBytes())

	// Appends go on after the purge.
	res := s.produce(t, "t", 0, "after")
	assert.EqualValues(t, 50, res[0].GetOffset())
}

func TestRetentionUsesPurgeMachinery(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	ctx := context.Background()
	s.createTopic(t, "old", 1, &sharelogv1.TopicConfig{SegmentBytes: proto.Int64(1024), RetentionMs: proto.Int64(60000)})
	p := int32(0)
	hourAgo := time.Now().Add(-time.Hour).UnixMilli()
	for range 30 {
		_, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "old", Partition: &p,
			Records: []*sharelogv1.Record{{Timestamp: hourAgo, Value: []byte(strings.Repeat("y", 200))}}})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		d, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: "old"})
		require.NoError(t, err)
		part := d.GetPartitions()[0]
		return part.GetLogStartOffset() > 0 && part.GetSegmentCount() == 1
	}, 5*time.Second, 20*time.Millisecond, "records older than retention_ms leave, whole segments at a time")
	_, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "old", Offset: 0})
	requireReason(t, err, codes.OutOfRange, "OFFSET_OUT_OF_RANGE")
}

func TestRESTPurge(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	s.createTopic(t, "foo", 2, nil)
	s.produce(t, "foo", 1, "a", "b", "c")

	r := s.rest(t, http.MethodPost, "/v1/purge", `{"topics":[{"topic":"foo","partitions":[{"partition":1,"offset":"2"},{"partition":0,"offset":5},{"partition":9,"offset":0}]}]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	parts := r.Body["topics"].([]any)[0].(map[string]any)["partitions"].([]any)
	require.Len(t, parts, 3)
	assert.Equal(t, "2", parts[0].(map[string]any)["lowWatermark"])
	assert.Equal(t, "ERROR_CODE_NONE", parts[0].(map[string]any)["errorCode"])
	assert.Equal(t, "ERROR_CODE_OFFSET_OUT_OF_RANGE", parts[1].(map[string]any)["errorCode"])
	assert.Equal(t, "-1", parts[1].(map[string]any)["lowWatermark"])
	assert.Equal(t, "ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION", parts[2].(map[string]any)["errorCode"])

	requireRESTError(t, s.rest(t, http.MethodPost, "/v1/purge", `{"topics":[],"timeoutMs":-1}`), http.StatusBadRequest, "INVALID_REQUEST")
	requireRESTError(t, s.rest(t, http.MethodGet, "/v1/topics/foo/partitions/1/records?offset=1", ""), http.StatusBadRequest, "OFFSET_OUT_OF_RANGE")
	r = s.rest(t, http.MethodGet, "/v1/topics/foo/partitions/1/offsets?spec=OFFSET_SPEC_EARLIEST", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "2", r.Body["offset"])
}
