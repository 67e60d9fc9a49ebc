package logstore

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Limits shared by every Store implementation in this package. The service
// may use them to validate requests before they reach the store; the store
// checks them again.
const (
	// MaxTopicNameLen is the longest topic name.
	MaxTopicNameLen = 249
	// MaxPartitions is the largest partition count of a topic.
	MaxPartitions = 10000
	// MinSegmentBytes is the smallest accepted TopicConfig.SegmentBytes. It is
	// tiny on purpose so tests can roll segments every few records.
	MinSegmentBytes = 1024
	// MaxSegmentBytes is the largest accepted TopicConfig.SegmentBytes. Index
	// entries store file positions as u32, so a segment (at most this plus one
	// append batch) must stay below 4 GiB.
	MaxSegmentBytes = 1 << 30
	// DefaultSegmentBytes replaces a zero TopicConfig.SegmentBytes.
	DefaultSegmentBytes = 64 << 20
	// MaxRecordBytes caps the encoded size of one record (its frame). Lengths
	// read from disk are checked against it before anything is allocated.
	MaxRecordBytes = 64 << 20
	// MaxBatchBytes caps the encoded size of one Append call.
	MaxBatchBytes = 512 << 20
	// DefaultDeleteRetentionMs replaces a zero TopicConfig.DeleteRetentionMs
	// (one day, as Kafka's delete.retention.ms).
	DefaultDeleteRetentionMs = 86400000
	// DefaultMinCleanableDirtyRatio replaces a zero
	// TopicConfig.MinCleanableDirtyRatio (Kafka's min.cleanable.dirty.ratio).
	DefaultMinCleanableDirtyRatio = 0.5
	// DefaultSegmentMs replaces a zero TopicConfig.SegmentMs (seven days,
	// as Kafka's segment.ms).
	DefaultSegmentMs = 7 * 24 * 60 * 60 * 1000
	// DefaultMaxMessageBytes replaces a zero TopicConfig.MaxMessageBytes:
	// the largest record the log stores (MaxRecordBytes), so that the
	// default refuses nothing the log would take. Kafka's default is
	// 1048588.
	DefaultMaxMessageBytes = MaxRecordBytes
	// MaxMaxMessageBytes bounds TopicConfig.MaxMessageBytes (Kafka's int).
	MaxMaxMessageBytes = 1<<31 - 1
)

// TopicConfig.CompressionType values: Kafka's compression.type.
const (
	CompressionProducer     = "producer"
	CompressionUncompressed = "uncompressed"
	CompressionGzip         = "gzip"
	CompressionSnappy       = "snappy"
	CompressionLz4          = "lz4"
	CompressionZstd         = "zstd"
)

// CompressionTypes lists the accepted TopicConfig.CompressionType values.
func CompressionTypes() []string {
	return []string{CompressionProducer, CompressionUncompressed, CompressionGzip, CompressionSnappy, CompressionLz4, CompressionZstd}
}

// TopicConfig.MessageTimestampType values: Kafka's message.timestamp.type.
const (
	TimestampCreateTime    = "CreateTime"
	TimestampLogAppendTime = "LogAppendTime"
)

// validTopicName reports why name is not a valid topic name, or "" if it is.
func validTopicName(name string) string {
	switch {
	case name == "":
		return "topic name is empty"
	case len(name) > MaxTopicNameLen:
		return fmt.Sprintf("topic name is %d characters long, the limit is %d", len(name), MaxTopicNameLen)
	case name == "." || name == "..":
		return fmt.Sprintf("topic name %q is not allowed", name)
	case len(name) >= 2 && name[:2] == "__":
		return fmt.Sprintf("topic name %q starts with \"__\", which is reserved", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("topic name %q contains %q; allowed are [a-zA-Z0-9._-]", name, c)
		}
	}
	return ""
}

// normalizeTopic validates a CreateTopic request and returns the config with
// defaults filled in (see NormalizeTopicConfig). Errors wrap ErrInvalidArgument.
func normalizeTopic(name string, partitions int32, cfg TopicConfig) (TopicConfig, error) {
	if err := ValidateTopicName(name); err != nil {
		return cfg, err
	}
	if partitions < 1 || partitions > MaxPartitions {
		return cfg, fmt.Errorf("%w: partitions is %d, must be in [1, %d]", ErrInvalidArgument, partitions, MaxPartitions)
	}
	return NormalizeTopicConfig(cfg)
}

// ValidateTopicName reports why name is not a valid topic name (wrapping
// ErrInvalidArgument), or nil if it is.
func ValidateTopicName(name string) error {
	if msg := validTopicName(name); msg != "" {
		return fmt.Errorf("%w: %s", ErrInvalidArgument, msg)
	}
	return nil
}

