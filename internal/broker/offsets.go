package broker

import "context"

// maxTimestamp scans the partition for the record with the largest
// timestamp (the first such, as Kafka: KIP-734); (-1, -1) when it is empty.
// The log store keeps no per-partition maximum, so this reads the whole
// partition.
func (l *Log) maxTimestamp(ctx context.Context, topic string, partition int32) (offset, ts int64, err error) {
	logStart, hw, err := l.store.Bounds(topic, partition)
	if err != nil {
		return -1, -1, err
	}
	offset, ts = -1, -1
	for next := logStart; next < hw; {
		recs, err := l.store.Read(ctx, topic, partition, next, MaxFetchRecords, 4<<20)
		if err != nil {
			return -1, -1, err
		}
		if len(recs) == 0 {
			break
		}
		for i := range recs {
			if recs[i].Timestamp > ts {
				offset, ts = recs[i].Offset, recs[i].Timestamp
			}
		}
		next = recs[len(recs)-1].Offset + 1
	}
	return offset, ts, nil
}
