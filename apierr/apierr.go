// Package apierr is sharelog's one error vocabulary: the reasons a
// request-level error carries (google.rpc.ErrorInfo.reason, domain
// [Domain]) and the [Error] every domain package returns.
//
// It is a leaf package with no dependencies outside the standard library,
// so that the server's domain packages and the public clients share the
// same names. The server's gRPC layer turns an [Error] into a gRPC status
// (the reason decides the code; docs/errors.md lists them); clients read
// the reason back from the status's ErrorInfo and compare it with these
// constants. Branch on the reason, never on the message.
package apierr

import (
	"errors"
	"fmt"
)

// Domain is google.rpc.ErrorInfo.domain of every sharelog error.
const Domain = "sharelog"

// Reason is a request-level error's name: Kafka's error name where Kafka
// has one.
type Reason string

// None is the reason of no error: a per-partition outcome that succeeded
// (Kafka's NONE, code 0; the proto's ERROR_CODE_NONE). It is not in
// [Reasons].
const None Reason = ""

// Reasons; docs/errors.md says what each means and what a client does.
const (
	InvalidRequest           Reason = "INVALID_REQUEST"
	UnknownTopicOrPartition  Reason = "UNKNOWN_TOPIC_OR_PARTITION"
	TopicAlreadyExists       Reason = "TOPIC_ALREADY_EXISTS"
	OffsetOutOfRange         Reason = "OFFSET_OUT_OF_RANGE"
	CorruptMessage           Reason = "CORRUPT_MESSAGE"
	ShareSessionNotFound     Reason = "SHARE_SESSION_NOT_FOUND"
	InvalidShareSessionEpoch Reason = "INVALID_SHARE_SESSION_EPOCH"
	ShareSessionLimitReached Reason = "SHARE_SESSION_LIMIT_REACHED"
	GroupIDNotFound          Reason = "GROUP_ID_NOT_FOUND"
	UnknownMemberID          Reason = "UNKNOWN_MEMBER_ID"
	FencedMemberEpoch        Reason = "FENCED_MEMBER_EPOCH"
	StaleMemberEpoch         Reason = "STALE_MEMBER_EPOCH"
	UnreleasedInstanceID     Reason = "UNRELEASED_INSTANCE_ID"
	UnsupportedAssignor      Reason = "UNSUPPORTED_ASSIGNOR"
	InvalidRegularExpression Reason = "INVALID_REGULAR_EXPRESSION"
	GroupMaxSizeReached      Reason = "GROUP_MAX_SIZE_REACHED"
	NonEmptyGroup            Reason = "NON_EMPTY_GROUP"
	RollbackRequired         Reason = "ROLLBACK_REQUIRED"
	ThrottlingQuotaExceeded  Reason = "THROTTLING_QUOTA_EXCEEDED"
	// Unavailable: the server is shutting down; retry elsewhere or later.
	Unavailable Reason = "UNAVAILABLE"
	// Internal: an unexpected failure; the message is generic (the server
	// log has the detail) and the outcome of the call is unknown.
	Internal        Reason = "INTERNAL"
	Unauthenticated Reason = "UNAUTHENTICATED"
	// KafkaStorageError: the server could not write, sync or read its disk
	// (or the partition is offline after damage); nothing was applied and a
	// retry may succeed once the cause is gone.
	KafkaStorageError          Reason = "KAFKA_STORAGE_ERROR"
	TopicAuthorizationFailed   Reason = "TOPIC_AUTHORIZATION_FAILED"
	GroupAuthorizationFailed   Reason = "GROUP_AUTHORIZATION_FAILED"
	ClusterAuthorizationFailed Reason = "CLUSTER_AUTHORIZATION_FAILED"
	// NotOwner: in a multi-instance deployment this instance does not own
	// the partition or group and could not forward the call.
	NotOwner Reason = "NOT_OWNER"
	// OwnerUnreachable: the owning instance could not be reached; the call
	// was not delivered to it, so nothing was applied.
	OwnerUnreachable Reason = "OWNER_UNREACHABLE"
	// OutcomeUnknown: a call forwarded to the owning instance was sent,
	// but its answer was lost (the connection broke, the hop timed out):
	// it may have been applied. Retrying is safe only where a retry cannot
	// duplicate (a Produce with producer_id, acknowledgements, reads).
	OutcomeUnknown Reason = "OUTCOME_UNKNOWN"
	// PolicyViolation: the request is not allowed for this resource (a
	// purge of a compact-only topic).
	PolicyViolation Reason = "POLICY_VIOLATION"
	// InvalidRecordState: an acknowledged record is not acquired by the
	// session (lock expired, already acknowledged, never acquired).
	InvalidRecordState Reason = "INVALID_RECORD_STATE"
	// RequestTimedOut: the server gave up waiting within the request's
	// timeout; the outcome is unknown.
	RequestTimedOut Reason = "REQUEST_TIMED_OUT"
	// OutOfOrderSequenceNumber: an idempotent produce's base_sequence is
	// not the one after the producer's last batch on the partition (a
	// batch in between was lost), or is older than the batches the
	// partition remembers (docs/produce.md).
	OutOfOrderSequenceNumber Reason = "OUT_OF_ORDER_SEQUENCE_NUMBER"
	// InvalidProducerEpoch: an idempotent produce's producer_epoch is
	// older than the one the partition has seen for the producer id.
	InvalidProducerEpoch Reason = "INVALID_PRODUCER_EPOCH"
	// ProducerFenced: a newer instance of the producer (same transactional
	// id, higher epoch) exists; this one must stop. Kafka's transactional
	// producers get it; the gRPC/REST producer ids (InitProducer, always a
	// new id) are never fenced.
	ProducerFenced Reason = "PRODUCER_FENCED"

	// Classic consumer groups (Kafka's JoinGroup, SyncGroup, Heartbeat,
	// LeaveGroup, OffsetCommit; docs/consumer-groups.md).

	// IllegalGeneration: the request's generation is not the group's.
	IllegalGeneration Reason = "ILLEGAL_GENERATION"
	// InconsistentGroupProtocol: the member's protocol type or protocols
	// do not match the group's.
	InconsistentGroupProtocol Reason = "INCONSISTENT_GROUP_PROTOCOL"
	// InvalidGroupID: an empty group id where one is needed.
	InvalidGroupID Reason = "INVALID_GROUP_ID"
	// InvalidSessionTimeout: a session timeout outside the server's bounds.
	InvalidSessionTimeout Reason = "INVALID_SESSION_TIMEOUT"
	// RebalanceInProgress: the group is rebalancing; rejoin.
	RebalanceInProgress Reason = "REBALANCE_IN_PROGRESS"
	// OffsetMetadataTooLarge: a committed offset's metadata is too long.
	OffsetMetadataTooLarge Reason = "OFFSET_METADATA_TOO_LARGE"
	// MemberIDRequired: a new member must join again with the member id
	// the answer carries (KIP-394).
	MemberIDRequired Reason = "MEMBER_ID_REQUIRED"
	// FencedInstanceID: another member joined with this static instance id.
	FencedInstanceID Reason = "FENCED_INSTANCE_ID"
	// GroupSubscribedToTopic: OffsetDelete of a topic the group consumes.
	GroupSubscribedToTopic Reason = "GROUP_SUBSCRIBED_TO_TOPIC"
	// ResourceNotFound: a named thing other than a topic, partition or
	// group does not exist (a SCRAM credential to delete or describe).
	ResourceNotFound Reason = "RESOURCE_NOT_FOUND"
	// UnsupportedSaslMechanism: a SASL mechanism this server does not
	// serve, or a SCRAM credential for a mechanism other than
	// SCRAM-SHA-256 and SCRAM-SHA-512.
	UnsupportedSaslMechanism Reason = "UNSUPPORTED_SASL_MECHANISM"
	// UnacceptableCredential: a SCRAM credential that may not be stored
	// (iterations outside 4096..16384, an empty user, password or salt).
	UnacceptableCredential Reason = "UNACCEPTABLE_CREDENTIAL"
	// MessageTooLarge: a record (gRPC, REST) or record batch (Kafka)
	// larger than its topic's max.message.bytes; nothing was appended.
	MessageTooLarge Reason = "MESSAGE_TOO_LARGE"

	// Kafka transactions (the Kafka listener's transaction coordinator;
	// docs/kafka.md "Transactions").

	// InvalidTxnState: the call does not fit the transaction's state (a
	// produce to a partition not added to it, an EndTxn with no
	// transaction, a commit while an abort is in progress).
	InvalidTxnState Reason = "INVALID_TXN_STATE"
	// InvalidProducerIDMapping: the producer id is not the transactional
	// id's.
	InvalidProducerIDMapping Reason = "INVALID_PRODUCER_ID_MAPPING"
	// InvalidTransactionTimeout: a transaction timeout above
	// --transaction-max-timeout, or not positive.
	InvalidTransactionTimeout Reason = "INVALID_TRANSACTION_TIMEOUT"
	// ConcurrentTransactions: the transactional id's previous transaction
	// is still being completed; retry.
	ConcurrentTransactions Reason = "CONCURRENT_TRANSACTIONS"
	// TransactionalIDAuthorizationFailed: the caller lacks the ACL on the
	// transactional id.
	TransactionalIDAuthorizationFailed Reason = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
	// UnstableOffsetCommit: a committed offset a transaction has not
	// settled yet (an OffsetFetch that requires stable offsets); retry.
	UnstableOffsetCommit Reason = "UNSTABLE_OFFSET_COMMIT"
	// TransactionalIDNotFound: DescribeTransactions of an unknown id.
	TransactionalIDNotFound Reason = "TRANSACTIONAL_ID_NOT_FOUND"
)

