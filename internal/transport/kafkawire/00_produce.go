package kafkawire

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// handleProduce validates each partition's record batches and appends their
// records with one broker.ProduceBatch (atomic, contiguous), or an
// idempotent producer's batch with one broker.ProduceBatchIdempotent. A
// batch larger, as sent, than the topic's max.message.bytes is
// MESSAGE_TOO_LARGE; on a topic whose message.timestamp.type is
// LogAppendTime every record gets the time of the request, which the
// answer's LogAppendTime carries.
// acks 1 and -1 both mean "durable per --fsync"; acks 0 sends no response.
// In cluster mode a partition led elsewhere is NOT_LEADER_OR_FOLLOWER with
// its current leader (KIP-951), and is not passed on; with acks 0 the
// connection is closed instead, as Kafka does.
func (l *Listener) handleProduce(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	dec := newBatchDecoder(int(l.cfg.MaxRequestBytes))
	now := time.Now().UnixMilli()
	writable := l.gate(authz.Write)
	moved := map[int32]bool{} // the leaders named in KIP-951 fields
	var txnErr error          // a transactional produce's check of its transactional id
	if req.TransactionID != nil {
		txnErr = l.requireTxnID(ctx, authz.Write, *req.TransactionID)
	}
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		// WRITE on the topic before any lookup: a denied topic answers
		// TOPIC_AUTHORIZATION_FAILED on each partition, existing or not.
		terr := internalRefusal(t.Topic)
		if terr == nil {
			terr = writable.require(ctx, t.Topic)
		}
		var info broker.TopicInfo
		if terr == nil {
			info, terr = l.topicForWrite(ctx, t.Topic)
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = -1, -1, -1
			var err error
			switch {
			case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
				rp.ErrorCode = kerr.InvalidRequiredAcks.Code
			case terr != nil:
				err = terr
			default:
				var ld Leader
				if ld, err = l.leads(ctx, t.Topic, p.Partition, -1); err != nil {
					rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = ld.Node, ld.Epoch
					moved[ld.Node] = ld.Node >= 0
					break
				}
				if txnErr != nil {
					err = txnErr
					break
				}
				rp.BaseOffset, rp.LogStartOffset, err = l.produce(ctx, dec, info, p.Partition, p.Records, now, req.TransactionID)
				if err == nil && broker.LogAppendTime(info.Config) {
					rp.LogAppendTime = now // every record's timestamp
				}
			}
			if err != nil {
				rp.ErrorCode = errorCode(err)
				if rp.ErrorCode != kerr.UnknownServerError.Code {
					msg := err.Error()
					rp.ErrorMessage = &msg
				} else {
					l.logger.Error("kafka produce", "topic", t.Topic, "partition", p.Partition, "error", err)
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(moved) > 0 {
		bs := l.brokers(ctx)
		for node, ok := range moved {
			if b, live := brokerOf(bs, node); ok && live {
				pb := kmsg.NewProduceResponseBroker()
				pb.NodeID, pb.Host, pb.Port = b.NodeID, b.Host, b.Port
				resp.Brokers = append(resp.Brokers, pb)
			}
		}
	}
	if req.Acks == 0 {
		if len(moved) > 0 {
			// No answer tells an acks=0 producer that it wrote to the
			// wrong broker: closing the connection does, as Kafka does,
			// and the client refreshes its metadata.
			return nil, errNotLeaderAcks0
		}
		return nil, nil
	}
	return resp, nil
}

// A transactional batch needs the request's transactional id and the
// partition in its open transaction (txn.Coordinator.InTransaction:
// INVALID_TXN_STATE when it was not added, as Kafka's verification).
func (l *Listener) produce(ctx context.Context, dec *batchDecoder, info broker.TopicInfo, partition int32, raw []byte, now int64, txnID *string) (base, logStart int64, err error) {
	topic := info.Name
	recs, producer, err := dec.decodeProduceTo(raw, now, topic, &info.Config)
	if err != nil {
		return -1, -1, err
	}
	lg := l.logOf(ctx)
	if dec.txn {
		switch {
		case txnID == nil:
			return -1, -1, fmt.Errorf("%w: a transactional batch in a produce without a transactional id", errInvalidRecord)
		case !l.servesTxn():
			return -1, -1, fmt.Errorf("%w: transactions are not served by this listener", errInvalidRecord)
		}
		tc, err := l.txnOf(ctx)
		if err != nil {
			return -1, -1, err
		}
		if err := tc.InTransaction(*txnID, producer.ID, producer.Epoch, topic, partition); err != nil {
			return -1, -1, err
		}
		return lg.ProduceBatchTransactional(ctx, topic, partition, recs, *producer)
	}
	if producer != nil {
		// One idempotent append: a resend of one of the producer's last
		// batches answers its original base offset with no error, as
		// Kafka (docs/kafka.md "Idempotent producers").
		return lg.ProduceBatchIdempotent(ctx, topic, partition, recs, *producer)
	}
	return lg.ProduceBatch(ctx, topic, partition, recs)
}

// errNotLeaderAcks0 closes the connection of an acks=0 produce to a
// partition this broker does not lead.
var errNotLeaderAcks0 = errors.New("an acks=0 produce for a partition led by another broker")

// topicForWrite looks a topic up, creating it when auto-creation is on.
func (l *Listener) topicForWrite(ctx context.Context, name string) (broker.TopicInfo, error) {
	if !l.cfg.AutoCreateTopics || !l.mayAutoCreate(ctx, name) {
		return l.logOf(ctx).TopicInfo(ctx, name)
	}
	return l.autoCreate(ctx, name)
}

// autoCreate returns the topic name, creating it through the broker (whose
// subscribers hear of it) when it does not exist.
func (l *Listener) autoCreate(ctx context.Context, name string) (broker.TopicInfo, error) {
	info, created, err := l.logOf(ctx).EnsureTopic(ctx, name, l.cfg.DefaultPartitions)
	if created {
		l.logger.Info("kafka auto-created topic", "topic", name, "partitions", l.cfg.DefaultPartitions)
	}
	return info, err
}
