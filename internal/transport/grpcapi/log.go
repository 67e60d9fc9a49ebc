package grpcapi

// LogService translates the log API's messages to internal/broker, which
// holds its rules (routing, appends, the Fetch long-poll, purge), and back.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"
	"unicode/utf8"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// LogService implements sharelogv1.LogServiceServer over a broker.Log.
type LogService struct {
	sharelogv1.UnsafeLogServiceServer // compile error when an RPC is added

	log   *broker.Log
	guard *authz.Guard

	cluster ClusterSource            // DescribeCluster's view (WithCluster)
	groups  func() ([]string, error) // the share groups' IDs
}

// NewLogService returns the LogService handlers, checking permissions with
// guard (nil = none).
func NewLogService(log *broker.Log, guard *authz.Guard) *LogService {
	return &LogService{log: log, guard: guard}
}

// CreateTopic needs CREATE on the cluster or on the topic name.
func (s *LogService) CreateTopic(ctx context.Context, req *sharelogv1.CreateTopicRequest) (*sharelogv1.Topic, error) {
	if !s.guard.Allowed(ctx, authz.Create, authz.Cluster, authz.ClusterName) {
		if err := s.guard.Require(ctx, authz.Create, authz.Topic, req.GetName()); err != nil {
			return nil, err
		}
	}
	t, err := s.log.CreateTopic(ctx, req.GetName(), req.GetPartitions(), SettingsFromProto(req.GetConfig()))
	s.guard.Changed(ctx, "CreateTopic", authz.Topic, req.GetName(), err, slog.Int("partitions", int(req.GetPartitions())))
	if err != nil {
		return nil, err
	}
	return topicToProto(t), nil
}

// SettingsFromProto is a CreateTopic config as broker settings: every field
// set is a setting (an override), the others take the server defaults.
func SettingsFromProto(c *sharelogv1.TopicConfig) broker.TopicSettings {
	if c == nil {
		return broker.TopicSettings{}
	}
	return broker.TopicSettings{SegmentBytes: c.SegmentBytes, RetentionMs: c.RetentionMs, CleanupPolicy: c.CleanupPolicy,
		DeleteRetentionMs: c.DeleteRetentionMs, MinCleanableDirtyRatio: c.MinCleanableDirtyRatio,
		RetentionBytes: c.RetentionBytes, SegmentMs: c.SegmentMs, MaxMessageBytes: c.MaxMessageBytes,
		CompressionType: c.CompressionType, MessageTimestampType: c.MessageTimestampType,
		MinInsyncReplicas: c.MinInsyncReplicas}
}

// SettingsToProto is SettingsFromProto reversed: a creation passed on to
// the controller.
func SettingsToProto(s broker.TopicSettings) *sharelogv1.TopicConfig {
	return &sharelogv1.TopicConfig{SegmentBytes: s.SegmentBytes, RetentionMs: s.RetentionMs, CleanupPolicy: s.CleanupPolicy,
		DeleteRetentionMs: s.DeleteRetentionMs, MinCleanableDirtyRatio: s.MinCleanableDirtyRatio,
		RetentionBytes: s.RetentionBytes, SegmentMs: s.SegmentMs, MaxMessageBytes: s.MaxMessageBytes,
		CompressionType: s.CompressionType, MessageTimestampType: s.MessageTimestampType,
		MinInsyncReplicas: s.MinInsyncReplicas}
}

// CreatePartitions needs ALTER on the topic, checked before its existence,
// as Kafka's CreatePartitions.
func (s *LogService) CreatePartitions(ctx context.Context, req *sharelogv1.CreatePartitionsRequest) (*sharelogv1.CreatePartitionsResponse, error) {
	if err := s.guard.Require(ctx, authz.Alter, authz.Topic, req.GetTopic()); err != nil {
		return nil, err
	}
	info, err := s.log.CreatePartitions(ctx, req.GetTopic(), req.GetCount(), req.GetValidateOnly())
	if !req.GetValidateOnly() {
		s.guard.Changed(ctx, "CreatePartitions", authz.Topic, req.GetTopic(), err, slog.Int("count", int(req.GetCount())))
	}
	if err != nil {
		return nil, err
	}
	if req.GetValidateOnly() {
		return &sharelogv1.CreatePartitionsResponse{Topic: topicToProto(broker.Topic{Info: info})}, nil
	}
	t, err := s.log.DescribeTopic(ctx, req.GetTopic())
	if err != nil {
		return nil, err
	}
	return &sharelogv1.CreatePartitionsResponse{Topic: topicToProto(t)}, nil
}

