package broker

import (
	"context"
	"errors"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Messages of the errors whose cause stays in the server (the log has it).
const (
	msgShuttingDown = "the server is shutting down"
	msgFenced       = "this instance is no longer the owner of the partition; retry"
	msgStorage      = "the partition's storage is failing or offline; retry later (the server log has the details)"
	msgCorrupt      = "stored data failed its checksum; the server log has the details"
	msgInternal     = "internal error"
)

// ErrorOf is the request-level error err stands for: the one place where
// the storage and domain sentinels get their reasons (docs/errors.md), so
// that every transport answers the same cause the same way and keeps only
// its own reason → status table. nil for nil. In order:
//   - an *apierr.Error in err's chain is returned as it is (the domain
//     packages' own errors, and sentinels that carry their reason, such as
//     sharegroup.ErrClosed);
//   - context cancellation and deadlines: REQUEST_TIMED_OUT (a transport
//     whose caller can see its own cancellation, gRPC, answers that
//     instead);
//   - a closed store: UNAVAILABLE (the server is shutting down);
//   - the store's UNKNOWN_TOPIC_OR_PARTITION, TOPIC_ALREADY_EXISTS,
//     INVALID_REQUEST and OFFSET_OUT_OF_RANGE, with the store's message;
//   - a fenced append (cluster mode: another instance took the partition
//     over, docs/cluster.md): NOT_OWNER;
//   - a failing or offline partition: KAFKA_STORAGE_ERROR; stored data that
//     failed its checksum: CORRUPT_MESSAGE; both with a generic message;
//   - anything else: INTERNAL, "internal error".
//
// The messages of the last three never carry err's text (paths, causes):
// the transport logs err when it answers one of them for a sentinel.
func ErrorOf(err error) *apierr.Error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*apierr.Error](err); ok {
		return e
	}
	switch {
	case errors.Is(err, context.Canceled):
		return apierr.New(apierr.RequestTimedOut, "the call was cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return apierr.New(apierr.RequestTimedOut, "the call's deadline passed")
	case errors.Is(err, logstore.ErrClosed):
		return apierr.New(apierr.Unavailable, msgShuttingDown)
	case errors.Is(err, logstore.ErrUnknownTopic):
		return apierr.New(apierr.UnknownTopicOrPartition, "%s", err)
	case errors.Is(err, logstore.ErrTopicExists):
		return apierr.New(apierr.TopicAlreadyExists, "%s", err)
	case errors.Is(err, logstore.ErrInvalidArgument):
		return apierr.Invalid("%s", err)
	case errors.Is(err, logstore.ErrOffsetOutOfRange):
		return apierr.New(apierr.OffsetOutOfRange, "%s", err)
	case errors.Is(err, logstore.ErrFenced):
		return apierr.New(apierr.NotOwner, msgFenced)
	case errors.Is(err, logstore.ErrStorage), errors.Is(err, logstore.ErrOffline):
		return apierr.New(apierr.KafkaStorageError, msgStorage)
	case errors.Is(err, logstore.ErrCorrupt):
		return apierr.New(apierr.CorruptMessage, msgCorrupt)
	}
	return apierr.New(apierr.Internal, msgInternal)
}

// ReasonOf is the reason of [ErrorOf](err): [apierr.None] for nil, never
// "" for an error (an *apierr.Error without a reason is INTERNAL).
func ReasonOf(err error) apierr.Reason {
	e := ErrorOf(err)
	switch {
	case e == nil:
		return apierr.None
	case e.Reason == apierr.None:
		return apierr.Internal
	}
	return e.Reason
}
