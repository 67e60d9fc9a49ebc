package broker

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Topic config names: Kafka's names of the TopicSettings fields, which
// Kafka's CreateTopics, IncrementalAlterConfigs, AlterConfigs and
// DescribeConfigs speak (docs/kafka.md "Topic configs").
const (
	ConfigCleanupPolicy          = "cleanup.policy"
	ConfigCompressionType        = "compression.type"
	ConfigDeleteRetentionMs      = "delete.retention.ms"
	ConfigMaxMessageBytes        = "max.message.bytes"
	ConfigMessageTimestampType   = "message.timestamp.type"
	ConfigMinCleanableDirtyRatio = "min.cleanable.dirty.ratio"
	ConfigMinInsyncReplicas      = "min.insync.replicas"
	ConfigRetentionBytes         = "retention.bytes"
	ConfigRetentionMs            = "retention.ms"
	ConfigSegmentBytes           = "segment.bytes"
	ConfigSegmentMs              = "segment.ms"
)

// InternalTopic is the name Kafka clients know as the internal topic of
// committed offsets; no topic may take it (docs/kafka.md "The internal
// topic").
const InternalTopic = "__consumer_offsets"

// ConfigNames lists every topic config name, sorted.
func ConfigNames() []string {
	return []string{ConfigCleanupPolicy, ConfigCompressionType, ConfigDeleteRetentionMs, ConfigMaxMessageBytes,
		ConfigMessageTimestampType, ConfigMinCleanableDirtyRatio, ConfigMinInsyncReplicas, ConfigRetentionBytes,
		ConfigRetentionMs, ConfigSegmentBytes, ConfigSegmentMs}
}

// TopicFault says which part of a topic creation or alteration is wrong.
// Every fault is INVALID_REQUEST; Kafka names each with its own code
// (INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_CONFIG).
type TopicFault int

const (
	FaultName       TopicFault = iota + 1 // the name is empty or malformed
	FaultPartitions                       // the partition count is out of range
	FaultConfig                           // a setting is unknown, malformed or out of range
)

// TopicError is a refused topic creation or alteration: an INVALID_REQUEST
// *apierr.Error (errors.As finds it) and the fault.
type TopicError struct {
	Fault TopicFault
	Err   *apierr.Error
}

func (e *TopicError) Error() string { return e.Err.Message }
func (e *TopicError) Unwrap() error { return e.Err }

func topicErr(f TopicFault, format string, args ...any) error {
	e := apierr.Invalid(format, args...)
	e.Metadata = map[string]string{faultKey: faultNames[f]}
	return &TopicError{Fault: f, Err: e}
}

// faultKey names the fault in the error's metadata, so that it survives a
// hop to the controller (a peer's answer keeps its reason and metadata).
const faultKey = "topic_fault"

var faultNames = map[TopicFault]string{FaultName: "name", FaultPartitions: "partitions", FaultConfig: "config"}

// FaultOf is the fault of a refused topic creation or alteration: a
// *TopicError's, or one named in an error's metadata (the controller's
// answer); false for any other error.
func FaultOf(err error) (TopicFault, bool) {
	if te, ok := errors.AsType[*TopicError](err); ok {
		return te.Fault, true
	}
	if e, ok := errors.AsType[*apierr.Error](err); ok && e.Reason == apierr.InvalidRequest {
		for f, name := range faultNames {
			if e.Metadata[faultKey] == name {
				return f, true
			}
		}
	}
	return 0, false
}