// DeleteTopic needs DELETE on the topic, checked before its existence.
func (s *LogService) DeleteTopic(ctx context.Context, req *sharelogv1.DeleteTopicRequest) (*sharelogv1.DeleteTopicResponse, error) {
	if err := s.guard.Require(ctx, authz.Delete, authz.Topic, req.GetName()); err != nil {
		return nil, err
	}
	err := s.log.DeleteTopic(ctx, req.GetName())
	s.guard.Changed(ctx, "DeleteTopic", authz.Topic, req.GetName(), err)
	if err != nil {
		return nil, err
	}
	return &sharelogv1.DeleteTopicResponse{}, nil
}

func (s *LogService) ListTopics(ctx context.Context, _ *sharelogv1.ListTopicsRequest) (*sharelogv1.ListTopicsResponse, error) {
	topics, err := s.log.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	// Topics the caller may not DESCRIBE are left out, silently.
	resp := &sharelogv1.ListTopicsResponse{Topics: make([]*sharelogv1.Topic, 0, len(topics))}
	for _, t := range topics {
		if s.guard.Allowed(ctx, authz.Describe, authz.Topic, t.Info.Name) {
			resp.Topics = append(resp.Topics, topicToProto(t))
		}
	}
	return resp, nil
}

func (s *LogService) DescribeTopic(ctx context.Context, req *sharelogv1.DescribeTopicRequest) (*sharelogv1.Topic, error) {
	if err := s.guard.Require(ctx, authz.Describe, authz.Topic, req.GetName()); err != nil {
		return nil, err
	}
	t, err := s.log.DescribeTopic(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return topicToProto(t), nil
}

func topicToProto(t broker.Topic) *sharelogv1.Topic {
	info := t.Info
	// The compaction settings of a topic that does not compact are stored
	// unset; responses show the defaults they would take.
	cfg := broker.EffectiveConfig(info.Config)
	retentionBytes := cfg.RetentionBytes
	if retentionBytes <= 0 {
		retentionBytes = -1 // no size limit, as Kafka spells it
	}
	out := &sharelogv1.Topic{
		Name:    info.Name,
		TopicId: info.ID,
		Config: &sharelogv1.TopicConfig{
			SegmentBytes:           &cfg.SegmentBytes,
			RetentionMs:            &cfg.RetentionMs,
			CleanupPolicy:          &cfg.CleanupPolicy,
			DeleteRetentionMs:      &cfg.DeleteRetentionMs,
			MinCleanableDirtyRatio: &cfg.MinCleanableDirtyRatio,
			RetentionBytes:         &retentionBytes,
			SegmentMs:              &cfg.SegmentMs,
			MaxMessageBytes:        &cfg.MaxMessageBytes,
			CompressionType:        &cfg.CompressionType,
			MessageTimestampType:   &cfg.MessageTimestampType,
			MinInsyncReplicas:      &cfg.MinInsyncReplicas,
			Overrides:              cfg.Overrides,
		},
		PartitionCount: info.Partitions,
		Partitions:     make([]*sharelogv1.TopicPartition, len(t.Partitions)),
	}
	for i, p := range t.Partitions {
		out.Partitions[i] = &sharelogv1.TopicPartition{
			Partition:      p.Partition,
			LogStartOffset: p.LogStartOffset,
			HighWatermark:  p.HighWatermark,
			SizeBytes:      p.SizeBytes,
			SegmentCount:   p.SegmentCount,
		}
		if p.Err != nil {
			// The path and cause are in the server log; clients get the code.
			out.Partitions[i].ErrorCode = sharelogv1.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR
			out.Partitions[i].ErrorMessage = "partition offline: its files failed validation at start (the server log names the file)"
		}
	}
	return out
}

// TopicFromProto is topicToProto reversed, for a topic another instance
// described (the controller answering CreateTopic): converting it back
// gives the same message. An offline partition's Err wraps
// broker.ErrOffline with the message the instance sent.
func TopicFromProto(t *sharelogv1.Topic) broker.Topic {
	c := t.GetConfig()
	out := broker.Topic{
		Info: broker.TopicInfo{Name: t.GetName(), ID: t.GetTopicId(), Partitions: t.GetPartitionCount(), Config: broker.TopicConfig{
			SegmentBytes: c.GetSegmentBytes(), RetentionMs: c.GetRetentionMs(), CleanupPolicy: c.GetCleanupPolicy(),
			DeleteRetentionMs: c.GetDeleteRetentionMs(), MinCleanableDirtyRatio: c.GetMinCleanableDirtyRatio(),
			RetentionBytes: max(c.GetRetentionBytes(), 0), SegmentMs: c.GetSegmentMs(), MaxMessageBytes: c.GetMaxMessageBytes(),
			CompressionType: c.GetCompressionType(), MessageTimestampType: c.GetMessageTimestampType(),
			MinInsyncReplicas: c.GetMinInsyncReplicas(), Overrides: c.GetOverrides()}},
		Partitions: make([]broker.PartitionInfo, len(t.GetPartitions())),
	}
	for i, p := range t.GetPartitions() {
		out.Partitions[i] = broker.PartitionInfo{Partition: p.GetPartition(), LogStartOffset: p.GetLogStartOffset(),
			HighWatermark: p.GetHighWatermark(), SizeBytes: p.GetSizeBytes(), SegmentCount: p.GetSegmentCount()}
		if p.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
			out.Partitions[i].Err = fmt.Errorf("%s: %w", p.GetErrorMessage(), broker.ErrOffline)
		}
	}
	return out
}

