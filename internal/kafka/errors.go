package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sharelog/sharelog/internal/logstore"
)

// errorCode is the one translation point from a sharelog error to a Kafka
// error code. Context errors become REQUEST_TIMED_OUT; anything not named
// here is UNKNOWN_SERVER_ERROR (and its text is not sent to the client).
func errorCode(err error) int16 {
	if err == nil {
		return 0
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