// SetConfig sets the field of s that the Kafka config name names from its
// string form (Kafka's spelling: retention.bytes -1 is no limit). The
// value's range is checked with the others by [Log.ValidateTopic]; an
// unknown name or a value that does not parse is a FaultConfig.
func (s *TopicSettings) SetConfig(name, value string) error {
	integer := func(dst **int64, min int64) error {
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return topicErr(FaultConfig, "%s must be an integer, got %q", name, value)
		}
		if v < min {
			return topicErr(FaultConfig, "%s must be at least %d, got %d", name, min, v)
		}
		*dst = &v
		return nil
	}
	switch name {
	case ConfigRetentionMs:
		return integer(&s.RetentionMs, -1)
	case ConfigSegmentBytes:
		return integer(&s.SegmentBytes, MinSegmentBytes)
	case ConfigDeleteRetentionMs:
		// 0 would read as "the default" (docs/compaction.md).
		return integer(&s.DeleteRetentionMs, 1)
	case ConfigSegmentMs:
		return integer(&s.SegmentMs, 1)
	case ConfigMaxMessageBytes:
		if err := integer(&s.MaxMessageBytes, 1); err != nil {
			return err
		}
		if *s.MaxMessageBytes > logstore.MaxMaxMessageBytes {
			return topicErr(FaultConfig, "%s must be at most %d, got %d", name, logstore.MaxMaxMessageBytes, *s.MaxMessageBytes)
		}
		return nil
	case ConfigRetentionBytes:
		if err := integer(&s.RetentionBytes, -1); err != nil {
			return err
		}
		if *s.RetentionBytes == 0 {
			return topicErr(FaultConfig, "%s must be -1 (no limit) or positive, got 0", name)
		}
		return nil
	case ConfigMinInsyncReplicas:
		v, err := strconv.ParseInt(value, 10, 32)
		if err != nil || v < 1 {
			return topicErr(FaultConfig, "%s must be an integer of at least 1, got %q", name, value)
		}
		n := int32(v)
		s.MinInsyncReplicas = &n
		return nil
	case ConfigMinCleanableDirtyRatio:
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return topicErr(FaultConfig, "%s must be a number, got %q", name, value)
		}
		if !(v > 0 && v <= 1) {
			return topicErr(FaultConfig, "%s must be in (0, 1], got %s", name, value)
		}
		s.MinCleanableDirtyRatio = &v
		return nil
	case ConfigCleanupPolicy:
		p, err := cleanupPolicy(value)
		if err != nil {
			return err
		}
		s.CleanupPolicy = &p
		return nil
	case ConfigCompressionType:
		if !slices.Contains(logstore.CompressionTypes(), value) {
			return topicErr(FaultConfig, "%s must be one of %s, got %q", name, strings.Join(logstore.CompressionTypes(), ", "), value)
		}
		s.CompressionType = &value
		return nil
	case ConfigMessageTimestampType:
		if value != TimestampCreateTime && value != TimestampLogAppendTime {
			return topicErr(FaultConfig, "%s must be %s or %s, got %q", name, TimestampCreateTime, TimestampLogAppendTime, value)
		}
		s.MessageTimestampType = &value
		return nil
	}
	return topicErr(FaultConfig, "config %q is not supported (supported: %s)", name, strings.Join(ConfigNames(), ", "))
}

// cleanupPolicy is the stored form of a cleanup.policy list: Kafka's list
// is unordered and may repeat an entry.
func cleanupPolicy(value string) (string, error) {
	var del, compact bool
	for _, e := range strings.Split(value, ",") {
		switch strings.TrimSpace(e) {
		case CleanupDelete:
			del = true
		case CleanupCompact:
			compact = true
		default:
			return "", topicErr(FaultConfig, "%s must list %s and/or %s, got %q", ConfigCleanupPolicy, CleanupDelete, CleanupCompact, value)
		}
	}
	switch {
	case del && compact:
		return CleanupCompactDelete, nil
	case compact:
		return CleanupCompact, nil
	}
	return CleanupDelete, nil
}

