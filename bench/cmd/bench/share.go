package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// shareSession is one share session of a consumer (group, member) on one
// topic: epoch bookkeeping and strict checking of every response.
type shareSession struct {
	c          *client
	group      string
	member     string
	topic      string
	partitions []int32
	epoch      int32 // next epoch to send; 0 = not open
}

// acquired is one acquired range with its records' offsets checked.
type acquired struct {
	partition    int32
	first, last  int64
	deliveryCnt  int32
	keys         [][]byte // key of each record, in offset order
	receivedTime time.Time
}

func (a acquired) n() int64 { return a.last - a.first + 1 }

func nextEpoch(e int32) int32 {
	if e == math.MaxInt32 {
		return 1
	}
	return e + 1
}

// configureGroup sets the group config fields the scenario names.
func configureGroup(ctx context.Context, c *client, group string, cfg *sharelogv1.ShareGroupConfig) error {
	resp, err := c.sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: group, Config: cfg})
	if err != nil {
		return classify("ShareGroupService.UpdateShareGroupConfig", err)
	}
	got := resp.GetConfig()
	if cfg.AutoOffsetReset != nil && got.GetAutoOffsetReset() != cfg.GetAutoOffsetReset() {
		return fmt.Errorf("UpdateShareGroupConfig: auto_offset_reset is %q, want %q", got.GetAutoOffsetReset(), cfg.GetAutoOffsetReset())
	}
	if cfg.PartitionMaxRecordLocks != nil && got.GetPartitionMaxRecordLocks() != cfg.GetPartitionMaxRecordLocks() {
		return fmt.Errorf("UpdateShareGroupConfig: partition_max_record_locks is %d, want %d", got.GetPartitionMaxRecordLocks(), cfg.GetPartitionMaxRecordLocks())
	}
	return nil
}

// fetch sends ShareFetch (epoch 0 with the partitions the first time,
// incremental afterwards, optionally carrying acks) and returns the acquired
// ranges after checking that records and ranges agree.
func (s *shareSession) fetch(ctx context.Context, maxRecords, maxWaitMs int32, acks map[int32][]*sharelogv1.AcknowledgementBatch) ([]acquired, error) {
	req := &sharelogv1.ShareFetchRequest{GroupId: s.group, MemberId: s.member, ShareSessionEpoch: s.epoch,
		MaxRecords: proto.Int32(maxRecords), MaxWaitMs: maxWaitMs} // callers always pass > 0
	if s.epoch == 0 {
		t := &sharelogv1.ShareFetchTopic{Topic: s.topic}
		for _, p := range s.partitions {
			t.Partitions = append(t.Partitions, &sharelogv1.ShareFetchPartition{Partition: p})
		}
		req.Topics = []*sharelogv1.ShareFetchTopic{t}
	} else if len(acks) > 0 {
		t := &sharelogv1.ShareFetchTopic{Topic: s.topic}
		for p, b := range acks {
			t.Partitions = append(t.Partitions, &sharelogv1.ShareFetchPartition{Partition: p, AcknowledgementBatches: b})
		}
		req.Topics = []*sharelogv1.ShareFetchTopic{t}
	}
	resp, err := s.c.sg.ShareFetch(ctx, req)
	if err != nil {
		return nil, classify("ShareGroupService.ShareFetch", err)
	}
	now := time.Now()
	s.epoch = nextEpoch(s.epoch)
	var out []acquired
	for _, tr := range resp.GetResponses() {
		if tr.GetTopic() != s.topic {
			return nil, fmt.Errorf("ShareFetch answered topic %q", tr.GetTopic())
		}
		for _, pr := range tr.GetPartitions() {
			if pr.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				return nil, fmt.Errorf("ShareFetch partition %d: %v %s", pr.GetPartition(), pr.GetErrorCode(), pr.GetErrorMessage())
			}
			if pr.GetAcknowledgeErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				return nil, fmt.Errorf("ShareFetch acks partition %d: %v %s", pr.GetPartition(), pr.GetAcknowledgeErrorCode(), pr.GetAcknowledgeErrorMessage())
			}
			recs := pr.GetRecords()
			i := 0
			for _, a := range pr.GetAcquiredRecords() {
				if a.GetLastOffset() < a.GetFirstOffset() {
					return nil, fmt.Errorf("ShareFetch: acquired range %d..%d", a.GetFirstOffset(), a.GetLastOffset())
				}
				ac := acquired{partition: pr.GetPartition(), first: a.GetFirstOffset(), last: a.GetLastOffset(),
					deliveryCnt: a.GetDeliveryCount(), receivedTime: now}
				for off := a.GetFirstOffset(); off <= a.GetLastOffset(); off++ {
					if i >= len(recs) || recs[i].GetOffset() != off {
						return nil, fmt.Errorf("ShareFetch partition %d: records do not match acquired range %d..%d", pr.GetPartition(), a.GetFirstOffset(), a.GetLastOffset())
					}
					ac.keys = append(ac.keys, recs[i].GetKey())
					i++
				}
				out = append(out, ac)
			}
			if i != len(recs) {
				return nil, fmt.Errorf("ShareFetch partition %d: %d records outside the acquired ranges", pr.GetPartition(), len(recs)-i)
			}
		}
	}
	return out, nil
}

// ack sends ShareAcknowledge and requires NONE for every partition.
func (s *shareSession) ack(ctx context.Context, acks map[int32][]*sharelogv1.AcknowledgementBatch) error {
	t := &sharelogv1.ShareFetchTopic{Topic: s.topic}
	for p, b := range acks {
		t.Partitions = append(t.Partitions, &sharelogv1.ShareFetchPartition{Partition: p, AcknowledgementBatches: b})
	}
	resp, err := s.c.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: s.group, MemberId: s.member,
		ShareSessionEpoch: s.epoch, Topics: []*sharelogv1.ShareFetchTopic{t}})
	if err != nil {
		return classify("ShareGroupService.ShareAcknowledge", err)
	}
	s.epoch = nextEpoch(s.epoch)
	seen := 0
	for _, tr := range resp.GetResponses() {
		for _, pr := range tr.GetPartitions() {
			seen++
			if pr.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				return fmt.Errorf("ShareAcknowledge partition %d: %v %s", pr.GetPartition(), pr.GetErrorCode(), pr.GetErrorMessage())
			}
		}
	}
	if seen != len(acks) {
		return fmt.Errorf("ShareAcknowledge answered %d partitions for %d acknowledged", seen, len(acks))
	}
	return nil
}

// close ends the session (epoch -1); errors are ignored.
func (s *shareSession) close(ctx context.Context) {
	if s.epoch == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _ = s.c.sg.ShareFetch(cctx, &sharelogv1.ShareFetchRequest{GroupId: s.group, MemberId: s.member, ShareSessionEpoch: -1})
	s.epoch = 0
}

// acceptAll turns acquired ranges into ACCEPT batches, merging adjacent ones.
func acceptAll(acq []acquired) map[int32][]*sharelogv1.AcknowledgementBatch {
	out := map[int32][]*sharelogv1.AcknowledgementBatch{}
	for _, a := range acq {
		bs := out[a.partition]
		if n := len(bs); n > 0 && bs[n-1].LastOffset+1 == a.first {
			bs[n-1].LastOffset = a.last
			continue
		}
		out[a.partition] = append(bs, &sharelogv1.AcknowledgementBatch{FirstOffset: a.first, LastOffset: a.last,
			AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}})
	}
	return out
}