func (s *LogService) Produce(ctx context.Context, req *sharelogv1.ProduceRequest) (*sharelogv1.ProduceResponse, error) {
	if err := s.guard.Require(ctx, authz.Write, authz.Topic, req.GetTopic()); err != nil {
		return nil, err
	}
	recs := make([]broker.Record, len(req.GetRecords()))
	for i, r := range req.GetRecords() {
		key, value, err := recordBytes(i, r)
		if err != nil {
			return nil, err
		}
		recs[i] = broker.Record{Timestamp: r.GetTimestamp(), Key: key, Value: value, Headers: headersFromProto(r.GetHeaders())}
	}
	var res broker.Produced
	var err error
	switch {
	case req.GetProducerId() != 0:
		if e := req.GetProducerEpoch(); e < 0 || e > math.MaxInt16 {
			return nil, apierr.Invalid("producer_epoch must be between 0 and %d, got %d", math.MaxInt16, e)
		}
		res, err = s.log.ProduceIdempotent(ctx, req.GetTopic(), req.Partition, recs, broker.Idempotence{
			ProducerID: req.GetProducerId(), ProducerEpoch: int16(req.GetProducerEpoch()), BaseSequence: req.GetBaseSequence()})
	case req.GetProducerEpoch() != 0 || len(req.GetBaseSequence()) > 0:
		return nil, apierr.Invalid("producer_epoch and base_sequence need producer_id (from InitProducer)")
	default:
		res, err = s.log.Produce(ctx, req.GetTopic(), req.Partition, recs)
	}
	if err != nil {
		return nil, err
	}
	resp := &sharelogv1.ProduceResponse{Results: make([]*sharelogv1.ProduceResult, len(recs)), LogAppendTime: res.LogAppendTime}
	for i := range recs {
		r := &sharelogv1.ProduceResult{Partition: res.Partitions[i], Offset: res.Offsets[i]}
		if res.Errors != nil && res.Errors[i] != nil {
			r.ErrorCode = codeToProto(res.Errors[i].Reason)
			r.ErrorMessage = res.Errors[i].Message
		}
		resp.Results[i] = r
	}
	return resp, nil
}

// InitProducer needs WRITE on at least one topic, as Kafka's (3.0+)
// InitProducerId without a transactional id (docs/security.md): the Kafka
// listener's InitProducerID asks the same, and every Produce with the id
// is checked for WRITE on its topic.
func (s *LogService) InitProducer(ctx context.Context, _ *sharelogv1.InitProducerRequest) (*sharelogv1.InitProducerResponse, error) {
	if err := s.guard.RequireOnAny(ctx, authz.Write, authz.Topic); err != nil {
		return nil, err
	}
	id, epoch, err := s.log.InitProducer(ctx)
	if err != nil {
		return nil, err
	}
	return &sharelogv1.InitProducerResponse{ProducerId: id, ProducerEpoch: int32(epoch)}, nil
}

func (s *LogService) Fetch(ctx context.Context, req *sharelogv1.FetchRequest) (*sharelogv1.FetchResponse, error) {
	if err := s.guard.Require(ctx, authz.Read, authz.Topic, req.GetTopic()); err != nil {
		return nil, err
	}
	committed, err := readCommitted(req.GetIsolationLevel())
	if err != nil {
		return nil, err
	}
	text, err := textEncoding(req.GetEncoding())
	if err != nil {
		return nil, err
	}
	res, err := s.log.Fetch(ctx, broker.FetchRequest{
		Topic:         req.GetTopic(),
		Partition:     req.GetPartition(),
		Offset:        req.GetOffset(),
		MaxRecords:    req.GetMaxRecords(),
		MaxBytes:      req.GetMaxBytes(),
		MaxWait:       time.Duration(req.GetMaxWaitMs()) * time.Millisecond,
		ReadCommitted: committed,
	})
	if err != nil {
		return nil, err
	}
	out := &sharelogv1.FetchResponse{Records: recordsToProto(res.Records), HighWatermark: res.HighWatermark, LogStartOffset: res.LogStartOffset}
	if text {
		asText(out.Records)
	}
	if committed {
		out.LastStableOffset = &res.LastStableOffset
	}
	return out, nil
}

