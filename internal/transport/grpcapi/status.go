package grpcapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
)

// ReasonStatus is how one reason travels: its gRPC code, and the HTTP
// status the REST gateway answers for that code.
type ReasonStatus struct {
	Code codes.Code
	HTTP int
}

// reasonStatus is the one table from reason to gRPC code to HTTP status;
// docs/errors.md documents the same table (a test holds them together).
var reasonStatus = map[apierr.Reason]ReasonStatus{
	apierr.InvalidRequest:                     {codes.InvalidArgument, http.StatusBadRequest},
	apierr.UnknownTopicOrPartition:            {codes.NotFound, http.StatusNotFound},
	apierr.TopicAlreadyExists:                 {codes.AlreadyExists, http.StatusConflict},
	apierr.OffsetOutOfRange:                   {codes.OutOfRange, http.StatusBadRequest},
	apierr.CorruptMessage:                     {codes.DataLoss, http.StatusInternalServerError},
	apierr.ShareSessionNotFound:               {codes.NotFound, http.StatusNotFound},
	apierr.InvalidShareSessionEpoch:           {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.ShareSessionLimitReached:           {codes.ResourceExhausted, http.StatusTooManyRequests},
	apierr.GroupIDNotFound:                    {codes.NotFound, http.StatusNotFound},
	apierr.UnknownMemberID:                    {codes.NotFound, http.StatusNotFound},
	apierr.FencedMemberEpoch:                  {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.StaleMemberEpoch:                   {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.UnreleasedInstanceID:               {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.UnsupportedAssignor:                {codes.InvalidArgument, http.StatusBadRequest},
	apierr.InvalidRegularExpression:           {codes.InvalidArgument, http.StatusBadRequest},
	apierr.GroupMaxSizeReached:                {codes.ResourceExhausted, http.StatusTooManyRequests},
	apierr.NonEmptyGroup:                      {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.RollbackRequired:                   {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.ThrottlingQuotaExceeded:            {codes.ResourceExhausted, http.StatusTooManyRequests},
	apierr.Unavailable:                        {codes.Unavailable, http.StatusServiceUnavailable},
	apierr.Internal:                           {codes.Internal, http.StatusInternalServerError},
	apierr.Unauthenticated:                    {codes.Unauthenticated, http.StatusUnauthorized},
	apierr.KafkaStorageError:                  {codes.Unavailable, http.StatusServiceUnavailable},
	apierr.TopicAuthorizationFailed:           {codes.PermissionDenied, http.StatusForbidden},
	apierr.GroupAuthorizationFailed:           {codes.PermissionDenied, http.StatusForbidden},
	apierr.ClusterAuthorizationFailed:         {codes.PermissionDenied, http.StatusForbidden},
	apierr.NotOwner:                           {codes.Unavailable, http.StatusServiceUnavailable},
	apierr.OwnerUnreachable:                   {codes.Unavailable, http.StatusServiceUnavailable},
	apierr.OutcomeUnknown:                     {codes.Unavailable, http.StatusServiceUnavailable},
	apierr.PolicyViolation:                    {codes.InvalidArgument, http.StatusBadRequest},
	apierr.InvalidRecordState:                 {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.RequestTimedOut:                    {codes.DeadlineExceeded, http.StatusGatewayTimeout},
	apierr.OutOfOrderSequenceNumber:           {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.InvalidProducerEpoch:               {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.ProducerFenced:                     {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.InvalidTxnState:                    {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.InvalidProducerIDMapping:           {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.InvalidTransactionTimeout:          {codes.InvalidArgument, http.StatusBadRequest},
	apierr.ConcurrentTransactions:             {codes.Unavailable, http.StatusServiceUnavailable},
	apierr.TransactionalIDAuthorizationFailed: {codes.PermissionDenied, http.StatusForbidden},
	apierr.UnstableOffsetCommit:               {codes.Unavailable, http.StatusServiceUnavailable},
	apierr.TransactionalIDNotFound:            {codes.NotFound, http.StatusNotFound},
	apierr.IllegalGeneration:                  {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.InconsistentGroupProtocol:          {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.InvalidGroupID:                     {codes.InvalidArgument, http.StatusBadRequest},
	apierr.InvalidSessionTimeout:              {codes.InvalidArgument, http.StatusBadRequest},
	apierr.RebalanceInProgress:                {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.OffsetMetadataTooLarge:             {codes.InvalidArgument, http.StatusBadRequest},
	apierr.MemberIDRequired:                   {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.FencedInstanceID:                   {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.GroupSubscribedToTopic:             {codes.FailedPrecondition, http.StatusBadRequest},
	apierr.ResourceNotFound:                   {codes.NotFound, http.StatusNotFound},
	apierr.UnsupportedSaslMechanism:           {codes.InvalidArgument, http.StatusBadRequest},
	apierr.UnacceptableCredential:             {codes.InvalidArgument, http.StatusBadRequest},
	apierr.MessageTooLarge:                    {codes.InvalidArgument, http.StatusBadRequest},
}

// StatusOf returns how reason r travels; ok is false for a reason outside
// the vocabulary (which the server answers as INTERNAL).
func StatusOf(r apierr.Reason) (s ReasonStatus, ok bool) {
	s, ok = reasonStatus[r]
	return s, ok
}

// Status returns the gRPC status of a request-level error, with a
// google.rpc.ErrorInfo carrying its reason and metadata.
func Status(e *apierr.Error) *status.Status {
	code := codes.Internal
	if s, ok := reasonStatus[e.Reason]; ok {
		code = s.Code
	}
	st := status.New(code, e.Message)
	info := &errdetails.ErrorInfo{Reason: string(e.Reason), Domain: apierr.Domain, Metadata: e.Metadata}
	if withInfo, err := st.WithDetails(info); err == nil {
		return withInfo
	}
	return st
}

// Errors translates what a handler (or an interceptor after it) returns
// into the gRPC status a client sees. It is the one place where domain
// errors become statuses; install its Unary and Stream methods as
// interceptors outside every handler.
type Errors struct{ Log *slog.Logger }

// Unary is the unary interceptor.
func (x Errors) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, x.toStatus(ctx, err)
	}
	return resp, nil
}

// Stream is the stream interceptor.
func (x Errors) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := handler(srv, ss); err != nil {
		return x.toStatus(ss.Context(), err)
	}
	return nil
}

// toStatus maps err to a status error:
//   - an *apierr.Error keeps its reason, message and metadata;
//   - an error that already is a gRPC status passes through untouched;
//   - context cancellation and deadlines become CANCELLED and
//     DEADLINE_EXCEEDED (without a reason: the caller ended the call);
//   - any other error gets the reason the domain gives it (broker.ErrorOf:
//     the store's sentinels), and is logged where that answer hides its
//     cause: failing storage as a warning, damage and anything unexpected
//     (masked as INTERNAL, with the trace id) as an error.
func (x Errors) toStatus(ctx context.Context, err error) error {
	log := x.Log
	if log == nil {
		log = slog.Default()
	}
	if e, ok := errors.AsType[*apierr.Error](err); ok {
		if _, known := reasonStatus[e.Reason]; !known {
			logInternal(ctx, log, err)
		}
		return Status(e).Err()
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	}
	e := broker.ErrorOf(err)
	switch e.Reason {
	case apierr.KafkaStorageError:
		// Retryable: the disk is full or damaged; the partition recovers
		// once the cause is gone (or an operator repairs it).
		log.WarnContext(ctx, "storage error", "err", err)
	case apierr.CorruptMessage:
		logInternal(ctx, log, err)
	case apierr.Internal:
		logInternal(ctx, log, err)
		if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
			e = apierr.New(apierr.Internal, "%s; trace id %s", e.Message, sc.TraceID().String())
		}
	}
	return Status(e).Err()
}

func logInternal(ctx context.Context, log *slog.Logger, err error) {
	attrs := []any{"err", err}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		attrs = append(attrs, "trace_id", sc.TraceID().String())
	}
	log.ErrorContext(ctx, "internal error", attrs...)
}

// FromStatus is Status reversed, for the answers of another instance that
// the domain judges (a forwarded append's outcome becomes a per-partition
// result, docs/produce.md): a status error carrying sharelog's ErrorInfo
// becomes the *apierr.Error it was made from; a deadline or cancellation
// without one becomes REQUEST_TIMED_OUT (the outcome is unknown). Any
// other error is returned as it is.
func FromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == apierr.Domain && info.GetReason() != "" {
			return &apierr.Error{Reason: apierr.Reason(info.GetReason()), Message: st.Message(), Metadata: info.GetMetadata()}
		}
	}
	switch st.Code() {
	case codes.DeadlineExceeded, codes.Canceled:
		return apierr.New(apierr.RequestTimedOut, "%s", st.Message())
	}
	return err
}
