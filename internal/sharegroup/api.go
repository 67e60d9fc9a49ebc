package sharegroup

import (
	"errors"

	"github.com/sharelog/sharelog/internal/logstore"
)

// This file fixes the domain contract between internal/service (which
// translates protobuf <-> these types and maps errors) and the share-group
// implementation. Semantics: /work/shared/spec/share-groups.md.

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
	Batches []AckBatch
}

// FetchRequest is a ShareFetch call.
type FetchRequest struct {
	GroupID    string
	MemberID   string
	Epoch      int32
	MaxWaitMs  int32
	MinBytes   int32
	MaxBytes   int32 // 0 = 1 MiB
	MaxRecords int32 // 0 = 500
	BatchSize  int32 // 0 = no cap
	IsRenewAck bool
	Partitions []PartitionEntry
	Forgotten  []TopicPartition
}

// ErrorCode is a per-partition result code (the proto ErrorCode without prefix).
type ErrorCode int16

const (
	CodeNone ErrorCode = iota
	CodeUnknownTopicOrPartition
	CodeInvalidRequest
	CodeInvalidRecordState
	CodeKafkaStorageError
	CodeUnknownServerError
	CodeOffsetOutOfRange
)

// AcquiredRange is an acquired_records entry.
type AcquiredRange struct {
	FirstOffset   int64
	LastOffset    int64
	DeliveryCount int32
}

// PartitionFetchResult is one partition of a ShareFetch response.
type PartitionFetchResult struct {
	TopicPartition
	ErrorCode       ErrorCode
	ErrorMessage    string
	AckErrorCode    ErrorCode
	AckErrorMessage string
	Records         []logstore.Record // exactly one per offset covered by Acquired, ascending
	Acquired        []AcquiredRange
}

// FetchResponse is a ShareFetch response.
type FetchResponse struct {
	AcquisitionLockTimeoutMs int32
	Partitions               []PartitionFetchResult
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
	ErrorCode    ErrorCode
	ErrorMessage string
}

// AckResponse is a ShareAcknowledge response.
type AckResponse struct {
	AcquisitionLockTimeoutMs int32
	Partitions               []PartitionAckResult
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
}

// Reasons of request-level errors (api.md §7).
const (
	ReasonInvalidRequest           = "INVALID_REQUEST"
	ReasonShareSessionNotFound     = "SHARE_SESSION_NOT_FOUND"
	ReasonInvalidShareSessionEpoch = "INVALID_SHARE_SESSION_EPOCH"
	ReasonShareSessionLimitReached = "SHARE_SESSION_LIMIT_REACHED"
	ReasonGroupIDNotFound          = "GROUP_ID_NOT_FOUND"
	ReasonUnknownMemberID          = "UNKNOWN_MEMBER_ID"
	ReasonFencedMemberEpoch        = "FENCED_MEMBER_EPOCH"
	ReasonGroupMaxSizeReached      = "GROUP_MAX_SIZE_REACHED"
	ReasonNonEmptyGroup            = "NON_EMPTY_GROUP"
)

// Error is a request-level error: the call changed nothing (unless the spec
// says otherwise). internal/service maps Reason to the gRPC code of api.md §7.
type Error struct {
	Reason   string
	Message  string
	Metadata map[string]string // e.g. expected_epoch, max_sessions
}

func (e *Error) Error() string { return e.Message }

// ErrClosed is returned after Close.
var ErrClosed = errors.New("share groups closed")

// The implementation provides (in other files of this package):
//
//	type Options struct {
//		Dir           string             // state directory (<data-dir>/sharegroups)
//		Fsync         logstore.FsyncMode // as the log: always = durable before the response
//		FsyncInterval time.Duration
//		Logger        *slog.Logger
//		// Server defaults and bounds (api.md §8, share-groups.md §9):
//		RecordLockDuration, MinRecordLockDuration, MaxRecordLockDuration time.Duration
//		DeliveryCountLimit, PartitionMaxRecordLocks                      int
//		SessionTimeout, HeartbeatInterval                                 time.Duration
//		MaxShareSessions                                                  int
//		SessionIdleTimeout                                                time.Duration
//	}
//	func Open(store logstore.Store, opts Options) (*Manager, error)
//	func (m *Manager) ShareFetch(ctx context.Context, req FetchRequest) (FetchResponse, error)
//	func (m *Manager) ShareAcknowledge(ctx context.Context, req AckRequest) (AckResponse, error)
//	func (m *Manager) GetConfig(groupID string) (GroupConfig, error)
//	func (m *Manager) UpdateConfig(groupID string, c GroupConfig) (GroupConfig, error)
//	func (m *Manager) TopicDeleted(topicID string) // drop share state bound to a deleted topic
//	func (m *Manager) Close() error                // end sessions, wake fetches, sync state
