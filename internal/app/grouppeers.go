package app

import (
	"context"
	"strings"
	"time"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/transport/grpcapi"
)

// grpcGroupPeers is sharegroup.Peers over gRPC: the peer's
// ShareGroupService, called with the caller's identity (outgoing) over
// the forwarding connections — owned-only (ownedOnlyOutgoing) when the
// domain asks an owner — a failure to reach the peer answered
// OWNER_UNREACHABLE (forwardErr).
type grpcGroupPeers struct{ n *clusterNode }

var _ sharegroup.Peers = grpcGroupPeers{}

// client is the peer's ShareGroupService, the call's outgoing context
// and the connection's target (for forwardErr).
func (p grpcGroupPeers) client(ctx context.Context, peer string) (sharelogv1.ShareGroupServiceClient, context.Context, string, error) {
	cc, err := p.n.conn(peer)
	if err != nil {
		return nil, nil, "", err
	}
	out := p.n.outgoing(ctx)
	if sharegroup.IsOwnedOnly(ctx) {
		out = p.n.ownedOnlyOutgoing(ctx)
	}
	return sharelogv1.NewShareGroupServiceClient(cc), out, cc.Target(), nil
}

func (p grpcGroupPeers) Others(ctx context.Context) ([]string, error) {
	members, err := p.n.otherMembers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.Addr
	}
	return out, nil
}

func (p grpcGroupPeers) Heartbeat(ctx context.Context, peer string, req sharegroup.HeartbeatRequest) (sharegroup.HeartbeatResponse, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return sharegroup.HeartbeatResponse{}, err
	}
	// client_id and client_host travel as the call's metadata (outgoing
	// passes it on), as the handler there reads them.
	resp, err := c.ShareGroupHeartbeat(out, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: req.GroupID, MemberId: req.MemberID,
		MemberEpoch: req.MemberEpoch, RackId: req.RackID, SubscribedTopicNames: req.SubscribedTopicNames})
	if err != nil {
		return sharegroup.HeartbeatResponse{}, forwardErr(target, err)
	}
	r := sharegroup.HeartbeatResponse{MemberID: resp.GetMemberId(), MemberEpoch: resp.GetMemberEpoch(),
		HeartbeatIntervalMs: resp.GetHeartbeatIntervalMs()}
	if resp.Assignment != nil {
		a := assignmentFromProto(resp.GetAssignment())
		r.Assignment = &a
	}
	return r, nil
}

func (p grpcGroupPeers) GetConfig(ctx context.Context, peer, groupID string) (sharegroup.GroupConfig, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return sharegroup.GroupConfig{}, err
	}
	resp, err := c.GetShareGroupConfig(out, &sharelogv1.GetShareGroupConfigRequest{GroupId: groupID})
	if err != nil {
		return sharegroup.GroupConfig{}, forwardErr(target, err)
	}
	return grpcapi.GroupConfigFromProto(resp.GetConfig()), nil
}

func (p grpcGroupPeers) UpdateConfig(ctx context.Context, peer, groupID string, cfg sharegroup.GroupConfig) (sharegroup.GroupConfig, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return sharegroup.GroupConfig{}, err
	}
	resp, err := c.UpdateShareGroupConfig(out, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: groupID, Config: grpcapi.GroupConfigToProto(cfg)})
	if err != nil {
		return sharegroup.GroupConfig{}, forwardErr(target, err)
	}
	return grpcapi.GroupConfigFromProto(resp.GetConfig()), nil
}

