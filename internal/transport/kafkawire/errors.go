package kafkawire

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// shareReasons maps the share-group request-level reasons (which already
// carry Kafka's names) to Kafka error codes.
var shareReasons = map[apierr.Reason]*kerr.Error{
	apierr.InvalidRequest:           kerr.InvalidRequest,
	apierr.UnknownTopicOrPartition:  kerr.UnknownTopicOrPartition,
	apierr.TopicAlreadyExists:       kerr.TopicAlreadyExists,
	apierr.OffsetOutOfRange:         kerr.OffsetOutOfRange,
	apierr.CorruptMessage:           kerr.CorruptMessage,
	apierr.ShareSessionNotFound:     kerr.ShareSessionNotFound,
	apierr.InvalidShareSessionEpoch: kerr.InvalidShareSessionEpoch,
	apierr.ShareSessionLimitReached: kerr.ShareSessionLimitReached,
	apierr.GroupIDNotFound:          kerr.GroupIDNotFound,
	apierr.UnknownMemberID:          kerr.UnknownMemberID,
	apierr.FencedMemberEpoch:        kerr.FencedMemberEpoch,
	apierr.GroupMaxSizeReached:      kerr.GroupMaxSizeReached,
	apierr.NonEmptyGroup:            kerr.NonEmptyGroup,
	apierr.KafkaStorageError:        kerr.KafkaStorageError,
	apierr.ThrottlingQuotaExceeded:  kerr.ThrottlingQuotaExceeded,
	apierr.Unavailable:              kerr.CoordinatorNotAvailable,
}

// errorCode is the one translation point from a sharelog error to a Kafka
// error code. Context errors become REQUEST_TIMED_OUT; anything not named
// here is UNKNOWN_SERVER_ERROR (and its text is not sent to the client).
func errorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var se *apierr.Error
	if errors.As(err, &se) {
		if e, ok := shareReasons[se.Reason]; ok {
			return e.Code
		}
		return kerr.UnknownServerError.Code
	}
	if errors.Is(err, sharegroup.ErrClosed) {
		return kerr.CoordinatorNotAvailable.Code
	}
	for _, m := range errorTable {
		if errors.Is(err, m.err) {
			return m.code.Code
		}
	}
	return kerr.UnknownServerError.Code
}

var errorTable = []struct {
	err  error
	code *kerr.Error
}{
	{logstore.ErrUnknownTopic, kerr.UnknownTopicOrPartition},
	{logstore.ErrTopicExists, kerr.TopicAlreadyExists},
	{logstore.ErrOffsetOutOfRange, kerr.OffsetOutOfRange},
	{logstore.ErrInvalidArgument, kerr.InvalidRequest},
	{logstore.ErrCorrupt, kerr.CorruptMessage},
	{logstore.ErrStorage, kerr.KafkaStorageError},
	{logstore.ErrOffline, kerr.KafkaStorageError},
	{logstore.ErrClosed, kerr.KafkaStorageError},
	{context.DeadlineExceeded, kerr.RequestTimedOut},
	{context.Canceled, kerr.RequestTimedOut},
	{errRecordTooLarge, kerr.MessageTooLarge},
	{errCorruptBatch, kerr.CorruptMessage},
	{errInvalidRecord, kerr.InvalidRecord},
	{errUnsupportedCodec, kerr.UnsupportedCompressionType},
}
