package service

import (
	"context"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/logapi"
)

// Purge translates to logapi.Log.Purge, which judges each partition alone
// (docs/purge.md). A negative timeout_ms rejects the whole request.
func (s *LogService) Purge(ctx context.Context, req *sharelogv1.PurgeRequest) (*sharelogv1.PurgeResponse, error) {
	if req.GetTimeoutMs() < 0 {
		return nil, apierr.Invalid("timeout_ms must not be negative, got %d", req.GetTimeoutMs())
	}
	topics := make([]logapi.PurgeTopic, len(req.GetTopics()))
	for i, t := range req.GetTopics() {
		topics[i] = logapi.PurgeTopic{Topic: t.GetTopic(), Partitions: make([]logapi.PurgePartition, len(t.GetPartitions()))}
		for j, p := range t.GetPartitions() {
			topics[i].Partitions[j] = logapi.PurgePartition{Partition: p.GetPartition(), Offset: p.GetOffset()}
		}
	}
	res, err := s.log.Purge(ctx, topics)
	if err != nil {
		return nil, err
	}
	resp := &sharelogv1.PurgeResponse{Topics: make([]*sharelogv1.PurgeTopicResult, len(res))}
	for i, t := range res {
		tr := &sharelogv1.PurgeTopicResult{Topic: t.Topic, Partitions: make([]*sharelogv1.PurgePartitionResult, len(t.Partitions))}
		for j, p := range t.Partitions {
			tr.Partitions[j] = &sharelogv1.PurgePartitionResult{Partition: p.Partition, LowWatermark: p.LowWatermark,
				ErrorCode: purgeCodeToProto(p.Code), ErrorMessage: p.Message}
		}
		resp.Topics[i] = tr
	}
	return resp, nil
}

func purgeCodeToProto(c logapi.PartitionCode) sharelogv1.ErrorCode {
	switch c {
	case logapi.CodeNone:
		return sharelogv1.ErrorCode_ERROR_CODE_NONE
	case logapi.CodeUnknownTopicOrPartition:
		return sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION
	case logapi.CodePolicyViolation:
		return sharelogv1.ErrorCode_ERROR_CODE_POLICY_VIOLATION
	case logapi.CodeInvalidRequest:
		return sharelogv1.ErrorCode_ERROR_CODE_INVALID_REQUEST
	case logapi.CodeOffsetOutOfRange:
		return sharelogv1.ErrorCode_ERROR_CODE_OFFSET_OUT_OF_RANGE
	case logapi.CodeKafkaStorageError:
		return sharelogv1.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR
	}
	return sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_SERVER_ERROR
}