// ListOffsets needs DESCRIBE on the topic, as Kafka's ListOffsets.
func (s *LogService) ListOffsets(ctx context.Context, req *sharelogv1.ListOffsetsRequest) (*sharelogv1.ListOffsetsResponse, error) {
	if err := s.guard.Require(ctx, authz.Describe, authz.Topic, req.GetTopic()); err != nil {
		return nil, err
	}
	var spec broker.OffsetSpec
	switch req.GetSpec() {
	case sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST:
		spec = broker.Earliest
	case sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST:
		spec = broker.Latest
	case sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
		spec = broker.ByTimestamp
	}
	if spec == 0 && req.GetTopic() != "" && req.GetPartition() >= 0 {
		return nil, apierr.Invalid("spec must be OFFSET_SPEC_EARLIEST, OFFSET_SPEC_LATEST or OFFSET_SPEC_TIMESTAMP, got %v", req.GetSpec())
	}
	off, ts, err := s.log.ListOffsets(ctx, req.GetTopic(), req.GetPartition(), spec, req.GetTimestamp())
	if err != nil {
		return nil, err
	}
	return &sharelogv1.ListOffsetsResponse{Offset: off, Timestamp: ts}, nil
}

func headersFromProto(hs []*sharelogv1.RecordHeader) []broker.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]broker.Header, len(hs))
	for i, h := range hs {
		out[i] = broker.Header{Key: h.GetKey(), Value: h.GetValue()}
	}
	return out
}

func headersToProto(hs []broker.Header) []*sharelogv1.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*sharelogv1.RecordHeader, len(hs))
	for i, h := range hs {
		out[i] = &sharelogv1.RecordHeader{Key: h.Key, Value: h.Value}
	}
	return out
}

// recordsToProto converts records; one backing array holds all messages.
func recordsToProto(recs []broker.Record) []*sharelogv1.Record {
	out := make([]*sharelogv1.Record, len(recs))
	backing := make([]sharelogv1.Record, len(recs))
	for i := range recs {
		r := &recs[i]
		m := &backing[i]
		m.Offset, m.Timestamp, m.Key, m.Value = r.Offset, r.Timestamp, r.Key, r.Value
		m.Headers = headersToProto(r.Headers)
		out[i] = m
	}
	return out
}

// recordBytes is the key and value of the i-th record of a Produce: `key` or
// `key_text` (at most one), `value` or `value_text` (at most one; neither is
// a tombstone). The text fields are the UTF-8 bytes of their string (a string
// field is valid UTF-8 by the protobuf rules).
func recordBytes(i int, r *sharelogv1.Record) (key, value []byte, err error) {
	key, value = r.Key, r.Value
	if r.KeyText != nil {
		if r.Key != nil {
			return nil, nil, apierr.Invalid("records[%d]: key and key_text are both set: send one (key_text for UTF-8 text, key for base64 bytes)", i)
		}
		key = []byte(*r.KeyText)
	}
	if r.ValueText != nil {
		if r.Value != nil {
			return nil, nil, apierr.Invalid("records[%d]: value and value_text are both set: send one (value_text for UTF-8 text, value for base64 bytes)", i)
		}
		value = []byte(*r.ValueText)
	}
	return key, value, nil
}

// textEncoding reads a Fetch's encoding: "" and "bytes" keep the bytes
// fields, "text" asks for key_text and value_text.
func textEncoding(e string) (bool, error) {
	switch e {
	case "", "bytes":
		return false, nil
	case "text":
		return true, nil
	}
	return false, apierr.Invalid(`encoding must be "bytes" (the default) or "text", got %q`, e)
}

// asText moves each record's key and value that are valid UTF-8 to key_text
// and value_text; the others stay bytes (base64 in JSON).
func asText(recs []*sharelogv1.Record) {
	for _, r := range recs {
		if r.Key != nil && utf8.Valid(r.Key) {
			t := string(r.Key)
			r.KeyText, r.Key = &t, nil
		}
		if r.Value != nil && utf8.Valid(r.Value) {
			t := string(r.Value)
			r.ValueText, r.Value = &t, nil
		}
	}
}

// readCommitted reads a Fetch's isolation_level (docs/kafka.md
// "Transactions").
func readCommitted(l sharelogv1.IsolationLevel) (bool, error) {
	switch l {
	case sharelogv1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED, sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED:
		return false, nil
	case sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED:
		return true, nil
	}
	return false, apierr.Invalid("isolation_level must be ISOLATION_LEVEL_READ_UNCOMMITTED or ISOLATION_LEVEL_READ_COMMITTED, got %v", l)
}
