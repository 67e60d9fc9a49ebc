package service

// ShareGroupService: ShareFetch, ShareAcknowledge and the group config RPCs
// translate to internal/sharegroup, which holds every rule of
// share-groups.md; membership and the admin RPCs answer UNIMPLEMENTED until
// their issue lands.

import (
	"context"
	"log/slog"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// ShareGroups is what ShareGroupService needs from the share-group domain.
type ShareGroups interface {
	ShareFetch(ctx context.Context, req sharegroup.FetchRequest) (sharegroup.FetchResponse, error)
	ShareAcknowledge(ctx context.Context, req sharegroup.AckRequest) (sharegroup.AckResponse, error)
	GetConfig(groupID string) (sharegroup.GroupConfig, error)
	UpdateConfig(groupID string, c sharegroup.GroupConfig) (sharegroup.GroupConfig, error)
}

// ShareGroupService implements sharelogv1.ShareGroupServiceServer.
type ShareGroupService struct {
	sharelogv1.UnimplementedShareGroupServiceServer

	groups ShareGroups
	log    *slog.Logger
}

// NewShareGroupService returns the ShareGroupService handlers.
func NewShareGroupService(groups ShareGroups, log *slog.Logger) *ShareGroupService {
	if log == nil {
		log = slog.Default()
	}
	return &ShareGroupService{groups: groups, log: log}
}

func (s *ShareGroupService) ShareFetch(ctx context.Context, req *sharelogv1.ShareFetchRequest) (*sharelogv1.ShareFetchResponse, error) {
	if err := requirePartitions(req.GetTopics()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	dreq := sharegroup.FetchRequest{
		GroupID:    req.GetGroupId(),
		MemberID:   req.GetMemberId(),
		Epoch:      req.GetShareSessionEpoch(),
		MaxWaitMs:  req.GetMaxWaitMs(),
		MinBytes:   req.GetMinBytes(),
		MaxBytes:   req.GetMaxBytes(),
		MaxRecords: req.GetMaxRecords(),
		BatchSize:  req.GetBatchSize(),
		IsRenewAck: req.GetIsRenewAck(),
		Partitions: entriesFromProto(req.GetTopics()),
	}
	for _, t := range req.GetForgottenTopicsData() {
		for _, p := range t.GetPartitions() {
			dreq.Forgotten = append(dreq.Forgotten, sharegroup.TopicPartition{Topic: t.GetTopic(), Partition: p})
		}
	}
	resp, err := s.groups.ShareFetch(ctx, dreq)
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	out := &sharelogv1.ShareFetchResponse{AcquisitionLockTimeoutMs: resp.AcquisitionLockTimeoutMs}
	byTopic := map[string]*sharelogv1.ShareFetchTopicResponse{}
	for i := range resp.Partitions {
		p := &resp.Partitions[i]
		tr := byTopic[p.Topic]
		if tr == nil {
			tr = &sharelogv1.ShareFetchTopicResponse{Topic: p.Topic}
			byTopic[p.Topic] = tr
			out.Responses = append(out.Responses, tr)
		}
		pr := &sharelogv1.ShareFetchPartitionResponse{
			Partition:               p.Partition,
			ErrorCode:               codeToProto(p.ErrorCode),
			ErrorMessage:            p.ErrorMessage,
			AcknowledgeErrorCode:    codeToProto(p.AckErrorCode),
			AcknowledgeErrorMessage: p.AckErrorMessage,
			Records:                 recordsToProto(p.Records),
		}
		if len(p.Acquired) > 0 {
			pr.AcquiredRecords = make([]*sharelogv1.AcquiredRecords, len(p.Acquired))
			for j, a := range p.Acquired {
				pr.AcquiredRecords[j] = &sharelogv1.AcquiredRecords{FirstOffset: a.FirstOffset, LastOffset: a.LastOffset, DeliveryCount: a.DeliveryCount}
			}
		}
		tr.Partitions = append(tr.Partitions, pr)
	}
	return out, nil
}

func (s *ShareGroupService) ShareAcknowledge(ctx context.Context, req *sharelogv1.ShareAcknowledgeRequest) (*sharelogv1.ShareAcknowledgeResponse, error) {
	if err := requirePartitions(req.GetTopics()); err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	resp, err := s.groups.ShareAcknowledge(ctx, sharegroup.AckRequest{
		GroupID:    req.GetGroupId(),
		MemberID:   req.GetMemberId(),
		Epoch:      req.GetShareSessionEpoch(),
		IsRenewAck: req.GetIsRenewAck(),
		Partitions: entriesFromProto(req.GetTopics()),
	})
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	out := &sharelogv1.ShareAcknowledgeResponse{AcquisitionLockTimeoutMs: resp.AcquisitionLockTimeoutMs}
	byTopic := map[string]*sharelogv1.ShareAcknowledgeTopicResponse{}
	for _, p := range resp.Partitions {
		tr := byTopic[p.Topic]
		if tr == nil {
			tr = &sharelogv1.ShareAcknowledgeTopicResponse{Topic: p.Topic}
			byTopic[p.Topic] = tr
			out.Responses = append(out.Responses, tr)
		}
		tr.Partitions = append(tr.Partitions, &sharelogv1.ShareAcknowledgePartitionResponse{
			Partition: p.Partition, ErrorCode: codeToProto(p.ErrorCode), ErrorMessage: p.ErrorMessage,
		})
	}
	return out, nil
}

func (s *ShareGroupService) GetShareGroupConfig(ctx context.Context, req *sharelogv1.GetShareGroupConfigRequest) (*sharelogv1.GetShareGroupConfigResponse, error) {
	cfg, err := s.groups.GetConfig(req.GetGroupId())
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &sharelogv1.GetShareGroupConfigResponse{GroupId: req.GetGroupId(), Config: configToProto(cfg)}, nil
}

func (s *ShareGroupService) UpdateShareGroupConfig(ctx context.Context, req *sharelogv1.UpdateShareGroupConfigRequest) (*sharelogv1.UpdateShareGroupConfigResponse, error) {
	c := req.GetConfig()
	cfg, err := s.groups.UpdateConfig(req.GetGroupId(), sharegroup.GroupConfig{
		RecordLockDurationMs:    c.RecordLockDurationMs,
		DeliveryCountLimit:      c.DeliveryCountLimit,
		PartitionMaxRecordLocks: c.PartitionMaxRecordLocks,
		AutoOffsetReset:         c.AutoOffsetReset,
		SessionTimeoutMs:        c.SessionTimeoutMs,
		HeartbeatIntervalMs:     c.HeartbeatIntervalMs,
	})
	if err != nil {
		return nil, toStatus(ctx, s.log, err)
	}
	return &sharelogv1.UpdateShareGroupConfigResponse{GroupId: req.GetGroupId(), Config: configToProto(cfg)}, nil
}

func configToProto(c sharegroup.GroupConfig) *sharelogv1.ShareGroupConfig {
	return &sharelogv1.ShareGroupConfig{
		RecordLockDurationMs:    c.RecordLockDurationMs,
		DeliveryCountLimit:      c.DeliveryCountLimit,
		PartitionMaxRecordLocks: c.PartitionMaxRecordLocks,
		AutoOffsetReset:         c.AutoOffsetReset,
		SessionTimeoutMs:        c.SessionTimeoutMs,
		HeartbeatIntervalMs:     c.HeartbeatIntervalMs,
	}
}

func entriesFromProto(topics []*sharelogv1.ShareFetchTopic) []sharegroup.PartitionEntry {
	var out []sharegroup.PartitionEntry
	for _, t := range topics {
		for _, p := range t.GetPartitions() {
			e := sharegroup.PartitionEntry{TopicPartition: sharegroup.TopicPartition{Topic: t.GetTopic(), Partition: p.GetPartition()}}
			for _, b := range p.GetAcknowledgementBatches() {
				types := make([]sharegroup.AckType, len(b.GetAcknowledgeTypes()))
				for i, at := range b.GetAcknowledgeTypes() {
					types[i] = ackTypeFromProto(at)
				}
				e.Batches = append(e.Batches, sharegroup.AckBatch{FirstOffset: b.GetFirstOffset(), LastOffset: b.GetLastOffset(), Types: types})
			}
			out = append(out, e)
		}
	}
	return out
}

func ackTypeFromProto(t sharelogv1.AcknowledgeType) sharegroup.AckType {
	switch t {
	case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT:
		return sharegroup.AckAccept
	case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE:
		return sharegroup.AckRelease
	case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT:
		return sharegroup.AckReject
	case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_GAP:
		return sharegroup.AckGap
	case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RENEW:
		return sharegroup.AckRenew
	default: // UNSPECIFIED or an unknown value: always rejected
		return sharegroup.AckUnspecified
	}
}

func codeToProto(c sharegroup.ErrorCode) sharelogv1.ErrorCode {
	switch c {
	case sharegroup.CodeNone:
		return sharelogv1.ErrorCode_ERROR_CODE_NONE
	case sharegroup.CodeUnknownTopicOrPartition:
		return sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION
	case sharegroup.CodeInvalidRequest:
		return sharelogv1.ErrorCode_ERROR_CODE_INVALID_REQUEST
	case sharegroup.CodeInvalidRecordState:
		return sharelogv1.ErrorCode_ERROR_CODE_INVALID_RECORD_STATE
	case sharegroup.CodeKafkaStorageError:
		return sharelogv1.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR
	case sharegroup.CodeOffsetOutOfRange:
		return sharelogv1.ErrorCode_ERROR_CODE_OFFSET_OUT_OF_RANGE
	default:
		return sharelogv1.ErrorCode_ERROR_CODE_UNKNOWN_SERVER_ERROR
	}
}

// requirePartitions rejects a topics entry without partitions (§3.1): the
// flattened domain request could not tell it from no entry at all.
func requirePartitions(topics []*sharelogv1.ShareFetchTopic) error {
	for i, t := range topics {
		if len(t.GetPartitions()) == 0 {
			return invalid("topics[%d] (%q) names no partitions", i, t.GetTopic())
		}
	}
	return nil
}