func (p grpcGroupPeers) DescribeGroup(ctx context.Context, peer, groupID string) (sharegroup.GroupDescription, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return sharegroup.GroupDescription{}, err
	}
	resp, err := c.DescribeShareGroup(out, &sharelogv1.DescribeShareGroupRequest{GroupId: groupID})
	if err != nil {
		return sharegroup.GroupDescription{}, forwardErr(target, err)
	}
	d := sharegroup.GroupDescription{GroupID: resp.GetGroupId(), State: groupState(resp.GetState()),
		GroupEpoch: resp.GetGroupEpoch(), AssignmentEpoch: resp.GetAssignmentEpoch(), Config: grpcapi.GroupConfigFromProto(resp.GetConfig()),
		Members:             make([]sharegroup.MemberDescription, len(resp.GetMembers())),
		DeadLetteredRecords: uint64(resp.GetDeadLetteredRecords()), DeadLetterSkippedRecords: uint64(resp.GetDeadLetterSkippedRecords())}
	for i, m := range resp.GetMembers() {
		d.Members[i] = sharegroup.MemberDescription{MemberID: m.GetMemberId(), MemberEpoch: m.GetMemberEpoch(), RackID: m.GetRackId(),
			ClientID: m.GetClientId(), ClientHost: m.GetClientHost(), SubscribedTopicNames: m.GetSubscribedTopicNames(),
			Assignment: assignmentFromProto(m.GetAssignment())}
	}
	return d, nil
}

func (p grpcGroupPeers) DescribeOffsets(ctx context.Context, peer, groupID string, topics []sharegroup.TopicPartitions) ([]sharegroup.TopicOffsets, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return nil, err
	}
	resp, err := c.DescribeShareGroupOffsets(out, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: groupID, Topics: topicPartitionsToProto(topics)})
	if err != nil {
		return nil, forwardErr(target, err)
	}
	res := make([]sharegroup.TopicOffsets, len(resp.GetTopics()))
	for i, t := range resp.GetTopics() {
		res[i] = sharegroup.TopicOffsets{Topic: t.GetTopic(), Partitions: make([]sharegroup.PartitionOffsets, len(t.GetPartitions()))}
		for j, pp := range t.GetPartitions() {
			res[i].Partitions[j] = sharegroup.PartitionOffsets{Partition: pp.GetPartition(), StartOffset: pp.GetStartOffset(), Lag: pp.GetLag(),
				ErrorCode: reasonOf(pp.GetErrorCode()), ErrorMessage: pp.GetErrorMessage()}
		}
	}
	return res, nil
}

func (p grpcGroupPeers) DescribePartitionState(ctx context.Context, peer, groupID string, topics []sharegroup.TopicPartitions, maxRanges int) ([]sharegroup.TopicState, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return nil, err
	}
	resp, err := c.DescribeSharePartitionState(out, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: groupID,
		Topics: topicPartitionsToProto(topics), MaxRanges: int32(maxRanges)})
	if err != nil {
		return nil, forwardErr(target, err)
	}
	res := make([]sharegroup.TopicState, len(resp.GetTopics()))
	for i, t := range resp.GetTopics() {
		res[i] = sharegroup.TopicState{Topic: t.GetTopic(), Partitions: make([]sharegroup.PartitionState, len(t.GetPartitions()))}
		for j, pp := range t.GetPartitions() {
			ps := sharegroup.PartitionState{Partition: pp.GetPartition(), StartOffset: pp.GetStartOffset(), EndOffset: pp.GetEndOffset(),
				Lag: pp.GetLag(), Truncated: pp.GetTruncated(), ErrorCode: reasonOf(pp.GetErrorCode()), ErrorMessage: pp.GetErrorMessage()}
			for _, r := range pp.GetRanges() {
				ir := sharegroup.InFlightRange{FirstOffset: r.GetFirstOffset(), LastOffset: r.GetLastOffset(),
					State: strings.TrimPrefix(r.GetState().String(), "IN_FLIGHT_STATE_"), DeliveryCount: r.GetDeliveryCount(),
					Owner: r.GetOwnerMemberId()}
				if ms := r.GetLockDeadlineUnixMs(); ms != 0 {
					ir.LockDeadline = time.UnixMilli(ms)
				}
				ps.Ranges = append(ps.Ranges, ir)
			}
			res[i].Partitions[j] = ps
		}
	}
	return res, nil
}

