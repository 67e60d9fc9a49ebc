package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// Purge translates to broker.Log.Purge, which judges each partition alone
// (docs/purge.md). A negative timeout_ms rejects the whole request.
func (s *LogService) Purge(ctx context.Context, req *sharelogv1.PurgeRequest) (*sharelogv1.PurgeResponse, error) {
	if req.GetTimeoutMs() < 0 {
		return nil, apierr.Invalid("timeout_ms must not be negative, got %d", req.GetTimeoutMs())
	}
	// DELETE on each topic, per entry and before any lookup: an entry the
	// caller may not purge answers TOPIC_AUTHORIZATION_FAILED with low
	// watermark -1 for each partition, whether the topic exists or not.
	check := s.guard.Topics(authz.Delete)
	allowed := make([]bool, len(req.GetTopics()))
	var topics []broker.PurgeTopic
	for i, t := range req.GetTopics() {
		if allowed[i] = check.Allowed(ctx, t.GetTopic()); !allowed[i] {
			continue
		}
		pt := broker.PurgeTopic{Topic: t.GetTopic(), Partitions: make([]broker.PurgePartition, len(t.GetPartitions()))}
		for j, p := range t.GetPartitions() {
			pt.Partitions[j] = broker.PurgePartition{Partition: p.GetPartition(), Offset: p.GetOffset()}
		}
		topics = append(topics, pt)
	}
	var res []broker.PurgeTopicResult
	if len(topics) > 0 {
		var err error
		if res, err = s.log.Purge(ctx, topics); err != nil {
			s.guard.Changed(ctx, "Purge", authz.Topic, topics[0].Topic, err)
			return nil, err
		}
	}
	resp := &sharelogv1.PurgeResponse{Topics: make([]*sharelogv1.PurgeTopicResult, len(req.GetTopics()))}
	next := 0 // the next domain result, in request order
	for i, t := range req.GetTopics() {
		tr := &sharelogv1.PurgeTopicResult{Topic: t.GetTopic(), Partitions: make([]*sharelogv1.PurgePartitionResult, len(t.GetPartitions()))}
		if !allowed[i] {
			for j, p := range t.GetPartitions() {
				tr.Partitions[j] = &sharelogv1.PurgePartitionResult{Partition: p.GetPartition(), LowWatermark: -1,
					ErrorCode:    sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED,
					ErrorMessage: fmt.Sprintf("not authorized to DELETE topic %q", t.GetTopic())}
			}
			resp.Topics[i] = tr
			continue
		}
		dt := res[next]
		next++
		for j, p := range dt.Partitions {
			tr.Partitions[j] = &sharelogv1.PurgePartitionResult{Partition: p.Partition, LowWatermark: p.LowWatermark,
				ErrorCode: codeToProto(p.Code), ErrorMessage: p.Message}
			var perr error
			if p.Code != apierr.None {
				perr = errors.New(p.Message)
			}
			s.guard.Changed(ctx, "Purge", authz.Topic, t.GetTopic(), perr, slog.Int("partition", int(p.Partition)),
				slog.Int64("offset", t.GetPartitions()[j].GetOffset()), slog.Int64("low_watermark", p.LowWatermark))
		}
		resp.Topics[i] = tr
	}
	return resp, nil
}
