package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sharelog/sharelog/internal/logstore"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// shareReasons maps the share-group request-level reasons (which already
// carry Kafka's names) to Kafka error codes.
var shareReasons = map[string]*kerr.Error{
	sharegroup.ReasonInvalidRequest:           kerr.InvalidRequest,
	sharegroup.ReasonShareSessionNotFound:     kerr.ShareSessionNotFound,
	sharegroup.ReasonInvalidShareSessionEpoch: kerr.InvalidShareSessionEpoch,
	sharegroup.ReasonShareSessionLimitReached: kerr.ShareSessionLimitReached,
	sharegroup.ReasonGroupIDNotFound:          kerr.GroupIDNotFound,
	sharegroup.ReasonUnknownMemberID:          kerr.UnknownMemberID,
	sharegroup.ReasonFencedMemberEpoch:        kerr.FencedMemberEpoch,
	sharegroup.ReasonGroupMaxSizeReached:      kerr.GroupMaxSizeReached,
	sharegroup.ReasonNonEmptyGroup:            kerr.NonEmptyGroup,
	sharegroup.ReasonKafkaStorageError:        kerr.KafkaStorageError,
}

// errorCode is the one translation point from a sharelog error to a Kafka
// error code. Context errors become REQUEST_TIMED_OUT; anything not named
// here is UNKNOWN_SERVER_ERROR (and its text is not sent to the client).
func errorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var se *sharegroup.Error
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
