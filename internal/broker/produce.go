package broker

import "context"

// ProduceBatch appends records to one partition atomically and
// contiguously, as a Kafka Produce does with a partition's batches: the
// records keep their timestamps (the batch carries them, or the decoder
// stamped the log append time) and get consecutive offsets. It returns the
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
	base, err = l.appendTo(ctx, topic, partition, records) // here or at the partition's owner
	if err != nil {
		return -1, -1, err
	}
	if logStart, _, err = l.store.Bounds(topic, partition); err != nil {
		logStart = -1
	}
	return base, logStart, nil
}
