package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/internal/changestream"
	sljs "github.com/sharelog/sharelog/internal/jetstream"
	"github.com/sharelog/sharelog/internal/logstore"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// shareGroupCodes maps share-group reasons to the gRPC codes of api.md §7.
var shareGroupCodes = map[string]codes.Code{
	sharegroup.ReasonInvalidRequest:           codes.InvalidArgument,
	sharegroup.ReasonShareSessionNotFound:     codes.NotFound,
	sharegroup.ReasonInvalidShareSessionEpoch: codes.FailedPrecondition,
	sharegroup.ReasonShareSessionLimitReached: codes.ResourceExhausted,
	sharegroup.ReasonGroupIDNotFound:          codes.NotFound,
	sharegroup.ReasonUnknownMemberID:          codes.NotFound,
	sharegroup.ReasonFencedMemberEpoch:        codes.FailedPrecondition,
	sharegroup.ReasonGroupMaxSizeReached:      codes.ResourceExhausted,
	sharegroup.ReasonNonEmptyGroup:            codes.FailedPrecondition,
	sharegroup.ReasonKafkaStorageError:        codes.Unavailable,
}

// changeStreamCodes maps change-stream reasons to the gRPC codes of api.md §7.
var changeStreamCodes = map[string]codes.Code{
	changestream.ReasonInvalidRequest:          codes.InvalidArgument,
	changestream.ReasonUnknownTopicOrPartition: codes.NotFound,
	changestream.ReasonRollbackRequired:        codes.FailedPrecondition,
	changestream.ReasonOffsetOutOfRange:        codes.OutOfRange,
	changestream.ReasonThrottlingQuotaExceeded: codes.ResourceExhausted,
	changestream.ReasonUnavailable:             codes.Unavailable,
}

// Reasons of api.md §7, carried in ErrorInfo.reason.
const (
	ReasonInvalidRequest           = "INVALID_REQUEST"
	ReasonUnknownTopicOrPartition  = "UNKNOWN_TOPIC_OR_PARTITION"
	ReasonTopicAlreadyExists       = "TOPIC_ALREADY_EXISTS"
	ReasonOffsetOutOfRange         = "OFFSET_OUT_OF_RANGE"
	ReasonCorruptMessage           = "CORRUPT_MESSAGE"
	ReasonShareSessionNotFound     = "SHARE_SESSION_NOT_FOUND"
	ReasonInvalidShareSessionEpoch = "INVALID_SHARE_SESSION_EPOCH"
	ReasonUnavailable              = "UNAVAILABLE"
	ReasonInternal                 = "INTERNAL"
	// Cluster mode (docs/cluster.md): this instance is not the owner and
	// cannot name one that takes the call (retry, possibly elsewhere), or
	// the owner it forwarded to did not answer. Both are UNAVAILABLE.
	ReasonNotOwner         = "NOT_OWNER"
	ReasonOwnerUnreachable = "OWNER_UNREACHABLE"
)

// NotOwner is the retryable error of a call this instance cannot serve or
// forward because no owner is known to it (or it was just deposed).
func NotOwner(msg string) *Error {
	return &Error{Code: codes.Unavailable, Reason: ReasonNotOwner, Message: msg}
}

// OwnerUnreachable is the retryable error of a call forwarded to an owner
// that did not answer, or of an instance cut off from the cluster.
func OwnerUnreachable(msg string) *Error {
	return &Error{Code: codes.Unavailable, Reason: ReasonOwnerUnreachable, Message: msg}
}

// ErrorDomain is ErrorInfo.domain for every sharelog error.
const ErrorDomain = "sharelog"

// Error is a request-level error with its api.md reason. Handlers return it
// (or a logstore sentinel, which toStatus maps); it becomes a gRPC status.
type Error struct {
	Code     codes.Code
	Reason   string
	Message  string
	Metadata map[string]string
}

func (e *Error) Error() string { return e.Message }

// GRPCStatus lets status.FromError see the rich status.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(e.Code, e.Message)
	info := &errdetails.ErrorInfo{Reason: e.Reason, Domain: ErrorDomain, Metadata: e.Metadata}
	if withInfo, err := st.WithDetails(info); err == nil {
		return withInfo
	}
	return st
}