// Reasons lists every reason, in the order of the constants.
func Reasons() []Reason {
	return []Reason{
		InvalidRequest, UnknownTopicOrPartition, TopicAlreadyExists, OffsetOutOfRange,
		CorruptMessage, ShareSessionNotFound, InvalidShareSessionEpoch, ShareSessionLimitReached,
		GroupIDNotFound, UnknownMemberID, FencedMemberEpoch,
		StaleMemberEpoch, UnreleasedInstanceID, UnsupportedAssignor, InvalidRegularExpression, GroupMaxSizeReached, NonEmptyGroup,
		RollbackRequired, ThrottlingQuotaExceeded, Unavailable, Internal, Unauthenticated,
		KafkaStorageError, TopicAuthorizationFailed, GroupAuthorizationFailed,
		ClusterAuthorizationFailed, NotOwner, OwnerUnreachable, OutcomeUnknown, PolicyViolation,
		InvalidRecordState, RequestTimedOut, OutOfOrderSequenceNumber, InvalidProducerEpoch,
		ProducerFenced, IllegalGeneration, InconsistentGroupProtocol, InvalidGroupID,
		InvalidSessionTimeout, RebalanceInProgress, OffsetMetadataTooLarge, MemberIDRequired,
		FencedInstanceID, GroupSubscribedToTopic,
		ResourceNotFound, UnsupportedSaslMechanism, UnacceptableCredential,
		MessageTooLarge,
		InvalidTxnState, InvalidProducerIDMapping, InvalidTransactionTimeout, ConcurrentTransactions,
		TransactionalIDAuthorizationFailed, UnstableOffsetCommit, TransactionalIDNotFound,
	}
}