func (p grpcGroupPeers) AlterOffsets(ctx context.Context, peer, groupID string, topics []sharegroup.TopicStartOffsets) ([]sharegroup.TopicPartitionResults, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return nil, err
	}
	req := &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: groupID, Topics: make([]*sharelogv1.AlterShareGroupOffsetsTopic, len(topics))}
	for i, t := range topics {
		at := &sharelogv1.AlterShareGroupOffsetsTopic{Topic: t.Topic, Partitions: make([]*sharelogv1.AlterShareGroupOffsetsPartition, len(t.Partitions))}
		for j, pp := range t.Partitions {
			at.Partitions[j] = &sharelogv1.AlterShareGroupOffsetsPartition{Partition: pp.Partition, StartOffset: pp.StartOffset}
		}
		req.Topics[i] = at
	}
	resp, err := c.AlterShareGroupOffsets(out, req)
	if err != nil {
		return nil, forwardErr(target, err)
	}
	res := make([]sharegroup.TopicPartitionResults, len(resp.GetTopics()))
	for i, t := range resp.GetTopics() {
		res[i] = sharegroup.TopicPartitionResults{Topic: t.GetTopic(), Partitions: make([]sharegroup.PartitionResult, len(t.GetPartitions()))}
		for j, pp := range t.GetPartitions() {
			res[i].Partitions[j] = sharegroup.PartitionResult{Partition: pp.GetPartition(), ErrorCode: reasonOf(pp.GetErrorCode()),
				ErrorMessage: pp.GetErrorMessage()}
		}
	}
	return res, nil
}

func (p grpcGroupPeers) DeleteOffsets(ctx context.Context, peer, groupID string, topics []string) ([]sharegroup.TopicResult, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return nil, err
	}
	resp, err := c.DeleteShareGroupOffsets(out, &sharelogv1.DeleteShareGroupOffsetsRequest{GroupId: groupID, Topics: topics})
	if err != nil {
		return nil, forwardErr(target, err)
	}
	res := make([]sharegroup.TopicResult, len(resp.GetTopics()))
	for i, t := range resp.GetTopics() {
		res[i] = sharegroup.TopicResult{Topic: t.GetTopic(), ErrorCode: reasonOf(t.GetErrorCode()), ErrorMessage: t.GetErrorMessage()}
	}
	return res, nil
}

func (p grpcGroupPeers) DeleteGroup(ctx context.Context, peer, groupID string) error {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return err
	}
	if _, err := c.DeleteShareGroup(out, &sharelogv1.DeleteShareGroupRequest{GroupId: groupID}); err != nil {
		return forwardErr(target, err)
	}
	return nil
}

func (p grpcGroupPeers) ListGroups(ctx context.Context, peer string, filter sharegroup.GroupState) ([]sharegroup.GroupListing, error) {
	c, out, target, err := p.client(ctx, peer)
	if err != nil {
		return nil, err
	}
	resp, err := c.ListShareGroups(out, &sharelogv1.ListShareGroupsRequest{StateFilter: grpcapi.GroupStateToProto(filter)})
	if err != nil {
		return nil, forwardErr(target, err)
	}
	res := make([]sharegroup.GroupListing, len(resp.GetGroups()))
	for i, g := range resp.GetGroups() {
		res[i] = sharegroup.GroupListing{GroupID: g.GetGroupId(), State: groupState(g.GetState())}
	}
	return res, nil
}

// reasonOf is a per-partition outcome's reason, from the proto's
// ErrorCode (Kafka's numbers).
func reasonOf(c sharelogv1.ErrorCode) apierr.Reason { return apierr.ReasonOfKafkaCode(int16(c)) }

func assignmentFromProto(a *sharelogv1.Assignment) sharegroup.Assignment {
	var out sharegroup.Assignment
	for _, t := range a.GetTopicPartitions() {
		out.Topics = append(out.Topics, sharegroup.TopicPartitions{Topic: t.GetTopic(), Partitions: t.GetPartitions()})
	}
	return out
}

func topicPartitionsToProto(ts []sharegroup.TopicPartitions) []*sharelogv1.TopicPartitions {
	out := make([]*sharelogv1.TopicPartitions, len(ts))
	for i, t := range ts {
		out[i] = &sharelogv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions}
	}
	return out
}

// groupState is a peer's group state; a value this build does not know is
// StateUnknown.
func groupState(st sharelogv1.ShareGroupState) sharegroup.GroupState {
	gs, _ := grpcapi.GroupStateFromProto(st)
	return gs
}
