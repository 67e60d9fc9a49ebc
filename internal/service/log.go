package service

// LogService behaviour (api.md §3, purge.md §2):
//   - CreateTopic: name [a-zA-Z0-9._-]{1,249} not starting with "__", 1..10000
//     partitions, unset config fields take the server defaults.
//   - Produce: explicit partition, or murmur2(key) % partitions as Kafka's default
//     partitioner, keyless records round-robin; records of one partition are
//     appended atomically and contiguously; timestamp 0 = log append time.
//   - Fetch: offset within [log start, high watermark]; at the high watermark it
//     long-polls up to max_wait_ms, if a --max-long-polls slot is free
//     (otherwise it answers at once, empty).
//   - ListOffsets: EARLIEST, LATEST, TIMESTAMP (never below the log start).
//   - Purge: per-partition results; one bad partition never fails the others.

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/logstore"
)

// Limits that protect the server; each is reported with a clear message.
const (
	MaxProduceRecords = 10000            // records in one Produce call
	MaxFetchRecords   = 10000            // Fetch.max_records
	MaxFetchBytes     = 64 << 20         // Fetch.max_bytes
	MaxWait           = 60 * time.Second // Fetch.max_wait_ms
	DefaultMaxRecords = 500
	DefaultMaxBytes   = 1 << 20
)

// LogConfig holds the server defaults LogService applies.
type LogConfig struct {
	// SegmentBytes is the default segment size of new topics (--segment-bytes).
	SegmentBytes int64
	// OnTopicDeleted, if set, is told the id of every deleted topic, so that
	// state bound to it (share groups) goes with it.
	OnTopicDeleted func(topicID string)
	// LongPolls bounds the waiting Fetch calls (shared with ShareFetch);
	// nil = no bound.
	LongPolls *LongPolls
}

// LogService implements sharelogv1.LogServiceServer over a logstore.Store.
type LogService struct {
	sharelogv1.UnsafeLogServiceServer // compile error when an RPC is added

	store logstore.Store
	log   *slog.Logger
	cfg   LogConfig
	now   func() time.Time

	roundRobin sync.Map // topic name → *atomic.Uint32, for keyless records
}

// NewLogService returns the LogService handlers.
func NewLogService(store logstore.Store, cfg LogConfig, log *slog.Logger) *LogService {
	if log == nil {
		log = slog.Default()
	}
	return &LogService{store: store, log: log, cfg: cfg, now: time.Now}
}

func (s *LogService) CreateTopic(ctx context.Context, req *sharelogv1.CreateTopicRequest) (*sharelogv1.Topic, error) {
	if req.GetName() == "" {
		return nil, toStatus(ctx, s.log, invalid("name is required"))
	}
	if req.GetPartitions() < 1 || req.GetPartitions() > 10000 {
		return nil, toStatus(ctx, s.log, invalid("partitions must be between 1 and 10000, got %d", req.GetPartitions()))
	}
	cfg := logstore.TopicConfig{SegmentBytes: s.cfg.SegmentBytes, RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete}
	if c := req.GetConfig(); c != nil {
		if c.SegmentBytes != nil {
			cfg.SegmentBytes = c.GetSegmentBytes()
		}
		if c.RetentionMs != nil {
			cfg.RetentionMs = c.GetRetentionMs()
		}
		if c.CleanupPolicy != nil {
			cfg.CleanupPolicy = c.GetCleanupPolicy()
		}
		if c.DeleteRetentionMs != nil {
			cfg.DeleteRetentionMs = c.GetDeleteRetentionMs()
		}
		if c.MinCleanableDirtyRatio != nil {
			cfg.MinCleanableDirtyRatio = c.GetMinCleanableDirtyRatio()
		}
	}
	if _, err := s.store.CreateTopic(ctx, req.GetName(), req.GetPartitions(), cfg); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return s.describe(ctx, req.GetName())
}