// set lists the Kafka names of the settings s sets.
func (s TopicSettings) set() []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	add(s.CleanupPolicy != nil, ConfigCleanupPolicy)
	add(s.CompressionType != nil, ConfigCompressionType)
	add(s.DeleteRetentionMs != nil, ConfigDeleteRetentionMs)
	add(s.MaxMessageBytes != nil, ConfigMaxMessageBytes)
	add(s.MessageTimestampType != nil, ConfigMessageTimestampType)
	add(s.MinCleanableDirtyRatio != nil, ConfigMinCleanableDirtyRatio)
	add(s.MinInsyncReplicas != nil, ConfigMinInsyncReplicas)
	add(s.RetentionBytes != nil, ConfigRetentionBytes)
	add(s.RetentionMs != nil, ConfigRetentionMs)
	add(s.SegmentBytes != nil, ConfigSegmentBytes)
	add(s.SegmentMs != nil, ConfigSegmentMs)
	return out
}

// apply sets the fields of c that s sets.
func (s TopicSettings) apply(c *TopicConfig) {
	if s.SegmentBytes != nil {
		c.SegmentBytes = *s.SegmentBytes
	}
	if s.RetentionMs != nil {
		c.RetentionMs = *s.RetentionMs
	}
	if s.CleanupPolicy != nil {
		c.CleanupPolicy = *s.CleanupPolicy
	}
	if s.DeleteRetentionMs != nil {
		c.DeleteRetentionMs = *s.DeleteRetentionMs
	}
	if s.MinCleanableDirtyRatio != nil {
		c.MinCleanableDirtyRatio = *s.MinCleanableDirtyRatio
	}
	if s.RetentionBytes != nil {
		c.RetentionBytes = max(*s.RetentionBytes, 0) // -1: no limit, stored as 0
	}
	if s.SegmentMs != nil {
		c.SegmentMs = *s.SegmentMs
	}
	if s.MaxMessageBytes != nil {
		c.MaxMessageBytes = *s.MaxMessageBytes
	}
	if s.CompressionType != nil {
		c.CompressionType = *s.CompressionType
	}
	if s.MessageTimestampType != nil {
		c.MessageTimestampType = *s.MessageTimestampType
	}
	if s.MinInsyncReplicas != nil {
		c.MinInsyncReplicas = *s.MinInsyncReplicas
	}
}

// defaultConfig is the config of a new topic with no settings.
func (l *Log) defaultConfig() TopicConfig {
	return TopicConfig{SegmentBytes: cmp.Or(l.cfg.SegmentBytes, logstore.DefaultSegmentBytes), RetentionMs: -1, CleanupPolicy: CleanupDelete}
}

// ValidateTopic checks a new topic's name, partition count (1..MaxPartitions)
// and settings, in that order, and returns the config it would be created
// with: the defaults, the settings, and the names of the settings as its
// overrides. Errors are *TopicError.
func (l *Log) ValidateTopic(name string, partitions int32, s TopicSettings) (TopicConfig, error) {
	if name == "" {
		return TopicConfig{}, topicErr(FaultName, "name is required")
	}
	if partitions < 1 || partitions > MaxPartitions {
		return TopicConfig{}, topicErr(FaultPartitions, "partitions must be between 1 and %d, got %d", MaxPartitions, partitions)
	}
	if err := logstore.ValidateTopicName(name); err != nil {
		return TopicConfig{}, topicErr(FaultName, "%s", err)
	}
	if name == InternalTopic {
		return TopicConfig{}, topicErr(FaultName, "%s is the Kafka listener's internal topic (docs/kafka.md \"The internal topic\")", name)
	}
	cfg := l.defaultConfig()
	s.apply(&cfg)
	cfg.Overrides = s.set()
	cfg, err := logstore.NormalizeTopicConfig(cfg)
	if err != nil {
		return TopicConfig{}, topicErr(FaultConfig, "%s", err)
	}
	return cfg, nil
}

