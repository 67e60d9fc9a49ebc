package broker

import (
	"context"

	"github.com/sharelog/sharelog/apierr"
)

// ProduceBatch appends records to one partition atomically and
// contiguously, as a Kafka Produce does with a partition's batches: the
// records keep their timestamps (the batch carries them, or the decoder
// stamped the log append time, as it must for every record of a topic
// whose message.timestamp.type is LogAppendTime: [LogAppendTime]) and get
// consecutive offsets. The batch's size is the transport's to check
// against the topic's max.message.bytes ([CheckBatchSize]): it is the size
// of the batch as the producer sent it. It returns the
// first record's offset and the partition's log start offset after the
// append (-1 if that could not be read: the append stands). With Owners,
// a partition served elsewhere is appended at its owner, as for Produce.
func (l *Log) ProduceBatch(ctx context.Context, topic string, partition int32, records []Record) (base, logStart int64, err error) {
	info, err := l.store.TopicInfo(ctx, topic)
	if err != nil {
		return -1, -1, err
	}
	if err := checkPartition(info, partition); err != nil {
		return -1, -1, err
	}
	for i := range records {
		records[i].ProducerID, records[i].ProducerEpoch, records[i].Sequence = 0, 0, 0
		records[i].Transactional, records[i].Control = false, false
	}
	base, err = l.appendTo(ctx, topic, partition, records) // here or at the partition's owner
	if err != nil {
		return -1, -1, err
	}
	if logStart, _, err = l.store.Bounds(topic, partition); err != nil {
		logStart = -1
	}
	return base, logStart, nil
}

// BatchProducer is the idempotent producer of one Kafka record batch: its
// id and epoch (InitProducer) and the sequence number of the batch's first
// record.
type BatchProducer struct {
	ID           int64
	Epoch        int16
	BaseSequence int32
}

// ProduceBatchIdempotent is ProduceBatch for one batch of an idempotent
// producer (idempotence.go, docs/produce.md): the records are numbered
// from p.BaseSequence and checked against the partition's producer state
// as one idempotent append, the same as a partition of ProduceIdempotent.
// A resend of a batch among the producer's last ProducerBatches answers
// its original base offset and appends nothing.
func (l *Log) ProduceBatchIdempotent(ctx context.Context, topic string, partition int32, records []Record, p BatchProducer) (base, logStart int64, err error) {
	return l.produceBatchOf(ctx, topic, partition, records, p, false)
}

// ProduceBatchTransactional is ProduceBatchIdempotent for a batch of the
// producer's open transaction (transactions.go): its records are marked
// Transactional, invisible to read-committed readers until the
// coordinator's commit marker. The transport has checked with the
// transaction coordinator that the partition is part of the transaction.
func (l *Log) ProduceBatchTransactional(ctx context.Context, topic string, partition int32, records []Record, p BatchProducer) (base, logStart int64, err error) {
	return l.produceBatchOf(ctx, topic, partition, records, p, true)
}

func (l *Log) produceBatchOf(ctx context.Context, topic string, partition int32, records []Record, p BatchProducer, txn bool) (base, logStart int64, err error) {
	if err := validProducer(p.ID, p.Epoch); err != nil {
		return -1, -1, err
	}
	if p.BaseSequence < 0 {
		return -1, -1, apierr.Invalid("base_sequence must not be negative, got %d", p.BaseSequence)
	}
	if len(records) == 0 {
		return -1, -1, apierr.Invalid("records must not be empty")
	}
	info, err := l.store.TopicInfo(ctx, topic)
	if err != nil {
		return -1, -1, err
	}
	if err := checkPartition(info, partition); err != nil {
		return -1, -1, err
	}
	for i := range records {
		records[i].ProducerID, records[i].ProducerEpoch = p.ID, p.Epoch
		records[i].Sequence = seqAdd(p.BaseSequence, int64(i))
		records[i].Transactional, records[i].Control = txn, false
	}
	base, err = l.appendTo(ctx, topic, partition, records) // here or at the partition's owner
	if err != nil {
		return -1, -1, err
	}
	if logStart, _, err = l.store.Bounds(topic, partition); err != nil {
		logStart = -1
	}
	return base, logStart, nil
}

// validProducer checks an idempotent producer's id and epoch.
func validProducer(id int64, epoch int16) error {
	switch {
	case id <= 0:
		return apierr.Invalid("producer_id must be a positive id from InitProducer, got %d", id)
	case epoch < 0:
		return apierr.Invalid("producer_epoch must not be negative, got %d", epoch)
	}
	return nil
}