func (s *LogService) DeleteTopic(ctx context.Context, req *sharelogv1.DeleteTopicRequest) (*sharelogv1.DeleteTopicResponse, error) {
	if req.GetName() == "" {
		return nil, toStatus(ctx, s.log, invalid("name is required"))
	}
	info, err := s.store.TopicInfo(ctx, req.GetName())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if err := s.store.DeleteTopic(ctx, req.GetName()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if s.cfg.OnTopicDeleted != nil {
		s.cfg.OnTopicDeleted(info.ID)
	}
	s.roundRobin.Delete(req.GetName())
	return &sharelogv1.DeleteTopicResponse{}, nil
}

func (s *LogService) ListTopics(ctx context.Context, _ *sharelogv1.ListTopicsRequest) (*sharelogv1.ListTopicsResponse, error) {
	topics, err := s.store.Topics(ctx)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp := &sharelogv1.ListTopicsResponse{Topics: make([]*sharelogv1.Topic, 0, len(topics))}
	for _, t := range topics {
		// A topic deleted between the listing and its description is left out.
		info, parts, err := s.store.Topic(ctx, t.Name)
		if err != nil {
			continue
		}
		resp.Topics = append(resp.Topics, topicToProto(info, parts))
	}
	return resp, nil
}

func (s *LogService) DescribeTopic(ctx context.Context, req *sharelogv1.DescribeTopicRequest) (*sharelogv1.Topic, error) {
	if req.GetName() == "" {
		return nil, toStatus(ctx, s.log, invalid("name is required"))
	}
	return s.describe(ctx, req.GetName())
}

func (s *LogService) describe(ctx context.Context, name string) (*sharelogv1.Topic, error) {
	info, parts, err := s.store.Topic(ctx, name)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return topicToProto(info, parts), nil
}

func topicToProto(info logstore.TopicInfo, parts []logstore.PartitionInfo) *sharelogv1.Topic {
	// The compaction settings of a topic that does not compact are stored
	// unset; responses show the defaults they would take.
	deleteRetention := cmp.Or(info.Config.DeleteRetentionMs, logstore.DefaultDeleteRetentionMs)
	dirtyRatio := cmp.Or(info.Config.MinCleanableDirtyRatio, logstore.DefaultMinCleanableDirtyRatio)
	t := &sharelogv1.Topic{
		Name:    info.Name,
		TopicId: info.ID,
		Config: &sharelogv1.TopicConfig{
			SegmentBytes:           &info.Config.SegmentBytes,
			RetentionMs:            &info.Config.RetentionMs,
			CleanupPolicy:          &info.Config.CleanupPolicy,
			DeleteRetentionMs:      &deleteRetention,
			MinCleanableDirtyRatio: &dirtyRatio,
		},
		PartitionCount: info.Partitions,
		Partitions:     make([]*sharelogv1.TopicPartition, len(parts)),
	}
	for i, p := range parts {
		t.Partitions[i] = &sharelogv1.TopicPartition{
			Partition:      p.Partition,
			LogStartOffset: p.LogStartOffset,
			HighWatermark:  p.HighWatermark,
			SizeBytes:      p.SizeBytes,
			SegmentCount:   p.SegmentCount,
		}
		if p.Err != nil {
			// The path and cause are in the server log; clients get the code.
			t.Partitions[i].ErrorCode = sharelogv1.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR
			t.Partitions[i].ErrorMessage = "partition offline: its files failed validation at start (the server log names the file)"
		}
	}
	return t
}

func (s *LogService) Produce(ctx context.Context, req *sharelogv1.ProduceRequest) (*sharelogv1.ProduceResponse, error) {
	if req.GetTopic() == "" {
		return nil, toStatus(ctx, s.log, invalid("topic is required"))
	}
	n := len(req.GetRecords())
	if n == 0 {
		return nil, toStatus(ctx, s.log, invalid("records must not be empty"))
	}
	if n > MaxProduceRecords {
		return nil, toStatus(ctx, s.log, invalid("%d records in one call; the limit is %d", n, MaxProduceRecords))
	}
	info, err := s.store.TopicInfo(ctx, req.GetTopic())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	if req.Partition != nil && (req.GetPartition() < 0 || req.GetPartition() >= info.Partitions) {
		return nil, toStatus(ctx, s.log, unknownTopic(req.GetTopic(), req.GetPartition()))
	}
	now := s.now().UnixMilli()

	// Route every record, then append each partition's records as one batch.
	parts := make([]int32, n)
	byPartition := map[int32][]logstore.Record{}
	for i, r := range req.GetRecords() {
		if r.GetTimestamp() < 0 {
			return nil, toStatus(ctx, s.log, invalid("records[%d].timestamp must not be negative", i))
		}
		p := req.GetPartition()
		if req.Partition == nil {
			p = s.route(info, r.Key)
		}
		parts[i] = p
		ts := r.GetTimestamp()
		if ts == 0 {
			ts = now
		}
		byPartition[p] = append(byPartition[p], logstore.Record{
			Timestamp: ts, Key: r.Key, Value: r.Value, Headers: headersFromProto(r.GetHeaders()),
		})
	}
	bases, err := s.appendAll(ctx, req.GetTopic(), byPartition)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp := &sharelogv1.ProduceResponse{Results: make([]*sharelogv1.ProduceResult, n), LogAppendTime: now}
	for i, p := range parts {
		resp.Results[i] = &sharelogv1.ProduceResult{Partition: p, Offset: bases[p]}
		bases[p]++
	}
	return resp, nil
}

// appendAll appends each partition's batch, concurrently when there are several
// so that their fsyncs overlap, and returns each batch's base offset.
func (s *LogService) appendAll(ctx context.Context, topic string, batches map[int32][]logstore.Record) (map[int32]int64, error) {
	bases := make(map[int32]int64, len(batches))
	if len(batches) == 1 {
		for p, recs := range batches {
			base, err := s.store.Append(ctx, topic, p, recs)
			if err != nil {
				return nil, err
			}
			bases[p] = base
		}
		return bases, nil
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	for p, recs := range batches {
		wg.Go(func() {
			base, err := s.store.Append(ctx, topic, p, recs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			bases[p] = base
		})
	}
	wg.Wait()
	return bases, firstErr
}

// route picks the partition of a record sent without one: murmur2 of the key
// as Kafka's default partitioner, or round-robin for keyless records.
func (s *LogService) route(info logstore.TopicInfo, key []byte) int32 {
	if key != nil {
		return int32(toPositive(murmur2(key)) % uint32(info.Partitions))
	}
	c, _ := s.roundRobin.LoadOrStore(info.Name, new(atomic.Uint32))
	return int32((c.(*atomic.Uint32).Add(1) - 1) % uint32(info.Partitions))
}

func (s *LogService) Fetch(ctx context.Context, req *sharelogv1.FetchRequest) (*sharelogv1.FetchResponse, error) {
	maxRecords, maxBytes, wait, err := fetchLimits(req)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	topic, part := req.GetTopic(), req.GetPartition()
	var deadline <-chan time.Time
	for {
		// Subscribe before reading the bounds so that no append is missed.
		changed, err := s.store.Watch(topic, part)
		if err != nil {
			return nil, toStatus(ctx, s.log, s.partitionErr(err, topic, part))
		}
		logStart, hw, err := s.store.Bounds(topic, part)
		if err != nil {
			return nil, toStatus(ctx, s.log, s.partitionErr(err, topic, part))
		}
		if req.GetOffset() < logStart || req.GetOffset() > hw {
			return nil, toStatus(ctx, s.log, outOfRange(req.GetOffset(), logStart, hw))
		}
		if req.GetOffset() < hw || wait == 0 {
			recs, err := s.store.Read(ctx, topic, part, req.GetOffset(), maxRecords, maxBytes)
			if err != nil {
				return nil, toStatus(ctx, s.log, s.readErr(err, topic, part, req.GetOffset()))
			}
			return &sharelogv1.FetchResponse{Records: recordsToProto(recs), HighWatermark: hw, LogStartOffset: logStart}, nil
		}
		if deadline == nil {
			if !s.cfg.LongPolls.TryAcquire() {
				wait = 0 // every long-poll slot is taken: answer now
				continue
			}
			defer s.cfg.LongPolls.Release()
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-changed:
		case <-deadline:
			wait = 0 // one last look, then answer empty
		case <-ctx.Done():
			return nil, toStatus(ctx, s.log, ctx.Err())
		}
	}
}

func fetchLimits(req *sharelogv1.FetchRequest) (maxRecords, maxBytes int, wait time.Duration, err error) {
	switch {
	case req.GetTopic() == "":
		return 0, 0, 0, invalid("topic is required")
	case req.GetPartition() < 0:
		return 0, 0, 0, invalid("partition must not be negative, got %d", req.GetPartition())
	case req.GetMaxRecords() < 0 || req.GetMaxRecords() > MaxFetchRecords:
		return 0, 0, 0, invalid("max_records must be between 0 and %d, got %d", MaxFetchRecords, req.GetMaxRecords())
	case req.GetMaxBytes() < 0 || req.GetMaxBytes() > MaxFetchBytes:
		return 0, 0, 0, invalid("max_bytes must be between 0 and %d, got %d", MaxFetchBytes, req.GetMaxBytes())
	case req.GetMaxWaitMs() < 0 || time.Duration(req.GetMaxWaitMs())*time.Millisecond > MaxWait:
		return 0, 0, 0, invalid("max_wait_ms must be between 0 and %d, got %d", MaxWait.Milliseconds(), req.GetMaxWaitMs())
	}
	maxRecords, maxBytes = int(req.GetMaxRecords()), int(req.GetMaxBytes())
	if maxRecords == 0 {
		maxRecords = DefaultMaxRecords
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	return maxRecords, maxBytes, time.Duration(req.GetMaxWaitMs()) * time.Millisecond, nil
}

// partitionErr gives an unknown partition a message naming it.
func (s *LogService) partitionErr(err error, topic string, partition int32) error {
	if isUnknown(err) {
		return unknownTopic(topic, partition)
	}
	return err
}

// readErr re-reads the bounds when a read raced with a purge, so that the
// error carries the current log start offset.
func (s *LogService) readErr(err error, topic string, partition int32, offset int64) error {
	if isOutOfRange(err) {
		if logStart, hw, berr := s.store.Bounds(topic, partition); berr == nil {
			return outOfRange(offset, logStart, hw)
		}
	}
	return s.partitionErr(err, topic, partition)
}

func (s *LogService) ListOffsets(ctx context.Context, req *sharelogv1.ListOffsetsRequest) (*sharelogv1.ListOffsetsResponse, error) {
	switch {
	case req.GetTopic() == "":
		return nil, toStatus(ctx, s.log, invalid("topic is required"))
	case req.GetPartition() < 0:
		return nil, toStatus(ctx, s.log, invalid("partition must not be negative, got %d", req.GetPartition()))
	}
	topic, part := req.GetTopic(), req.GetPartition()
	switch req.GetSpec() {
	case sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST, sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST:
		logStart, hw, err := s.store.Bounds(topic, part)
		if err != nil {
			return nil, toStatus(ctx, s.log, s.partitionErr(err, topic, part))
		}
		off := logStart
		if req.GetSpec() == sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST {
			off = hw
		}
		return &sharelogv1.ListOffsetsResponse{Offset: off, Timestamp: -1}, nil
	case sharelogv1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
		if req.GetTimestamp() < 0 {
			return nil, toStatus(ctx, s.log, invalid("timestamp must not be negative, got %d", req.GetTimestamp()))
		}
		off, ts, err := s.store.OffsetForTimestamp(ctx, topic, part, req.GetTimestamp())
		if err != nil {
			return nil, toStatus(ctx, s.log, s.partitionErr(err, topic, part))
		}
		return &sharelogv1.ListOffsetsResponse{Offset: off, Timestamp: ts}, nil
	default:
		return nil, toStatus(ctx, s.log, invalid("spec must be OFFSET_SPEC_EARLIEST, OFFSET_SPEC_LATEST or OFFSET_SPEC_TIMESTAMP, got %v", req.GetSpec()))
	}
}

func headersFromProto(hs []*sharelogv1.RecordHeader) []logstore.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]logstore.Header, len(hs))
	for i, h := range hs {
		out[i] = logstore.Header{Key: h.GetKey(), Value: h.GetValue()}
	}
	return out
}

func headersToProto(hs []logstore.Header) []*sharelogv1.RecordHeader {
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
func recordsToProto(recs []logstore.Record) []*sharelogv1.Record {
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

func isUnknown(err error) bool    { return errors.Is(err, logstore.ErrUnknownTopic) }
func isOutOfRange(err error) bool { return errors.Is(err, logstore.ErrOffsetOutOfRange) }