// CheckNewTopic is CreateTopic without the creation (Kafka's validate_only):
// the checks of [Log.ValidateTopic], then TOPIC_ALREADY_EXISTS if the name
// is taken.
func (l *Log) CheckNewTopic(ctx context.Context, name string, partitions int32, s TopicSettings) error {
	if _, err := l.ValidateTopic(name, partitions, s); err != nil {
		return err
	}
	if _, err := l.store.TopicInfo(ctx, name); err == nil {
		return apierr.New(apierr.TopicAlreadyExists, "topic %q already exists", name)
	} else if !errors.Is(err, logstore.ErrUnknownTopic) {
		return err
	}
	return l.checkPartitionLimit(ctx, name, partitions)
}

// EffectiveConfig is c with every setting left unset shown as the default
// it takes (logstore's WithDefaults): the compaction settings,
// segment.ms and the broker's settings.
func EffectiveConfig(c TopicConfig) TopicConfig { return c.WithDefaults() }

// ConfigEntry is one topic config under its Kafka name, in the string form
// Kafka gives it.
type ConfigEntry struct {
	Name, Value string
	// Default: the topic has not set it, and it holds the default
	// (Kafka's source DEFAULT_CONFIG; else DYNAMIC_TOPIC_CONFIG).
	Default bool
	// Kind is the value's type, as Kafka's DescribeConfigs names it.
	Kind ConfigKind
	// Doc says what it means here (docs/kafka.md "Topic configs").
	Doc string
}

// ConfigKind is a config value's type.
type ConfigKind int

// Kafka's config types (DescribeConfigs v3 ConfigType).
const (
	KindString ConfigKind = 2
	KindInt    ConfigKind = 3
	KindLong   ConfigKind = 5
	KindDouble ConfigKind = 6
	KindList   ConfigKind = 7
)

// ConfigEntries lists every config of a topic whose stored config is c,
// sorted by name, with its effective value ([EffectiveConfig]) and whether
// it is a default: a config is set when the topic's overrides name it, or
// when its value is not the default (topics created before overrides were
// recorded).
func (l *Log) ConfigEntries(c TopicConfig) []ConfigEntry {
	def := l.defaultConfig().WithDefaults()
	e := c.WithDefaults()
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	retBytes := func(v int64) string {
		if v <= 0 {
			return "-1"
		}
		return i64(v)
	}
	out := []ConfigEntry{
		{ConfigCleanupPolicy, e.CleanupPolicy, e.CleanupPolicy == def.CleanupPolicy, KindList,
			"delete (retention by time and size), compact (the latest record per key), or both"},
		{ConfigCompressionType, e.CompressionType, e.CompressionType == def.CompressionType, KindString,
			"accepted and kept; records are stored uncompressed and Fetch answers uncompressed batches"},
		{ConfigDeleteRetentionMs, i64(e.DeleteRetentionMs), e.DeleteRetentionMs == def.DeleteRetentionMs, KindLong,
			"compacted topics: how long a tombstone that is the latest of its key is kept"},
		{ConfigMaxMessageBytes, i64(e.MaxMessageBytes), e.MaxMessageBytes == def.MaxMessageBytes, KindInt,
			"the largest record batch a Kafka producer may send, and the largest record over gRPC and REST: larger is MESSAGE_TOO_LARGE"},
		{ConfigMessageTimestampType, e.MessageTimestampType, e.MessageTimestampType == def.MessageTimestampType, KindString,
			"CreateTime (the producer's timestamp) or LogAppendTime (the server's time at append)"},
		{ConfigMinCleanableDirtyRatio, javaDouble(e.MinCleanableDirtyRatio), e.MinCleanableDirtyRatio == def.MinCleanableDirtyRatio, KindDouble,
			"compacted topics: the share of dirty bytes at which a partition is cleaned"},
		{ConfigMinInsyncReplicas, strconv.Itoa(int(e.MinInsyncReplicas)), e.MinInsyncReplicas == def.MinInsyncReplicas, KindInt,
			"accepted and kept; a write is acknowledged once durable per --fsync (file store) or on a quorum of the JetStream replicas"},
		{ConfigRetentionBytes, retBytes(e.RetentionBytes), e.RetentionBytes == def.RetentionBytes, KindLong,
			"the size a partition keeps before its oldest segments go; -1: no limit"},
		{ConfigRetentionMs, i64(e.RetentionMs), e.RetentionMs == def.RetentionMs, KindLong,
			"how long records are kept; -1: forever"},
		{ConfigSegmentBytes, i64(e.SegmentBytes), e.SegmentBytes == def.SegmentBytes, KindInt,
			"the size at which a partition's active segment rolls"},
		{ConfigSegmentMs, i64(e.SegmentMs), e.SegmentMs == def.SegmentMs, KindLong,
			"the age at which a partition's active segment rolls at the next append"},
	}
	for i := range out {
		if slices.Contains(c.Overrides, out[i].Name) {
			out[i].Default = false
		}
	}
	return out
}