// kafkaCodes are the Kafka protocol's numeric error codes of the reasons.
// A reason named after a Kafka error has that error's code. The others
// take the code whose client behaviour fits (docs/errors.md "Kafka codes"):
//   - UNAVAILABLE and NOT_OWNER: NOT_LEADER_OR_FOLLOWER (6), on which a
//     Kafka client refreshes its metadata and retries;
//   - OWNER_UNREACHABLE and OUTCOME_UNKNOWN: REQUEST_TIMED_OUT (7),
//     retriable (a Kafka producer retries with its sequence numbers);
//   - INTERNAL: UNKNOWN_SERVER_ERROR (-1);
//   - UNAUTHENTICATED: SASL_AUTHENTICATION_FAILED (58);
//   - ROLLBACK_REQUIRED: OFFSET_OUT_OF_RANGE (1): the position is no
//     longer valid and the consumer resets it.
//
// The Kafka listener answers group-level calls with the coordinator codes
// instead of 6 (a transport rule, not a reason's).
var kafkaCodes = map[Reason]int16{
	InvalidRequest:             42,
	UnknownTopicOrPartition:    3,
	TopicAlreadyExists:         36,
	OffsetOutOfRange:           1,
	CorruptMessage:             2,
	ShareSessionNotFound:       122,
	InvalidShareSessionEpoch:   123,
	ShareSessionLimitReached:   133,
	GroupIDNotFound:            69,
	UnknownMemberID:            25,
	FencedMemberEpoch:          110,
	UnreleasedInstanceID:       111,
	UnsupportedAssignor:        112,
	StaleMemberEpoch:           113,
	InvalidRegularExpression:   128,
	GroupMaxSizeReached:        81,
	NonEmptyGroup:              68,
	RollbackRequired:           1,
	ThrottlingQuotaExceeded:    89,
	Unavailable:                6,
	Internal:                   -1,
	Unauthenticated:            58,
	KafkaStorageError:          56,
	TopicAuthorizationFailed:   29,
	GroupAuthorizationFailed:   30,
	ClusterAuthorizationFailed: 31,
	NotOwner:                   6,
	OwnerUnreachable:           7,
	OutcomeUnknown:             7,
	PolicyViolation:            44,
	InvalidRecordState:         121,
	RequestTimedOut:            7,
	OutOfOrderSequenceNumber:   45,
	InvalidProducerEpoch:       47,
	ProducerFenced:             90,
	IllegalGeneration:          22,
	InconsistentGroupProtocol:  23,
	InvalidGroupID:             24,
	InvalidSessionTimeout:      26,
	RebalanceInProgress:        27,
	OffsetMetadataTooLarge:     12,
	MemberIDRequired:           79,
	FencedInstanceID:           82,
	GroupSubscribedToTopic:     86,
	ResourceNotFound:           91,
	UnsupportedSaslMechanism:   33,
	UnacceptableCredential:     93,
	MessageTooLarge:            10,

	InvalidTxnState:                    48,
	InvalidProducerIDMapping:           49,
	InvalidTransactionTimeout:          50,
	ConcurrentTransactions:             51,
	TransactionalIDAuthorizationFailed: 53,
	UnstableOffsetCommit:               88,
	TransactionalIDNotFound:            105,
}

