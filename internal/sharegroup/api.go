package sharegroup

import (
	"context"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// This file holds the request and response types of the Manager's methods,
// which internal/transport/grpcapi translates protobuf to and from; the methods
// themselves are documented where they are defined (go doc sharegroup.Manager
// lists them), so no copy of their signatures can drift. Request-level
// errors are *apierr.Error values.

// TopicPartition names one partition of a topic on the wire.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// AckType is an acknowledgement type. The zero value is invalid: a forgotten
// field must never archive records.
type AckType int8

const (
	AckUnspecified AckType = iota
	AckAccept
	AckRelease
	AckReject
	AckGap
	AckRenew
)

// AckBatch acknowledges [FirstOffset, LastOffset] with one type for the whole
// range (len(Types) == 1) or exactly one type per offset.
type AckBatch struct {
	FirstOffset int64
	LastOffset  int64
	Types       []AckType
}

// PartitionEntry is one topics[].partitions[] entry of ShareFetch or
// ShareAcknowledge: a partition (to add to the session, for ShareFetch) and
// its acknowledgement batches (possibly none).
type PartitionEntry struct {
	TopicPartition
	// TopicID, when set, is the topic the caller means (a Kafka client
	// names topics by id): a topic of that name with another ID (deleted
	// and re-created) is treated as not existing, never as this one.
	TopicID string
	Batches []AckBatch
}

// FetchRequest is a ShareFetch call.
type FetchRequest struct {
	GroupID   string
	MemberID  string
	Epoch     int32
	MaxWaitMs int32
	MinBytes  int32
	// MaxBytes and MaxRecords: nil = the default (1 MiB, 500); 0 =
	// acquire nothing, as Kafka: the call applies its acknowledgements and
	// session changes and answers at once.
	MaxBytes   *int32
	MaxRecords *int32
	BatchSize  int32 // 0 = no cap
	IsRenewAck bool
	Partitions []PartitionEntry
	Forgotten  []TopicPartition
	// Readable, when set, is asked for every partition of the session
	// before acquiring: partitions of topics it refuses are not fetched
	// this time (they stay in the session) and are listed in
	// FetchResponse.Unreadable. A revoked permission thus applies to the
	// partitions a session already holds, not only to those a request names.
	Readable func(topic string) bool
}

// AcquiredRange is an acquired_records entry.
type AcquiredRange struct {
	FirstOffset   int64
	LastOffset    int64
	DeliveryCount int32
}

// PartitionFetchResult is one partition of a ShareFetch response.
type PartitionFetchResult struct {
	TopicPartition
	// TopicID is the ID of the topic the result is about ("" when no topic
	// of the name exists): a partition of a deleted topic is reported
	// under its old ID, not the ID of a topic re-created with its name.
	TopicID         string
	ErrorCode       apierr.Reason
	ErrorMessage    string
	AckErrorCode    apierr.Reason
	AckErrorMessage string
	Records         []logstore.Record // exactly one per offset covered by Acquired, ascending
	Acquired        []AcquiredRange
}

// FetchResponse is a ShareFetch response.
type FetchResponse struct {
	AcquisitionLockTimeoutMs int32
	Partitions               []PartitionFetchResult
	// Unreadable lists the session partitions FetchRequest.Readable
	// refused; nothing was acquired from them.
	Unreadable []TopicPartition
}

// AckRequest is a ShareAcknowledge call.
type AckRequest struct {
	GroupID    string
	MemberID   string
	Epoch      int32
	IsRenewAck bool
	Partitions []PartitionEntry
}

// PartitionAckResult is one partition of a ShareAcknowledge response.
type PartitionAckResult struct {
	TopicPartition
	TopicID      string // as in PartitionFetchResult
	ErrorCode    apierr.Reason
	ErrorMessage string
}

// AckResponse is a ShareAcknowledge response.
type AckResponse struct {
	AcquisitionLockTimeoutMs int32
	Partitions               []PartitionAckResult
}

// Transactions is what a read-committed share group needs of a partition's
// transactions (docs/kafka.md "Transactions"): its last stable offset and
// the aborted transactions that overlap [from, to).
type Transactions interface {
	ReadCommitted(ctx context.Context, topic string, partition int32, from, to int64) (lastStable int64, aborted []AbortedTxn, err error)
}

// AbortedTxn is an aborted transaction of a partition: its producer, the
// offset of its first record there and the offset of its abort marker.
type AbortedTxn struct {
	ProducerID, FirstOffset, MarkerOffset int64
}

// GroupConfig is a group's configuration. In UpdateConfig a nil field keeps
// its value; GetConfig and UpdateConfig return every field set (effective).
type GroupConfig struct {
	RecordLockDurationMs    *int32
	DeliveryCountLimit      *int32
	PartitionMaxRecordLocks *int32
	AutoOffsetReset         *string // "latest", "earliest", "by_duration:<ISO-8601>"
	SessionTimeoutMs        *int32
	HeartbeatIntervalMs     *int32
	// DeadLetterTopic is where records archived by the delivery-count
	// limit or by REJECT are copied first ("" = none; docs/dead-letter-topics.md).
	DeadLetterTopic *string
	// Ordering is "none" (the default) or "key": at most one record per
	// key in flight per share-partition, each key's records in offset
	// order (docs/queues.md "Key-ordered share groups").
	Ordering *string
	// The redelivery backoff (docs/queues.md "Redelivery backoff"): a
	// released record with delivery count n is acquirable again only
	// min(initial x multiplier^(n-1), max) ms later; initial 0 = off.
	RedeliveryBackoffInitialMs  *int32
	RedeliveryBackoffMaxMs      *int32
	RedeliveryBackoffMultiplier *float64
	// IsolationLevel is "read_uncommitted" (the default: every record) or
	// "read_committed": only committed records of transactional producers,
	// up to the last stable offset (docs/kafka.md "Transactions").
	IsolationLevel *string
}

// storageError is a request-level KAFKA_STORAGE_ERROR: the share state
// could not be written (a full disk, an I/O error) or is offline after
// damage; retryable.
func storageError(format string, args ...any) *apierr.Error {
	return apierr.New(apierr.KafkaStorageError, format, args...)
}

// ErrClosed is returned after Close: UNAVAILABLE, the server is shutting
// down. It carries its reason, so no transport needs to know it
// (broker.ErrorOf returns it as it is).
var ErrClosed error = &apierr.Error{Reason: apierr.Unavailable, Message: "the server is shutting down"}

// --- Membership -----------------------------------------------------------

// HeartbeatRequest is a ShareGroupHeartbeat call. ClientID and ClientHost
// are not request fields: internal/transport/grpcapi takes them from the call's
// metadata (x-client-id) and peer address.
type HeartbeatRequest struct {
	GroupID              string
	MemberID             string
	MemberEpoch          int32    // 0 joins, -1 leaves, else the current or previous epoch
	RackID               *string  // nil = unchanged
	SubscribedTopicNames []string // empty = unchanged; required to join
	ClientID             string
	ClientHost           string
}

// TopicPartitions is one topic's partitions, ascending.
type TopicPartitions struct {
	Topic string
	// TopicID is the ID of the topic the partitions were assigned of: a
	// Kafka member is told its assignment by topic ID.
	TopicID    string
	Partitions []int32
}

// Assignment is a member's assignment: topics sorted by name, each with at
// least one partition.
type Assignment struct {
	Topics []TopicPartitions
}

// HeartbeatResponse is a ShareGroupHeartbeat response.
type HeartbeatResponse struct {
	MemberID            string
	MemberEpoch         int32 // -1 after a leave
	HeartbeatIntervalMs int32
	Assignment          *Assignment // nil = not sent (unchanged)
}

// --- Admin -----------------------------------------------------------------

// GroupState is a share group's state. StateUnknown is no state: as a
// ListGroups filter it means every group.
type GroupState uint8

const (
	StateUnknown GroupState = iota
	StateEmpty              // no members (sessions do not count)
	StateStable             // at least one member
	StateDead               // a DeleteShareGroup is in progress
)

func (s GroupState) String() string {
	switch s {
	case StateEmpty:
		return "Empty"
	case StateStable:
		return "Stable"
	case StateDead:
		return "Dead"
	}
	return "Unknown"
}

// GroupListing is one ListShareGroups entry.
type GroupListing struct {
	GroupID string
	State   GroupState
}

// MemberDescription is one member of DescribeShareGroup.
type MemberDescription struct {
	MemberID             string
	MemberEpoch          int32
	RackID               string
	ClientID             string
	ClientHost           string
	SubscribedTopicNames []string   // sorted
	Assignment           Assignment // its current assignment (at MemberEpoch)
}

// GroupDescription is a DescribeShareGroup response.
type GroupDescription struct {
	GroupID         string
	State           GroupState
	GroupEpoch      int32
	AssignmentEpoch int32
	Config          GroupConfig         // effective: every field set
	Members         []MemberDescription // sorted by member ID
	// DeadLetteredRecords counts records copied to the group's dead-letter
	// topic, DeadLetterSkippedRecords records archived without their copy
	// (docs/dead-letter-topics.md), both since the server started.
	DeadLetteredRecords, DeadLetterSkippedRecords uint64
}

// PartitionOffsets is one partition of DescribeShareGroupOffsets.
type PartitionOffsets struct {
	Partition    int32
	StartOffset  int64 // SPSO; -1 when uninitialised or on error
	Lag          int64 // high watermark - SPSO - terminal offsets >= SPSO; -1 likewise
	ErrorCode    apierr.Reason
	ErrorMessage string
}

// TopicOffsets is one topic of DescribeShareGroupOffsets.
type TopicOffsets struct {
	Topic      string
	Partitions []PartitionOffsets
}

// PartitionStartOffset is one partition of AlterShareGroupOffsets.
type PartitionStartOffset struct {
	Partition   int32
	StartOffset int64
}

// TopicStartOffsets is one topic of AlterShareGroupOffsets.
type TopicStartOffsets struct {
	Topic      string
	Partitions []PartitionStartOffset
}

// PartitionResult is a per-partition outcome.
type PartitionResult struct {
	Partition    int32
	ErrorCode    apierr.Reason
	ErrorMessage string
}

// TopicPartitionResults is one topic's per-partition outcomes.
type TopicPartitionResults struct {
	Topic      string
	Partitions []PartitionResult
}

// TopicResult is a per-topic outcome (DeleteShareGroupOffsets).
type TopicResult struct {
	Topic        string
	ErrorCode    apierr.Reason
	ErrorMessage string
}
