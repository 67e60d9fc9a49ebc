package shareconsumer

import (
	"errors"
	"fmt"
	"strings"
	"time"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

func (tp TopicPartition) less(o TopicPartition) bool {
	if tp.Topic != o.Topic {
		return tp.Topic < o.Topic
	}
	return tp.Partition < o.Partition
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is a record delivered by Poll. It is locked for this consumer until
// it is acknowledged, its acquisition lock expires, or the consumer's share
// session ends.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	// Key is nil for a keyless record.
	Key []byte
	// Value is nil for a tombstone.
	Value     []byte
	Headers   []Header
	Timestamp time.Time
	// DeliveryCount is how many times the record has been delivered to the
	// group, this delivery included (1 the first time).
	DeliveryCount int32

	gen uint64 // share session generation that acquired it
	seq uint64 // delivery sequence number, unique within the consumer
}

// TopicPartition returns the record's topic and partition.
func (r Record) TopicPartition() TopicPartition {
	return TopicPartition{Topic: r.Topic, Partition: r.Partition}
}

// AckType says how an acknowledgement settles a record.
type AckType int8

const (
	// Accept marks the record processed: it is never delivered again.
	Accept AckType = iota + 1
	// Release gives the record back: it can be delivered again at once (to
	// any consumer of the group), its delivery count unchanged.
	Release
	// Reject marks the record unprocessable: it is archived and never
	// delivered again.
	Reject
	// Renew keeps the record locked: its acquisition lock starts again for
	// the group's record lock duration. The record stays held and must still
	// be acknowledged with Accept, Release or Reject.
	Renew
)

func (t AckType) String() string {
	switch t {
	case Accept:
		return "ACCEPT"
	case Release:
		return "RELEASE"
	case Reject:
		return "REJECT"
	case Renew:
		return "RENEW"
	}
	return fmt.Sprintf("AckType(%d)", int8(t))
}

// ParseAckType parses "accept", "release", "reject" or "renew" (any case).
func ParseAckType(s string) (AckType, error) {
	switch strings.ToLower(s) {
	case "accept":
		return Accept, nil
	case "release":
		return Release, nil
	case "reject":
		return Reject, nil
	case "renew":
		return Renew, nil
	}
	return 0, fmt.Errorf("unknown acknowledgement type %q: want accept, release, reject or renew", s)
}

func (t AckType) valid() bool { return t >= Accept && t <= Renew }

// final reports whether the type settles the record (anything but Renew).
func (t AckType) final() bool { return t != Renew }

func (t AckType) proto() sharelogv1.AcknowledgeType {
	switch t {
	case Accept:
		return sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT
	case Release:
		return sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE
	case Reject:
		return sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT
	case Renew:
		return sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RENEW
	}
	return sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_UNSPECIFIED
}

// AckMode chooses how records are acknowledged.
type AckMode int8

const (
	// AckImplicit (the default): every record returned by a Poll that the
	// application did not acknowledge is accepted by the next Poll, Commit or
	// Close. Acknowledge may still release, reject or renew individual
	// records before that.
	AckImplicit AckMode = iota
	// AckExplicit: records are settled only by Acknowledge. A record left
	// unacknowledged stays locked until its acquisition lock expires (then it
	// is delivered again, possibly to another consumer) or the consumer's
	// share session ends, so records can be processed asynchronously and
	// acknowledged later, from any goroutine.
	AckExplicit
)

func (m AckMode) String() string {
	switch m {
	case AckImplicit:
		return "implicit"
	case AckExplicit:
		return "explicit"
	}
	return fmt.Sprintf("AckMode(%d)", int8(m))
}

// AckRange is a run of consecutive offsets acknowledged with one type.
type AckRange struct {
	FirstOffset int64
	LastOffset  int64
	Type        AckType
}

// Len is the number of offsets in the range.
func (r AckRange) Len() int64 { return r.LastOffset - r.FirstOffset + 1 }

// AckResult is the outcome of the acknowledgements of one partition sent in
// one request (or dropped without being sent). The server applies the
// acknowledgements of one partition entry atomically: they all succeeded
// (Err == nil) or none did.
type AckResult struct {
	TopicPartition
	Ranges []AckRange
	// Err is nil when the acknowledgements were applied. Otherwise it is a
	// *PartitionError (the server refused them, e.g. INVALID_RECORD_STATE
	// after the lock expired), ErrSessionEnded (never applied: the session
	// that held the records ended and they were released for redelivery),
	// ErrAckOutcomeUnknown (sent, but the response was lost: they may or may
	// not have been applied), or the request's error.
	Err error
}

// Count is the number of offsets acknowledged with type t.
func (r AckResult) Count(t AckType) int64 {
	var n int64
	for _, rg := range r.Ranges {
		if rg.Type == t {
			n += rg.Len()
		}
	}
	return n
}

// PartitionError is a per-partition error reported by the server in a
// response body.
type PartitionError struct {
	TopicPartition
	Code    sharelogv1.ErrorCode
	Message string
}

func (e *PartitionError) Error() string {
	name := strings.TrimPrefix(e.Code.String(), "ERROR_CODE_")
	if e.Message == "" {
		return fmt.Sprintf("%s: %s", e.TopicPartition, name)
	}
	return fmt.Sprintf("%s: %s (%s)", e.TopicPartition, e.Message, name)
}

var (
	// ErrClosed is returned by every method once Close has been called.
	ErrClosed = errors.New("shareconsumer: consumer is closed")
	// ErrSessionEnded: the share session that acquired the record ended
	// (server restart, idle eviction, or a session reopened after a
	// transport failure) before the acknowledgement was applied. The server
	// released the record; it will be delivered again (at-least-once).
	ErrSessionEnded = errors.New("shareconsumer: the share session holding the record ended; the record was released for redelivery")
	// ErrAckOutcomeUnknown: the acknowledgement was sent but no response
	// arrived (transport failure), so it may or may not have been applied.
	ErrAckOutcomeUnknown = errors.New("shareconsumer: acknowledgement outcome unknown (the request failed in transport)")
	// ErrNotHeld is returned by Acknowledge for a record this consumer does
	// not hold: not delivered by it, already acknowledged (Accept, Release
	// or Reject), or delivered again since.
	ErrNotHeld = errors.New("shareconsumer: record is not held by this consumer")
	// ErrLockExpired is returned by Acknowledge for a record whose
	// acquisition lock has expired: the server has made it available again
	// (or archived it at the delivery limit), so the acknowledgement could
	// not apply. Renew the locks of records that need longer than the
	// group's record lock duration.
	ErrLockExpired = errors.New("shareconsumer: the record's acquisition lock expired")
)