// NormalizeTopicConfig validates a new topic's config and returns it with
// defaults filled in (SegmentBytes 0 → DefaultSegmentBytes, CleanupPolicy
// "" → CleanupDelete, the compaction settings of a compacted topic 0 →
// their defaults). Errors wrap ErrInvalidArgument.
func NormalizeTopicConfig(cfg TopicConfig) (TopicConfig, error) {
	if cfg.SegmentBytes == 0 {
		cfg.SegmentBytes = DefaultSegmentBytes
	}
	if cfg.SegmentBytes < MinSegmentBytes || cfg.SegmentBytes > MaxSegmentBytes {
		return cfg, fmt.Errorf("%w: segment_bytes is %d, must be in [%d, %d]", ErrInvalidArgument, cfg.SegmentBytes, MinSegmentBytes, MaxSegmentBytes)
	}
	if cfg.RetentionMs < -1 {
		return cfg, fmt.Errorf("%w: retention_ms is %d, must be -1 (forever) or >= 0", ErrInvalidArgument, cfg.RetentionMs)
	}
	switch cfg.CleanupPolicy {
	case "":
		cfg.CleanupPolicy = CleanupDelete
	case CleanupDelete, CleanupCompact, CleanupCompactDelete:
	default:
		return cfg, fmt.Errorf("%w: cleanup_policy %q, must be %q, %q or %q", ErrInvalidArgument,
			cfg.CleanupPolicy, CleanupDelete, CleanupCompact, CleanupCompactDelete)
	}
	// The compaction settings get their defaults on compacted topics only
	// (elsewhere they mean nothing and stay as given).
	if cfg.DeleteRetentionMs == 0 && cfg.Compacts() {
		cfg.DeleteRetentionMs = DefaultDeleteRetentionMs
	}
	if cfg.DeleteRetentionMs < 0 {
		return cfg, fmt.Errorf("%w: delete_retention_ms is %d, must be positive (0 selects the default %d)", ErrInvalidArgument, cfg.DeleteRetentionMs, DefaultDeleteRetentionMs)
	}
	if cfg.MinCleanableDirtyRatio == 0 && cfg.Compacts() {
		cfg.MinCleanableDirtyRatio = DefaultMinCleanableDirtyRatio
	}
	if !(cfg.MinCleanableDirtyRatio >= 0 && cfg.MinCleanableDirtyRatio <= 1) {
		return cfg, fmt.Errorf("%w: min_cleanable_dirty_ratio is %v, must be in (0, 1] (0 selects the default %v)", ErrInvalidArgument, cfg.MinCleanableDirtyRatio, DefaultMinCleanableDirtyRatio)
	}
	// The broker's settings stay 0 or "" when unset: they take their
	// defaults where they are used (WithDefaults), so a topic follows a
	// default it never overrode.
	if cfg.RetentionBytes == -1 {
		cfg.RetentionBytes = 0 // Kafka's spelling of "no limit"
	}
	if cfg.RetentionBytes < 0 {
		return cfg, fmt.Errorf("%w: retention_bytes is %d, must be positive (0 or -1: no size limit)", ErrInvalidArgument, cfg.RetentionBytes)
	}
	if cfg.SegmentMs < 0 {
		return cfg, fmt.Errorf("%w: segment_ms is %d, must be positive (0 selects the default %d)", ErrInvalidArgument, cfg.SegmentMs, DefaultSegmentMs)
	}
	if cfg.MaxMessageBytes < 0 || cfg.MaxMessageBytes > MaxMaxMessageBytes {
		return cfg, fmt.Errorf("%w: max_message_bytes is %d, must be in [1, %d] (0 selects the default %d)", ErrInvalidArgument, cfg.MaxMessageBytes, MaxMaxMessageBytes, DefaultMaxMessageBytes)
	}
	if cfg.CompressionType != "" && !slices.Contains(CompressionTypes(), cfg.CompressionType) {
		return cfg, fmt.Errorf("%w: compression_type %q, must be one of %s", ErrInvalidArgument, cfg.CompressionType, strings.Join(CompressionTypes(), ", "))
	}
	switch cfg.MessageTimestampType {
	case "", TimestampCreateTime, TimestampLogAppendTime:
	default:
		return cfg, fmt.Errorf("%w: message_timestamp_type %q, must be %q or %q", ErrInvalidArgument, cfg.MessageTimestampType, TimestampCreateTime, TimestampLogAppendTime)
	}
	if cfg.MinInsyncReplicas < 0 {
		return cfg, fmt.Errorf("%w: min_insync_replicas is %d, must be at least 1 (0 selects the default 1)", ErrInvalidArgument, cfg.MinInsyncReplicas)
	}
	if len(cfg.Overrides) > 0 {
		o := slices.Clone(cfg.Overrides)
		slices.Sort(o)
		cfg.Overrides = slices.Compact(o)
		if cfg.Overrides[0] == "" {
			return cfg, fmt.Errorf("%w: an empty config name among the overrides", ErrInvalidArgument)
		}
	} else {
		cfg.Overrides = nil
	}
	return cfg, nil
}

