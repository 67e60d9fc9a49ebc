package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// ListOffsets timestamps with a special meaning.
const (
	listLatest        = -1
	listEarliest      = -2
	listMaxTimestamp  = -3
	listEarliestLocal = -4 // tiered storage's local log start: the log start here
)

// handleListOffsets answers through broker.Log.ListOffsets: earliest (the
// log start offset), latest (the high watermark; with isolation_level
// READ_COMMITTED the last stable offset), max timestamp (the offset
// and timestamp of the record with the largest timestamp) and by timestamp
// (the first offset at or above the log start whose timestamp is >= the
// one asked, or -1 if none). In cluster mode a partition led elsewhere, or
// named with another leader epoch, answers its error (Listener.leads);
// the leader epoch answered is the partition's.
func (l *Listener) handleListOffsets(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	// DESCRIBE on each topic before any lookup, as the gRPC ListOffsets.
	describable := l.gate(authz.Describe)
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		terr := internalRefusal(t.Topic)
		if terr == nil {
			terr = describable.require(ctx, t.Topic)
		}
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			rp.Timestamp, rp.Offset = -1, -1
			var spec broker.OffsetSpec
			switch ts := p.Timestamp; {
			case ts == listEarliest || ts == listEarliestLocal:
				spec = broker.Earliest
			case ts == listLatest:
				spec = broker.Latest
			case ts == listMaxTimestamp:
				spec = broker.MaxTimestamp
			case ts >= 0:
				spec = broker.ByTimestamp
			}
			var ld Leader
			var lerr error
			if terr == nil && spec != 0 {
				ld, lerr = l.leads(ctx, t.Topic, p.Partition, p.CurrentLeaderEpoch)
			}
			if terr != nil {
				rp.ErrorCode = errorCode(terr)
			} else if lerr != nil {
				rp.ErrorCode = errorCode(lerr)
			} else if spec == 0 {
				rp.ErrorCode = kerr.InvalidRequest.Code
			} else if off, ts, err := l.logOf(ctx).ListOffsets(ctx, t.Topic, p.Partition, spec, max(p.Timestamp, 0)); err != nil {
				rp.ErrorCode = errorCode(err)
			} else if spec == broker.Latest && req.IsolationLevel == 1 && l.readsCommitted() {
				// Read committed: the latest offset is the last stable one.
				if lso, err := l.logOf(ctx).LastStableOffset(ctx, t.Topic, p.Partition); err != nil {
					rp.ErrorCode = errorCode(err)
				} else {
					rp.Offset, rp.Timestamp, rp.LeaderEpoch = min(off, lso), ts, ld.Epoch
				}
			} else {
				rp.Offset, rp.Timestamp, rp.LeaderEpoch = off, ts, ld.Epoch
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
