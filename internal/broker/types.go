package broker

import "github.com/sharelog/sharelog/internal/storage/logstore"

// The storage types and values a transport needs to speak of the log,
// re-exported so that no transport imports a storage package.
type (
	// Record is one record of a partition.
	Record = logstore.Record
	// Header is one header of a Record.
	Header = logstore.Header
	// TopicInfo is a topic's name, id, partition count and config.
	TopicInfo = logstore.TopicInfo
	// TopicConfig is a topic's stored configuration.
	TopicConfig = logstore.TopicConfig
	// PartitionInfo is a partition's bounds and disk use.
	PartitionInfo = logstore.PartitionInfo
)

// ErrOffline marks a partition that cannot be served (PartitionInfo.Err).
var ErrOffline = logstore.ErrOffline

// Cleanup policies (TopicConfig.CleanupPolicy).
const (
	CleanupDelete        = logstore.CleanupDelete
	CleanupCompact       = logstore.CleanupCompact
	CleanupCompactDelete = logstore.CleanupCompactDelete
)

// Topic config bounds, defaults and values.
const (
	MinSegmentBytes               = logstore.MinSegmentBytes
	MaxSegmentBytes               = logstore.MaxSegmentBytes
	DefaultDeleteRetentionMs      = logstore.DefaultDeleteRetentionMs
	DefaultMinCleanableDirtyRatio = logstore.DefaultMinCleanableDirtyRatio
	DefaultMaxMessageBytes        = logstore.DefaultMaxMessageBytes
	TimestampCreateTime           = logstore.TimestampCreateTime
	TimestampLogAppendTime        = logstore.TimestampLogAppendTime
)

// The storage sentinels a transport maps (errors.Is).
var (
	ErrUnknownTopic     = logstore.ErrUnknownTopic
	ErrTopicExists      = logstore.ErrTopicExists
	ErrInvalidArgument  = logstore.ErrInvalidArgument
	ErrOffsetOutOfRange = logstore.ErrOffsetOutOfRange
)