// WithDefaults is c with every setting left unset (0 or "") shown as the
// default it takes: the compaction settings, SegmentMs and the broker's
// settings. A topic's stored config keeps them unset.
func (c TopicConfig) WithDefaults() TopicConfig {
	c.DeleteRetentionMs = cmp.Or(c.DeleteRetentionMs, DefaultDeleteRetentionMs)
	c.MinCleanableDirtyRatio = cmp.Or(c.MinCleanableDirtyRatio, DefaultMinCleanableDirtyRatio)
	c.SegmentMs = cmp.Or(c.SegmentMs, DefaultSegmentMs)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, DefaultMaxMessageBytes)
	c.CompressionType = cmp.Or(c.CompressionType, CompressionProducer)
	c.MessageTimestampType = cmp.Or(c.MessageTimestampType, TimestampCreateTime)
	c.MinInsyncReplicas = cmp.Or(c.MinInsyncReplicas, 1)
	return c
}

// ValidateAlter checks an alteration of topic cur into next (AlterTopic)
// and returns next with its config normalized: the same name and ID, no
// fewer partitions, at most MaxPartitions, a valid config. Errors wrap
// ErrInvalidArgument.
func ValidateAlter(cur, next TopicInfo) (TopicInfo, error) {
	switch {
	case next.Name != cur.Name || next.ID != cur.ID:
		return next, fmt.Errorf("%w: an alteration of topic %q (id %s) names topic %q (id %s)", ErrInvalidArgument, cur.Name, cur.ID, next.Name, next.ID)
	case next.Partitions < cur.Partitions:
		return next, fmt.Errorf("%w: topic %q has %d partitions; partitions can only be added, not %d", ErrInvalidArgument, cur.Name, cur.Partitions, next.Partitions)
	case next.Partitions > MaxPartitions:
		return next, fmt.Errorf("%w: partitions is %d, must be in [1, %d]", ErrInvalidArgument, next.Partitions, MaxPartitions)
	}
	cfg, err := NormalizeTopicConfig(next.Config)
	if err != nil {
		return next, err
	}
	next.Config = cfg
	return next, nil
}

// validateKeys rejects keyless records for a compacted topic: compaction
// keeps the latest record per key, so a record without one could never be
// superseded and would be kept forever (Kafka rejects them the same way).
func validateKeys(cfg TopicConfig, recs []Record) error {
	if !cfg.Compacts() {
		return nil
	}
	for i := range recs {
		if recs[i].Key == nil && !recs[i].Control { // a marker is kept, keyless, as Kafka's
			return fmt.Errorf("%w: record %d has no key, and cleanup_policy %q keeps the latest record per key: compacted topics accept keyed records only",
				ErrInvalidArgument, i, cfg.CleanupPolicy)
		}
	}
	return nil
}

// validateBatch checks an Append batch and returns its encoded size.
func validateBatch(recs []Record) (int, error) {
	if len(recs) == 0 {
		return 0, fmt.Errorf("%w: append of no records", ErrInvalidArgument)
	}
	total := 0
	for i := range recs {
		r := &recs[i]
		if (r.Transactional || r.Control) && r.ProducerID == 0 {
			return 0, fmt.Errorf("%w: record %d is transactional or a marker without a producer", ErrInvalidArgument, i)
		}
		if r.Control && !r.Transactional {
			return 0, fmt.Errorf("%w: record %d is a marker but not transactional", ErrInvalidArgument, i)
		}
		n := frameSize(r)
		if n > MaxRecordBytes {
			return 0, fmt.Errorf("%w: record %d encodes to %d bytes, the limit is %d", ErrInvalidArgument, i, n, MaxRecordBytes)
		}
		total += n
		if total > MaxBatchBytes {
			return 0, fmt.Errorf("%w: batch encodes to more than %d bytes", ErrInvalidArgument, MaxBatchBytes)
		}
	}
	return total, nil
}

// validateReadLimits checks Read's limits; both must be positive so a read is
// always bounded.
func validateReadLimits(maxRecords, maxBytes int) error {
	if maxRecords <= 0 || maxBytes <= 0 {
		return fmt.Errorf("%w: max records (%d) and max bytes (%d) must be positive", ErrInvalidArgument, maxRecords, maxBytes)
	}
	return nil
}

// newTopicID returns a random (version 4) UUID in its canonical text form.
func newTopicID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])  // crypto/rand.Read never returns an error (Go 1.24+)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// cloneRecord deep-copies r so the caller's buffers may be reused. It keeps
// nil and empty keys and values distinct and, like the file format, reads no
// headers back as nil Headers.
func cloneRecord(r Record) Record {
	out := Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: cloneBytes(r.Key), Value: cloneBytes(r.Value),
		ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Sequence: r.Sequence,
		Transactional: r.Transactional, Control: r.Control}
	if len(r.Headers) > 0 {
		out.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			out.Headers[i] = Header{Key: h.Key, Value: cloneBytes(h.Value)}
		}
	}
	return out
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
