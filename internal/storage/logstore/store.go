package logstore

import (
	"context"
	"errors"
)

// Sentinel errors. Implementations wrap them with %w and context; callers
// test with errors.Is. internal/transport/grpcapi maps each to an apierr reason.
var (
	// ErrUnknownTopic: no topic of that name, or partition outside [0, partitions).
	ErrUnknownTopic = errors.New("unknown topic or partition")
	// ErrTopicExists: CreateTopic of a name that exists.
	ErrTopicExists = errors.New("topic already exists")
	// ErrOffsetOutOfRange: an offset below the log start offset or above the high watermark.
	ErrOffsetOutOfRange = errors.New("offset out of range")
	// ErrInvalidArgument: a malformed name, config or record.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrCorrupt: a checksum failure in stored data below the recovered tail.
	ErrCorrupt = errors.New("corrupt record")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrFenced: a replicated store refused an append because another writer
	// appended to the partition since (the caller no longer owns it); nothing
	// of the refused batch was stored. The file and memory stores, which have
	// one writer, never return it.
	ErrFenced = errors.New("partition written by another writer")
)

// Cleanup policies.
const (
	CleanupDelete        = "delete"
	CleanupCompact       = "compact"
	CleanupCompactDelete = "compact,delete"
)

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one log record. A nil Key means keyless; a nil Value is a
// tombstone (a deletion of Key for change streams). Offset is assigned by
// the store on Append and ignored on input.
type Record struct {
	Offset    int64
	Timestamp int64 // ms since the Unix epoch
	Key       []byte
	Value     []byte
	Headers   []Header
	// ProducerID, ProducerEpoch and Sequence are an idempotent producer's
	// fields (docs/produce.md): its id (0 = the record has no producer),
	// epoch and the record's sequence number. The stores keep them with the
	// record (the frame's producer fields, doc.go) and give them back on
	// Read; what they mean is the broker's business.
	ProducerID    int64
	ProducerEpoch int16
	Sequence      int32
	// Transactional marks a record of a transactional producer's batch: it
	// is visible to a read-committed reader only once a commit marker of
	// its producer follows it (docs/kafka.md "Transactions"). It needs a
	// producer.
	Transactional bool
	// Control marks a transaction marker (a commit or abort of its
	// producer's open transaction on the partition): it occupies an offset
	// but is no record of any reader but the Kafka listener's, which sends
	// it as a control batch. Its key is nil and its value is the broker's
	// encoding. It needs a producer and Transactional.
	Control bool
}

// Size is the record's payload size as share groups and fetch limits count it:
// key + value + every header key and value.
func (r *Record) Size() int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// TopicConfig is a topic's configuration.
type TopicConfig struct {
	SegmentBytes  int64  // roll the active segment when it reaches this size
	RetentionMs   int64  // -1 = keep forever
	CleanupPolicy string // CleanupDelete, CleanupCompact or CleanupCompactDelete
	// DeleteRetentionMs is how long compaction keeps a tombstone that is
	// the latest record of its key, counted from the newest timestamp of
	// its segment; 0 means DefaultDeleteRetentionMs (on a compacted topic).
	DeleteRetentionMs int64
	// MinCleanableDirtyRatio: compaction cleans a partition when the bytes
	// written since its last cleaning exceed this share of its sealed
	// bytes; 0 means DefaultMinCleanableDirtyRatio (on a compacted topic).
	MinCleanableDirtyRatio float64
	// RetentionBytes is the size retention of each partition: the oldest
	// sealed segments are released (the log start moves past them) while
	// the partition would still hold more than this without them; 0
	// means none (Kafka's -1). Applied with time retention, on topics
	// whose cleanup policy includes delete.
	RetentionBytes int64
	// SegmentMs rolls the active segment at the first append after it
	// has been open this long (ms), full or not; 0 means
	// DefaultSegmentMs.
	SegmentMs int64
	// MaxMessageBytes, CompressionType, MessageTimestampType and
	// MinInsyncReplicas are the broker's (internal/broker topicconfig.go):
	// the store keeps them and checks their form. Unset (0 or "") they
	// take their defaults where they are used (WithDefaults):
	// DefaultMaxMessageBytes, CompressionProducer, TimestampCreateTime, 1.
	MaxMessageBytes      int64
	CompressionType      string
	MessageTimestampType string
	MinInsyncReplicas    int32
	// Overrides names, sorted, the configs (by their Kafka names) that
	// were set explicitly, at creation or by an alteration; the others
	// hold their defaults. Kafka's DescribeConfigs tells them apart.
	Overrides []string
}

