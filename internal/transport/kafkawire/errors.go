package kafkawire

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
)

// errorCode is the Kafka error code of a sharelog error: the reason the
// domain gives it (broker.ReasonOf: the store's sentinels, context errors
// as REQUEST_TIMED_OUT, anything unexpected as INTERNAL) as its Kafka code
// (apierr.Reason.KafkaCode; docs/errors.md "Kafka codes"), except for the
// listener's own codec errors, which have Kafka codes and no reason.
func errorCode(err error) int16 {
	if err == nil {
		return 0
	}
	if k, ok := errors.AsType[kafkaCode](err); ok {
		return int16(k)
	}
	for _, m := range wireErrors {
		if errors.Is(err, m.err) {
			return m.code.Code
		}
	}
	return broker.ReasonOf(err).KafkaCode()
}

// groupErrorCode is errorCode for the share-group calls (heartbeat,
// ShareFetch, ShareAcknowledge and the group admin calls), which answer as
// Kafka's group coordinators do: COORDINATOR_NOT_AVAILABLE for UNAVAILABLE
// and OWNER_UNREACHABLE (the coordinator elsewhere did not answer) and
// NOT_COORDINATOR for NOT_OWNER, on which a client looks the coordinator
// up again.
func groupErrorCode(err error) int16 {
	switch broker.ReasonOf(err) {
	case apierr.Unavailable, apierr.OwnerUnreachable, apierr.OutcomeUnknown:
		return kerr.CoordinatorNotAvailable.Code
	case apierr.NotOwner:
		return kerr.NotCoordinator.Code
	}
	return errorCode(err)
}

// wireErrors are the listener's own: a request's bytes that do not decode
// as Kafka record batches, or name a producer id (0) that Kafka may
// allocate and sharelog never does (records.go).
var wireErrors = []struct {
	err  error
	code *kerr.Error
}{
	{errRecordTooLarge, kerr.MessageTooLarge},
	{errCorruptBatch, kerr.CorruptMessage},
	{errInvalidRecord, kerr.InvalidRecord},
	{errUnsupportedCodec, kerr.UnsupportedCompressionType},
	{errUnknownProducer, kerr.UnknownProducerID},
	{errLeaderNotAvailable, kerr.LeaderNotAvailable},
	{errFencedLeaderEpoch, kerr.FencedLeaderEpoch},
	{errUnknownLeaderEpoch, kerr.UnknownLeaderEpoch},
}

// requestError gives a share-group call's request-level error its code
// (groupErrorCode) and the message a client may see: the domain's, none
// for an internal error, which is logged instead.
func (l *Listener) requestError(op string, err error) (int16, *string) {
	code := groupErrorCode(err)
	e := broker.ErrorOf(err)
	if e == nil || e.Reason == apierr.Internal || e.Reason == apierr.None {
		l.logger.Error("kafka "+op, "error", err)
		return code, nil
	}
	msg := e.Message
	return code, &msg
}

// kafkaCode is an outcome the listener already has as a Kafka code (a
// group call's coordinator code repeated on its partitions).
type kafkaCode int16

func (k kafkaCode) Error() string { return kerr.ErrorForCode(int16(k)).Error() }

// codeError is code as an error (nil for 0).
func codeError(code int16) error {
	if code == 0 {
		return nil
	}
	return kafkaCode(code)
}