// KafkaCode is the Kafka protocol's numeric error code of r (the value of
// the per-partition ErrorCode of the protos, which number Kafka's codes):
// NONE (0) for [None], UNKNOWN_SERVER_ERROR (-1) for a reason outside the
// vocabulary. A request-level error always has a reason; one without
// (an *Error whose Reason is "") is the transport's to treat as INTERNAL.
func (r Reason) KafkaCode() int16 {
	if r == None {
		return 0
	}
	if c, ok := kafkaCodes[r]; ok {
		return c
	}
	return -1
}

// ReasonOfKafkaCode is the reason whose Kafka code is c, for the codes that
// one reason owns: NONE (0) is [None], and a code shared by several reasons
// (6, 7, 1) names the reason that carries Kafka's own name where there is
// one (NOT_OWNER for 6, REQUEST_TIMED_OUT for 7, OFFSET_OUT_OF_RANGE for 1).
// Unknown codes are INTERNAL.
func ReasonOfKafkaCode(c int16) Reason {
	switch c {
	case 0:
		return None
	case 6:
		return NotOwner
	case 7:
		return RequestTimedOut
	case 1:
		return OffsetOutOfRange
	}
	for r, code := range kafkaCodes {
		if code == c {
			return r
		}
	}
	return Internal
}

// Error is a request-level error: the call failed as a whole and, unless
// its reason's documentation says otherwise, changed nothing.
type Error struct {
	Reason  Reason
	Message string
	// Metadata carries values a client can act on (expected_epoch,
	// log_start_offset, …); every value is a string on the wire.
	Metadata map[string]string
}

func (e *Error) Error() string { return e.Message }

// New returns an Error with a formatted message and no metadata.
func New(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns an INVALID_REQUEST error.
func Invalid(format string, args ...any) *Error {
	return New(InvalidRequest, format, args...)
}

// ReasonOf returns the reason of the first *Error in err's chain, or "".
func ReasonOf(err error) Reason {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return ""
}
