package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sharelog/sharelog/internal/authz"
)

// The transaction APIs (docs/kafka.md "Transactions"), served over the
// transaction coordinator (internal/txn) on a single node: this node is
// every transactional id's coordinator. The version ceilings stop before
// KIP-890 part 2 (EndTxn v5, TxnOffsetCommit v5, Produce v12's implicit
// AddPartitionsToTxn), which needs the transaction.version feature this
// listener does not advertise.
var txnHandlers = map[int16]handler{
	24: {0, 5, (*Listener).handleAddPartitionsToTxn},
	25: {0, 4, (*Listener).handleAddOffsetsToTxn},
	26: {0, 4, (*Listener).handleEndTxn},
	28: {0, 4, (*Listener).handleTxnOffsetCommit},
	65: {0, 0, (*Listener).handleDescribeTransactions},
	66: {0, 1, (*Listener).handleListTransactions},
}

// requireTxnID checks op on a transactional id, as Kafka: WRITE for the
// calls of a transactional producer, DESCRIBE to find its coordinator or
// describe it.
func (l *Listener) requireTxnID(ctx context.Context, op authz.Operation, id string) error {
	return l.require(ctx, op, authz.TransactionalID, id)
}

// txnErrorCode is the Kafka code of a coordinator error: the coordinator
// codes for UNAVAILABLE and NOT_OWNER, as the group calls'.
func txnErrorCode(err error) int16 { return groupErrorCode(err) }

// partitionExists is nil when topic's partition part exists, else its
// error (UNKNOWN_TOPIC_OR_PARTITION).
func (l *Listener) partitionExists(ctx context.Context, topic string, part int32) error {
	info, err := l.logOf(ctx).TopicInfo(ctx, topic)
	if err != nil {
		return err
	}
	if part < 0 || part >= info.Partitions {
		return errUnknownPartition
	}
	return nil
}

// errUnknownPartition answers a partition outside its topic.
var errUnknownPartition = kafkaCode(kerr.UnknownTopicOrPartition.Code)