// Compacts reports whether the cleanup policy includes compaction.
func (c TopicConfig) Compacts() bool {
	return c.CleanupPolicy == CleanupCompact || c.CleanupPolicy == CleanupCompactDelete
}

// TopicInfo describes a topic.
type TopicInfo struct {
	Name       string
	ID         string // UUID, new for every creation
	Partitions int32
	Config     TopicConfig
}

// PartitionInfo describes one partition's bounds and disk use.
type PartitionInfo struct {
	Partition      int32
	LogStartOffset int64 // first readable offset
	HighWatermark  int64 // next offset to be assigned
	SizeBytes      int64
	SegmentCount   int32
	// PurgedTombstonesBelow is P+1, where P is the greatest offset of a
	// tombstone compaction removed while it was the latest record of its
	// key; 0 when none was (P = -1). A change stream whose next offset is
	// below it has missed a deletion (docs/compaction.md).
	PurgedTombstonesBelow int64
	// Err is set (wrapping ErrOffline) when the partition is offline; the
	// other fields are then zero and mean nothing.
	Err error
}

// Store is the partitioned log that the service and domain packages depend on.
// All methods are safe for concurrent use.
type Store interface {
	// CreateTopic creates a topic with a new ID. ErrTopicExists if the name is taken.
	CreateTopic(ctx context.Context, name string, partitions int32, cfg TopicConfig) (TopicInfo, error)
	// DeleteTopic removes a topic and its data; watchers of its partitions are woken.
	DeleteTopic(ctx context.Context, name string) error
	// Topics lists every topic, sorted by name.
	Topics(ctx context.Context) ([]TopicInfo, error)
	// Topic describes one topic and each of its partitions.
	Topic(ctx context.Context, name string) (TopicInfo, []PartitionInfo, error)
	// TopicInfo describes one topic without visiting its partitions: the
	// cheap lookup for hot paths (routing a produce needs only the count).
	TopicInfo(ctx context.Context, name string) (TopicInfo, error)
	// Append appends recs to one partition atomically and contiguously and returns
	// the offset of the first. It returns once the records are durable per the
	// store's fsync mode; then they are below the high watermark and readable.
	Append(ctx context.Context, topic string, partition int32, recs []Record) (base int64, err error)
	// Read returns records from offset on, at most maxRecords and about maxBytes
	// (the first record is returned even if larger). offset == high watermark
	// gives no records; outside [log start, high watermark] is ErrOffsetOutOfRange.
	Read(ctx context.Context, topic string, partition int32, offset int64, maxRecords, maxBytes int) ([]Record, error)
	// Bounds returns the partition's log start offset and high watermark.
	Bounds(topic string, partition int32) (logStart, highWatermark int64, err error)
	// OffsetForTimestamp returns the first offset >= log start whose timestamp
	// is >= ts, with that record's timestamp, or (-1, -1) if there is none.
	OffsetForTimestamp(ctx context.Context, topic string, partition int32, ts int64) (offset, timestamp int64, err error)
	// Watch returns a channel closed at the partition's next change: an append,
	// a log start move, an alteration of the topic (AlterTopic) or its
	// deletion. Check Bounds after subscribing.
	Watch(topic string, partition int32) (<-chan struct{}, error)
	// DeleteRecordsBefore moves the log start offset to offset (purge). An offset
	// at or below the current log start is a no-op; above the high watermark is
	// ErrOffsetOutOfRange. The new log start is durable before it returns
	// (unless fsync is "never"). Returns the log start offset after the call.
	DeleteRecordsBefore(ctx context.Context, topic string, partition int32, offset int64) (logStart int64, err error)
	// AlterTopic changes a topic after its creation: fn gets its current
	// description and returns the new one, with the same name and ID, at
	// least as many partitions (at most MaxPartitions) and a config that
	// NormalizeTopicConfig accepts (ValidateAlter; errors wrap
	// ErrInvalidArgument). fn may be called more than once (a store
	// retries it after a concurrent change) and must not call the store;
	// its error is returned as is, and nothing changes. New partitions
	// start empty at offset 0. The change is durable before it returns
	// (unless fsync is "never"), and every watcher of the topic's
	// partitions is woken: the description they depend on changed.
	AlterTopic(ctx context.Context, name string, fn func(cur TopicInfo) (TopicInfo, error)) (TopicInfo, error)
	// Close flushes and closes the store.
	Close() error
}