// javaDouble formats v as Java's Double.toString, which Kafka's
// DescribeConfigs answers: "0.5", "1.0", "1.0E-4".
func javaDouble(v float64) string {
	a := math.Abs(v)
	if a != 0 && (a < 1e-3 || a >= 1e7) {
		s := strconv.FormatFloat(v, 'E', -1, 64) // 1E-04
		mant, exp, _ := strings.Cut(s, "E")
		if !strings.Contains(mant, ".") {
			mant += ".0"
		}
		e, _ := strconv.Atoi(exp)
		return mant + "E" + strconv.Itoa(e)
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// LogAppendTime reports whether a topic of config c stamps its records
// with the time of their append (message.timestamp.type LogAppendTime):
// every transport replaces the producer's timestamps by it, and a Kafka
// Fetch marks the batches so.
func LogAppendTime(c TopicConfig) bool { return c.MessageTimestampType == TimestampLogAppendTime }

// MaxMessageBytes is the largest record batch (Kafka) or record (gRPC,
// REST: key, value and headers) a topic of config c takes.
func MaxMessageBytes(c TopicConfig) int64 { return c.WithDefaults().MaxMessageBytes }

// CheckBatchSize refuses a Kafka record batch of n bytes (as the producer
// sent it, compressed) to a topic of config c above its max.message.bytes
// with MESSAGE_TOO_LARGE.
func CheckBatchSize(topic string, c TopicConfig, n int) error {
	if max := MaxMessageBytes(c); int64(n) > max {
		return apierr.New(apierr.MessageTooLarge, "a record batch of %d bytes is larger than the max.message.bytes of topic %q (%d)", n, topic, max)
	}
	return nil
}

// --- Topic lookups -----------------------------------------------------------

// TopicInfo returns one topic's name, id, partition count and config.
func (l *Log) TopicInfo(ctx context.Context, name string) (TopicInfo, error) {
	return l.store.TopicInfo(ctx, name)
}

// Topics lists every topic's info, sorted by name (cheaper than
// [Log.ListTopics]: no partition bounds).
func (l *Log) Topics(ctx context.Context) ([]TopicInfo, error) {
	return l.store.Topics(ctx)
}

// EnsureTopic returns the topic name, creating it through [Log.CreateTopic]
// (so the subscribers hear of it) with partitions partitions and the
// default settings when it does not exist: Kafka's auto-creation. created
// reports whether this call created it.
func (l *Log) EnsureTopic(ctx context.Context, name string, partitions int32) (info TopicInfo, created bool, err error) {
	info, err = l.store.TopicInfo(ctx, name)
	if !errors.Is(err, logstore.ErrUnknownTopic) {
		return info, false, err
	}
	t, err := l.CreateTopic(ctx, name, partitions, TopicSettings{})
	if errors.Is(err, logstore.ErrTopicExists) {
		info, err = l.store.TopicInfo(ctx, name) // created concurrently
		return info, false, err
	}
	if err != nil {
		return TopicInfo{}, false, err
	}
	return t.Info, true, nil
}
