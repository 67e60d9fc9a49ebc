package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ListOffsets timestamps with a special meaning.
const (
	listLatest        = -1
	listEarliest      = -2
	listMaxTimestamp  = -3
	listEarliestLocal = -4 // tiered storage's local log start: the log start here
)

// handleListOffsets answers earliest (the log start offset), latest (the
// high watermark), max timestamp (the offset of the record with the
// largest timestamp) and by timestamp (the first offset at or above the
// log start whose timestamp is >= the one asked, or -1 if none).
func (l *Listener) handleListOffsets(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp, rp.Offset = -1, -1
			var err error
			switch ts := p.Timestamp; {
			case ts == listEarliest || ts == listEarliestLocal || ts == listLatest:
				var logStart, hw int64
				if logStart, hw, err = l.store.Bounds(t.Topic, p.Partition); err == nil {
					rp.Offset = logStart
					if ts == listLatest {
						rp.Offset = hw
					}
					rp.LeaderEpoch = 0
				}
			case ts == listMaxTimestamp:
				if rp.Offset, rp.Timestamp, err = l.maxTimestamp(ctx, t.Topic, p.Partition); err == nil {
					rp.LeaderEpoch = 0
				}
			case ts >= 0:
				if rp.Offset, rp.Timestamp, err = l.store.OffsetForTimestamp(ctx, t.Topic, p.Partition, ts); err == nil {
					rp.LeaderEpoch = 0
				}
			default:
				rp.ErrorCode = kerr.InvalidRequest.Code
			}
			if err != nil {
				rp.ErrorCode = errorCode(err)
				rp.Offset, rp.Timestamp = -1, -1
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// maxTimestamp scans the partition for the record with the largest
// timestamp (the first such, as Kafka); (-1, -1) when it is empty. The log
// store keeps no per-partition maximum, so this reads the whole partition.
func (l *Listener) maxTimestamp(ctx context.Context, topic string, partition int32) (offset, ts int64, err error) {
	logStart, hw, err := l.store.Bounds(topic, partition)
	if err != nil {
		return -1, -1, err
	}
	offset, ts = -1, -1
	for next := logStart; next < hw; {
		recs, err := l.store.Read(ctx, topic, partition, next, maxFetchRecords, 4<<20)
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
