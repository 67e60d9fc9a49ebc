package broker

import (
	"cmp"
	"context"
	"errors"
	"strconv"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Topic config names: Kafka's names of the TopicSettings fields, which
// Kafka's CreateTopics and DescribeConfigs speak.
const (
	ConfigCleanupPolicy          = "cleanup.policy"
	ConfigDeleteRetentionMs      = "delete.retention.ms"
	ConfigMinCleanableDirtyRatio = "min.cleanable.dirty.ratio"
	ConfigRetentionMs            = "retention.ms"
	ConfigSegmentBytes           = "segment.bytes"
)

// InternalTopic is the name Kafka clients know as the internal topic of
// committed offsets; no topic may take it (docs/kafka.md "The internal
// topic").
const InternalTopic = "__consumer_offsets"

// TopicFault says which part of a topic creation is wrong. Every fault is
// INVALID_REQUEST; Kafka names each with its own code.
type TopicFault int

const (
	FaultName       TopicFault = iota + 1 // the name is empty or malformed
	FaultPartitions                       // the partition count is out of range
	FaultConfig                           // a setting is unknown, malformed or out of range
)

// TopicError is a refused topic creation: an INVALID_REQUEST *apierr.Error
// (errors.As finds it) and the fault.
type TopicError struct {
	Fault TopicFault
	Err   *apierr.Error
}

func (e *TopicError) Error() string { return e.Err.Message }
func (e *TopicError) Unwrap() error { return e.Err }

func topicErr(f TopicFault, format string, args ...any) error {
	return &TopicError{Fault: f, Err: apierr.Invalid(format, args...)}
}

// SetConfig sets the field of s that the Kafka config name names from its
// string form. The value's range is checked with the others by
// [Log.ValidateTopic]; an unknown name or a value that does not parse is a
// FaultConfig.
func (s *TopicSettings) SetConfig(name, value string) error {
	integer := func(dst **int64) error {
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return topicErr(FaultConfig, "%s must be an integer, got %q", name, value)
		}
		*dst = &v
		return nil
	}
	switch name {
	case ConfigRetentionMs:
		return integer(&s.RetentionMs)
	case ConfigSegmentBytes:
		return integer(&s.SegmentBytes)
	case ConfigDeleteRetentionMs:
		return integer(&s.DeleteRetentionMs)
	case ConfigMinCleanableDirtyRatio:
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return topicErr(FaultConfig, "%s must be a number, got %q", name, value)
		}
		s.MinCleanableDirtyRatio = &v
		return nil
	case ConfigCleanupPolicy:
		if value == "delete,compact" { // Kafka's list is unordered
			value = CleanupCompactDelete
		}
		s.CleanupPolicy = &value
		return nil
	}
	return topicErr(FaultConfig, "config %q is not supported (supported: %s, %s, %s, %s, %s)", name,
		ConfigCleanupPolicy, ConfigDeleteRetentionMs, ConfigMinCleanableDirtyRatio, ConfigRetentionMs, ConfigSegmentBytes)
}

// ValidateTopic checks a new topic's name, partition count (1..MaxPartitions)
// and settings, in that order, and returns the config it would be created
// with. Errors are *TopicError.
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
	cfg := TopicConfig{SegmentBytes: l.cfg.SegmentBytes, RetentionMs: -1, CleanupPolicy: CleanupDelete}
	if s.SegmentBytes != nil {
		cfg.SegmentBytes = *s.SegmentBytes
	}
	if s.RetentionMs != nil {
		cfg.RetentionMs = *s.RetentionMs
	}
	if s.CleanupPolicy != nil {
		cfg.CleanupPolicy = *s.CleanupPolicy
	}
	if s.DeleteRetentionMs != nil {
		cfg.DeleteRetentionMs = *s.DeleteRetentionMs
	}
	if s.MinCleanableDirtyRatio != nil {
		cfg.MinCleanableDirtyRatio = *s.MinCleanableDirtyRatio
	}
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

// EffectiveConfig is c with the compaction settings a topic that does not
// compact stores unset shown as the defaults they would take.
func EffectiveConfig(c TopicConfig) TopicConfig {
	c.DeleteRetentionMs = cmp.Or(c.DeleteRetentionMs, DefaultDeleteRetentionMs)
	c.MinCleanableDirtyRatio = cmp.Or(c.MinCleanableDirtyRatio, DefaultMinCleanableDirtyRatio)
	return c
}

// ConfigEntry is one topic config under its Kafka name, in string form.
type ConfigEntry struct {
	Name, Value string
}

// ConfigEntries lists a topic's effective configs ([EffectiveConfig]) under
// their Kafka names, sorted by name.
func ConfigEntries(c TopicConfig) []ConfigEntry {
	c = EffectiveConfig(c)
	return []ConfigEntry{
		{ConfigCleanupPolicy, c.CleanupPolicy},
		{ConfigDeleteRetentionMs, strconv.FormatInt(c.DeleteRetentionMs, 10)},
		{ConfigMinCleanableDirtyRatio, strconv.FormatFloat(c.MinCleanableDirtyRatio, 'g', -1, 64)},
		{ConfigRetentionMs, strconv.FormatInt(c.RetentionMs, 10)},
		{ConfigSegmentBytes, strconv.FormatInt(c.SegmentBytes, 10)},
	}
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
