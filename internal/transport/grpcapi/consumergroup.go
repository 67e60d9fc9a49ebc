package grpcapi

// ConsumerGroupService (proto/sharelog/v1/consumer_group.proto): every RPC
// translates to internal/consumergroup, which holds every consumer-group
// rule, through the small ConsumerGroups interface (so that cluster mode
// can put a router behind it). Permissions are those of the Kafka
// listener's APIs for the same operation (internal/transport/kafkawire:
// ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups), so
// a principal gets the same answer on both transports:
//   - ListConsumerGroups: every group with DESCRIBE on the cluster, else
//     the groups the caller may DESCRIBE;
//   - DescribeConsumerGroup: DESCRIBE on the group;
//   - FetchOffsets: DESCRIBE on the group and on each topic (a named topic
//     refused answers TOPIC_AUTHORIZATION_FAILED, unnamed ones are left
//     out);
//   - CommitOffsets and AlterOffsets: READ on the group and READ on each
//     topic (a refused topic answers TOPIC_AUTHORIZATION_FAILED per
//     partition and is not passed on);
//   - DeleteConsumerGroup: DELETE on the group.
// AlterOffsets that write and DeleteConsumerGroup are audited as changes.

import (
	"context"
	"log/slog"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

// ConsumerGroups is what ConsumerGroupService needs from the
// consumer-group domain (*consumergroup.Coordinator).
type ConsumerGroups interface {
	List(ctx context.Context) ([]consumergroup.GroupListing, error)
	Overview(ctx context.Context, group string) (consumergroup.GroupOverview, error)
	OffsetsWithLag(ctx context.Context, group string, topics []string) ([]consumergroup.PartitionLag, error)
	Commit(ctx context.Context, req consumergroup.CommitRequest) ([]consumergroup.TopicErrors, error)
	AlterOffsets(ctx context.Context, req consumergroup.AlterRequest) ([]consumergroup.PlannedOffset, error)
	Delete(ctx context.Context, group string) error
}

// ConsumerGroupService implements sharelogv1.ConsumerGroupServiceServer.
type ConsumerGroupService struct {
	sharelogv1.UnimplementedConsumerGroupServiceServer

	groups      ConsumerGroups
	unavailable string // why there are no groups to serve, when groups is nil
	guard       *authz.Guard
}

// NewConsumerGroupService returns the ConsumerGroupService handlers over
// groups; guard checks permissions (nil = none). With groups nil every
// call answers FAILED_PRECONDITION with the message unavailable.
func NewConsumerGroupService(groups ConsumerGroups, unavailable string, guard *authz.Guard) *ConsumerGroupService {
	return &ConsumerGroupService{groups: groups, unavailable: unavailable, guard: guard}
}

// served is the refusal of an instance without a coordinator: a
// precondition of the deployment, not of the request, and no reason of
// the vocabulary says it (docs/consumer-groups.md).
func (s *ConsumerGroupService) served() error {
	if s.groups == nil {
		return status.Error(codes.FailedPrecondition, s.unavailable)
	}
	return nil
}

// errorCode is a per-partition outcome as the proto's ErrorCode and
// message.
func errorCode(err error) (sharelogv1.ErrorCode, string) {
	if err == nil {
		return sharelogv1.ErrorCode_ERROR_CODE_NONE, ""
	}
	e := broker.ErrorOf(err)
	return codeToProto(e.Reason), e.Message
}

func groupTypeToProto(t string) sharelogv1.ConsumerGroupType {
	switch t {
	case "classic":
		return sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_CLASSIC
	case "consumer":
		return sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_CONSUMER
	}
	return sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_UNSPECIFIED
}

func (s *ConsumerGroupService) ListConsumerGroups(ctx context.Context, req *sharelogv1.ListConsumerGroupsRequest) (*sharelogv1.ListConsumerGroupsResponse, error) {
	if err := s.served(); err != nil {
		return nil, err
	}
	switch req.GetType() {
	case sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_UNSPECIFIED, sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_CLASSIC,
		sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_CONSUMER:
	default:
		return nil, apierr.Invalid("type %d is not a consumer group type", req.GetType())
	}
	groups, err := s.groups.List(ctx)
	if err != nil {
		return nil, err
	}
	all := s.guard.Allowed(ctx, authz.Describe, authz.Cluster, authz.ClusterName)
	out := &sharelogv1.ListConsumerGroupsResponse{Groups: make([]*sharelogv1.ConsumerGroupListing, 0, len(groups))}
	for _, g := range groups {
		typ := groupTypeToProto(g.Type)
		switch {
		case req.GetState() != "" && !strings.EqualFold(req.GetState(), g.StateName),
			req.GetType() != sharelogv1.ConsumerGroupType_CONSUMER_GROUP_TYPE_UNSPECIFIED && req.GetType() != typ,
			!all && !s.guard.Allowed(ctx, authz.Describe, authz.Group, g.Group):
			continue
		}
		out.Groups = append(out.Groups, &sharelogv1.ConsumerGroupListing{Group: g.Group, Type: typ, State: g.StateName,
			ProtocolType: g.ProtocolType, MemberCount: int32(g.Members)})
	}
	return out, nil
}

func (s *ConsumerGroupService) DescribeConsumerGroup(ctx context.Context, req *sharelogv1.DescribeConsumerGroupRequest) (*sharelogv1.DescribeConsumerGroupResponse, error) {
	if err := s.served(); err != nil {
		return nil, err
	}
	if err := s.guard.Require(ctx, authz.Describe, authz.Group, req.GetGroup()); err != nil {
		return nil, err
	}
	o, err := s.groups.Overview(ctx, req.GetGroup())
	if err != nil {
		return nil, err
	}
	out := &sharelogv1.DescribeConsumerGroupResponse{Group: o.Group, Type: groupTypeToProto(o.Type), State: o.State,
		ProtocolType: o.ProtocolType, Protocol: o.Protocol, Epoch: o.Epoch,
		Members: make([]*sharelogv1.ConsumerGroupMember, len(o.Members))}
	for i, m := range o.Members {
		pm := &sharelogv1.ConsumerGroupMember{MemberId: m.MemberID, GroupInstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost}
		for _, tp := range m.Assignment {
			pm.Assignment = append(pm.Assignment, &sharelogv1.TopicPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
		}
		out.Members[i] = pm
	}
	return out, nil
}

func (s *ConsumerGroupService) FetchOffsets(ctx context.Context, req *sharelogv1.FetchOffsetsRequest) (*sharelogv1.FetchOffsetsResponse, error) {
	if err := s.served(); err != nil {
		return nil, err
	}
	if err := s.guard.Require(ctx, authz.Describe, authz.Group, req.GetGroup()); err != nil {
		return nil, err
	}
	check := s.guard.Topics(authz.Describe)
	var topics []string
	denied := map[string]bool{}
	for _, t := range req.GetTopics() {
		if check.Allowed(ctx, t) {
			topics = append(topics, t)
		} else {
			denied[t] = true
		}
	}
	var res []consumergroup.PartitionLag
	if len(topics) > 0 || len(req.GetTopics()) == 0 {
		var err error
		if res, err = s.groups.OffsetsWithLag(ctx, req.GetGroup(), topics); err != nil {
			return nil, err
		}
	}
	byTopic := map[string]*sharelogv1.ConsumerGroupOffsetsTopic{}
	out := &sharelogv1.FetchOffsetsResponse{}
	topicOf := func(name string) *sharelogv1.ConsumerGroupOffsetsTopic {
		ot := byTopic[name]
		if ot == nil {
			ot = &sharelogv1.ConsumerGroupOffsetsTopic{Topic: name}
			byTopic[name] = ot
			out.Topics = append(out.Topics, ot)
		}
		return ot
	}
	if len(req.GetTopics()) > 0 {
		for _, t := range req.GetTopics() { // request order, refused ones included
			topicOf(t)
		}
	}
	for _, p := range res {
		if len(req.GetTopics()) == 0 && !s.guard.Allowed(ctx, authz.Describe, authz.Topic, p.Topic) {
			continue
		}
		code, msg := errorCode(p.Err)
		po := &sharelogv1.ConsumerGroupPartitionOffset{Partition: p.Partition, CommittedOffset: p.Offset, Metadata: p.Metadata,
			LeaderEpoch: p.LeaderEpoch, LogEndOffset: p.LogEndOffset, ErrorCode: code, ErrorMessage: msg}
		if p.Lag >= 0 {
			po.Lag = &p.Lag
		}
		ot := topicOf(p.Topic)
		ot.Partitions = append(ot.Partitions, po)
	}
	for t := range denied {
		byTopic[t].Partitions = []*sharelogv1.ConsumerGroupPartitionOffset{{Partition: -1, CommittedOffset: -1, LeaderEpoch: -1,
			LogEndOffset: -1, ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, ErrorMessage: deniedMessage(authz.Describe, t)}}
	}
	return out, nil
}

func (s *ConsumerGroupService) CommitOffsets(ctx context.Context, req *sharelogv1.CommitOffsetsRequest) (*sharelogv1.CommitOffsetsResponse, error) {
	if err := s.served(); err != nil {
		return nil, err
	}
	if err := s.guard.Require(ctx, authz.Read, authz.Group, req.GetGroup()); err != nil {
		return nil, err
	}
	cr := consumergroup.CommitRequest{Group: req.GetGroup(), Generation: -1, MemberID: req.GetMemberId(),
		InstanceID: req.GroupInstanceId, UnknownGroupNotFound: true}
	if cr.MemberID != "" || cr.InstanceID != nil {
		cr.Generation = req.GetGenerationId()
	}
	check := s.guard.Topics(authz.Read)
	allowed := make([]bool, len(req.GetTopics()))
	for i, t := range req.GetTopics() {
		if allowed[i] = check.Allowed(ctx, t.GetTopic()); !allowed[i] {
			continue
		}
		ct := consumergroup.CommitTopic{Topic: t.GetTopic()}
		for _, p := range t.GetPartitions() {
			le := int32(-1)
			if p.LeaderEpoch != nil {
				le = p.GetLeaderEpoch()
			}
			ct.Partitions = append(ct.Partitions, consumergroup.CommitPartition{Partition: p.GetPartition(), Offset: p.GetOffset(),
				LeaderEpoch: le, Metadata: p.GetMetadata()})
		}
		cr.Topics = append(cr.Topics, ct)
	}
	var res []consumergroup.TopicErrors
	if len(cr.Topics) > 0 {
		var err error
		if res, err = s.groups.Commit(ctx, cr); err != nil {
			return nil, err
		}
	}
	out := &sharelogv1.CommitOffsetsResponse{Topics: make([]*sharelogv1.ConsumerGroupTopicResult, len(req.GetTopics()))}
	next := 0
	for i, t := range req.GetTopics() {
		ot := &sharelogv1.ConsumerGroupTopicResult{Topic: t.GetTopic()}
		if !allowed[i] {
			for _, p := range t.GetPartitions() {
				ot.Partitions = append(ot.Partitions, &sharelogv1.ConsumerGroupPartitionResult{Partition: p.GetPartition(),
					ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, ErrorMessage: deniedMessage(authz.Read, t.GetTopic())})
			}
		} else {
			for _, p := range res[next].Partitions {
				code, msg := errorCode(p.Err)
				ot.Partitions = append(ot.Partitions, &sharelogv1.ConsumerGroupPartitionResult{Partition: p.Partition, ErrorCode: code, ErrorMessage: msg})
			}
			next++
		}
		out.Topics[i] = ot
	}
	return out, nil
}

func resetKindFromProto(r sharelogv1.OffsetReset) (consumergroup.ResetKind, bool) {
	switch r {
	case sharelogv1.OffsetReset_OFFSET_RESET_EARLIEST:
		return consumergroup.ResetToEarliest, true
	case sharelogv1.OffsetReset_OFFSET_RESET_LATEST:
		return consumergroup.ResetToLatest, true
	case sharelogv1.OffsetReset_OFFSET_RESET_TIMESTAMP:
		return consumergroup.ResetToTimestamp, true
	case sharelogv1.OffsetReset_OFFSET_RESET_OFFSET:
		return consumergroup.ResetToOffset, true
	case sharelogv1.OffsetReset_OFFSET_RESET_SHIFT_BY:
		return consumergroup.ResetShiftBy, true
	}
	return 0, false
}

func (s *ConsumerGroupService) AlterOffsets(ctx context.Context, req *sharelogv1.AlterOffsetsRequest) (*sharelogv1.AlterOffsetsResponse, error) {
	if err := s.served(); err != nil {
		return nil, err
	}
	if len(req.GetTopics()) == 0 {
		return nil, apierr.Invalid("no topics to reset")
	}
	dreq := consumergroup.AlterRequest{Group: req.GetGroup(), DryRun: req.GetDryRun()}
	for i, t := range req.GetTopics() {
		kind, ok := resetKindFromProto(t.GetResetTo())
		if !ok {
			return nil, apierr.Invalid("topics[%d] (%q): reset %s is not a reset", i, t.GetTopic(), t.GetResetTo())
		}
		rt := consumergroup.ResetTopic{Topic: t.GetTopic(), Partitions: t.GetPartitions(), Kind: kind}
		if len(rt.Partitions) == 0 {
			rt.Partitions = nil // every partition
		}
		switch kind {
		case consumergroup.ResetToTimestamp:
			rt.Value = t.GetTimestampMs()
		case consumergroup.ResetToOffset:
			rt.Value = t.GetOffset()
		case consumergroup.ResetShiftBy:
			rt.Value = t.GetShiftBy()
		}
		dreq.Topics = append(dreq.Topics, rt)
	}
	if err := s.guard.Require(ctx, authz.Read, authz.Group, req.GetGroup()); err != nil {
		return nil, err
	}
	check := s.guard.Topics(authz.Read)
	allowed := make([]bool, len(dreq.Topics))
	var pass []consumergroup.ResetTopic
	for i, t := range dreq.Topics {
		if allowed[i] = check.Allowed(ctx, t.Topic); allowed[i] {
			pass = append(pass, t)
		}
	}
	var res []consumergroup.PlannedOffset
	if len(pass) > 0 {
		dreq.Topics = pass
		var err error
		if res, err = s.groups.AlterOffsets(ctx, dreq); err != nil {
			if !dreq.DryRun {
				s.guard.Changed(ctx, "AlterConsumerGroupOffsets", authz.Group, req.GetGroup(), err)
			}
			return nil, err
		}
	}
	out := &sharelogv1.AlterOffsetsResponse{DryRun: req.GetDryRun()}
	for i, t := range req.GetTopics() {
		ot := &sharelogv1.AlterOffsetsTopicResult{Topic: t.GetTopic()}
		out.Topics = append(out.Topics, ot)
		if !allowed[i] {
			for _, p := range deniedPartitions(t.GetPartitions()) {
				ot.Partitions = append(ot.Partitions, &sharelogv1.AlterOffsetsPartitionResult{Partition: p, PreviousOffset: -1, Offset: -1,
					ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, ErrorMessage: deniedMessage(authz.Read, t.GetTopic())})
			}
			continue
		}
		// The domain answers in request order: this entry's partitions
		// are the next run of results for its topic.
		n := len(t.GetPartitions())
		if n == 0 {
			for n < len(res) && res[n].Topic == t.GetTopic() {
				n++
			}
		}
		for _, p := range res[:n] {
			code, msg := errorCode(p.Err)
			ot.Partitions = append(ot.Partitions, &sharelogv1.AlterOffsetsPartitionResult{Partition: p.Partition,
				PreviousOffset: p.Previous, Offset: p.Offset, ErrorCode: code, ErrorMessage: msg})
			if !dreq.DryRun {
				s.guard.Changed(ctx, "AlterConsumerGroupOffsets", authz.Group, req.GetGroup(), p.Err, slog.String("topic", p.Topic),
					slog.Int("partition", int(p.Partition)), slog.Int64("offset", p.Offset))
			}
		}
		res = res[n:]
	}
	return out, nil
}

func (s *ConsumerGroupService) DeleteConsumerGroup(ctx context.Context, req *sharelogv1.DeleteConsumerGroupRequest) (*sharelogv1.DeleteConsumerGroupResponse, error) {
	if err := s.served(); err != nil {
		return nil, err
	}
	if err := s.guard.Require(ctx, authz.Delete, authz.Group, req.GetGroup()); err != nil {
		return nil, err
	}
	err := s.groups.Delete(ctx, req.GetGroup())
	s.guard.Changed(ctx, "DeleteConsumerGroup", authz.Group, req.GetGroup(), err)
	if err != nil {
		return nil, err
	}
	return &sharelogv1.DeleteConsumerGroupResponse{}, nil
}