func invalid(format string, args ...any) *Error {
	return &Error{Code: codes.InvalidArgument, Reason: ReasonInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

func unknownTopic(topic string, partition int32) *Error {
	return &Error{
		Code:    codes.NotFound,
		Reason:  ReasonUnknownTopicOrPartition,
		Message: fmt.Sprintf("topic %q has no partition %d", topic, partition),
	}
}

func outOfRange(offset, logStart, hw int64) *Error {
	return &Error{
		Code:   codes.OutOfRange,
		Reason: ReasonOffsetOutOfRange,
		Message: fmt.Sprintf("offset %d is outside the readable range [%d, %d] (log start offset, high watermark)",
			offset, logStart, hw),
		Metadata: map[string]string{
			"log_start_offset": strconv.FormatInt(logStart, 10),
			"high_watermark":   strconv.FormatInt(hw, 10),
		},
	}
}

// toStatus is the one translation point from domain errors to gRPC statuses.
// Errors it does not recognise are logged with the trace id and masked.
func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	var sg *sharegroup.Error
	var cs *changestream.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &cs):
		code, ok := changeStreamCodes[cs.Reason]
		if !ok {
			code = codes.Internal
		}
		return &Error{Code: code, Reason: cs.Reason, Message: cs.Message, Metadata: cs.Metadata}
	case errors.As(err, &sg):
		code, ok := shareGroupCodes[sg.Reason]
		if !ok {
			code = codes.Internal
		}
		return &Error{Code: code, Reason: sg.Reason, Message: sg.Message, Metadata: sg.Metadata}
	case errors.Is(err, sharegroup.ErrClosed):
		return &Error{Code: codes.Unavailable, Reason: ReasonUnavailable, Message: "the server is shutting down"}
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	case errors.Is(err, logstore.ErrUnknownTopic):
		return &Error{Code: codes.NotFound, Reason: ReasonUnknownTopicOrPartition, Message: err.Error()}
	case errors.Is(err, logstore.ErrTopicExists):
		return &Error{Code: codes.AlreadyExists, Reason: ReasonTopicAlreadyExists, Message: err.Error()}
	case errors.Is(err, logstore.ErrInvalidArgument):
		return &Error{Code: codes.InvalidArgument, Reason: ReasonInvalidRequest, Message: err.Error()}
	case errors.Is(err, logstore.ErrOffsetOutOfRange):
		return &Error{Code: codes.OutOfRange, Reason: ReasonOffsetOutOfRange, Message: err.Error()}
	case errors.Is(err, sljs.ErrFenced):
		// Another instance wrote the partition: this one was deposed.
		return NotOwner("this instance is no longer the owner of the partition; retry")
	case errors.Is(err, logstore.ErrStorage), errors.Is(err, logstore.ErrOffline):
		// Retryable: the disk is full or damaged; the partition recovers
		// once the cause is gone (or an operator repairs it).
		log.WarnContext(ctx, "storage error", "err", err)
		return &Error{Code: codes.Unavailable, Reason: "KAFKA_STORAGE_ERROR",
			Message: "the partition's storage is failing or offline; retry later (the server log has the details)"}
	case errors.Is(err, logstore.ErrCorrupt):
		logInternal(ctx, log, err)
		return &Error{Code: codes.DataLoss, Reason: ReasonCorruptMessage,
			Message: "stored data failed its checksum; the server log has the details"}
	case errors.Is(err, logstore.ErrClosed):
		return &Error{Code: codes.Unavailable, Reason: ReasonUnavailable, Message: "the server is shutting down"}
	}
	logInternal(ctx, log, err)
	msg := "internal error"
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		msg += "; trace id " + sc.TraceID().String()
	}
	return &Error{Code: codes.Internal, Reason: ReasonInternal, Message: msg}
}

func logInternal(ctx context.Context, log *slog.Logger, err error) {
	attrs := []any{"err", err}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		attrs = append(attrs, "trace_id", sc.TraceID().String())
	}
	log.ErrorContext(ctx, "internal error", attrs...)
}
