package grpcapi

// ShareGroupService: every RPC translates to internal/sharegroup, which
// holds every share-group rule. ShareGroupHeartbeat adds what the
// request message does not carry: client_id from the x-client-id metadata
// (the REST gateway forwards the X-Client-Id header as it) and client_host
// from the peer address, or from x-forwarded-for when the call came
// through the REST gateway (whose peer is its in-memory connection).
// A ShareFetch that may wait (max_wait_ms > 0) takes a --max-long-polls
// slot for its duration; when none is free its max_wait_ms becomes 0, so
// it answers at once with what is acquirable (possibly nothing). The bound
// sits here rather than in internal/sharegroup so that the domain stays
// unaware of server-wide limits; the cost is that a call which finds
// records at once holds a slot for that short time too.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// ShareGroups is what ShareGroupService needs from the share-group domain.
type ShareGroups interface {
	ShareFetch(ctx context.Context, req sharegroup.FetchRequest) (sharegroup.FetchResponse, error)
	ShareAcknowledge(ctx context.Context, req sharegroup.AckRequest) (sharegroup.AckResponse, error)
	GetConfig(ctx context.Context, groupID string) (sharegroup.GroupConfig, error)
	UpdateConfig(ctx context.Context, groupID string, c sharegroup.GroupConfig) (sharegroup.GroupConfig, error)
	Heartbeat(ctx context.Context, req sharegroup.HeartbeatRequest) (sharegroup.HeartbeatResponse, error)
	ListGroups(ctx context.Context, filter sharegroup.GroupState) ([]sharegroup.GroupListing, error)
	DescribeGroup(ctx context.Context, groupID string) (sharegroup.GroupDescription, error)
	DescribeOffsets(ctx context.Context, groupID string, topics []sharegroup.TopicPartitions) ([]sharegroup.TopicOffsets, error)
	DescribePartitionState(ctx context.Context, groupID string, topics []sharegroup.TopicPartitions, maxRanges int) ([]sharegroup.TopicState, error)
	AlterOffsets(ctx context.Context, groupID string, topics []sharegroup.TopicStartOffsets) ([]sharegroup.TopicPartitionResults, error)
	DeleteOffsets(ctx context.Context, groupID string, topics []string) ([]sharegroup.TopicResult, error)
	DeleteGroup(ctx context.Context, groupID string) error
}

// Metadata keys read by ShareGroupHeartbeat.
const (
	mdClientID     = "x-client-id"
	mdForwardedFor = "x-forwarded-for"
)

// ShareGroupService implements sharelogv1.ShareGroupServiceServer.
type ShareGroupService struct {
	sharelogv1.UnimplementedShareGroupServiceServer

	groups ShareGroups
	guard  *authz.Guard
	// dlqAutoCreate is --dlq-auto-create-topics: the server may create a
	// group's dead-letter topic, so naming one needs CREATE as well.
	dlqAutoCreate bool
}

// ShareGroupOption configures NewShareGroupService.
type ShareGroupOption func(*ShareGroupService)

// WithDLQAutoCreate tells the service that missing dead-letter topics are
// created by the server (--dlq-auto-create-topics).
func WithDLQAutoCreate(on bool) ShareGroupOption {
	return func(s *ShareGroupService) { s.dlqAutoCreate = on }
}

// NewShareGroupService returns the ShareGroupService handlers; guard
// checks permissions (nil = none). The share-group domain bounds waiting
// ShareFetch calls itself (sharegroup Options.LongPolls).
func NewShareGroupService(groups ShareGroups, guard *authz.Guard, opts ...ShareGroupOption) *ShareGroupService {
	s := &ShareGroupService{groups: groups, guard: guard}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ShareFetch needs READ on the group, and READ on each topic: a partition
// of a topic the caller may not read is not passed on (nor are its
// acknowledgements) and answers TOPIC_AUTHORIZATION_FAILED.
func (s *ShareGroupService) ShareFetch(ctx context.Context, req *sharelogv1.ShareFetchRequest) (*sharelogv1.ShareFetchResponse, error) {
	if err := requirePartitions(req.GetTopics()); err != nil {
		return nil, err
	}
	if err := s.guard.Require(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	entries, denied := s.readableEntries(ctx, entriesFromProto(req.GetTopics()))
	dreq := sharegroup.FetchRequest{
		GroupID:    req.GetGroupId(),
		MemberID:   req.GetMemberId(),
		Epoch:      req.GetShareSessionEpoch(),
		MaxWaitMs:  req.GetMaxWaitMs(),
		MinBytes:   req.GetMinBytes(),
		MaxBytes:   req.MaxBytes,
		MaxRecords: req.MaxRecords,
		BatchSize:  req.GetBatchSize(),
		IsRenewAck: req.GetIsRenewAck(),
		Partitions: entries,
	}
	if s.guard.Enforcing() {
		// The partitions the session already holds are checked again on
		// every fetch (docs/security.md).
		readable := s.guard.Topics(authz.Read)
		dreq.Readable = func(topic string) bool { return readable.Allowed(ctx, topic) }
	}
	for _, t := range req.GetForgottenTopicsData() {
		for _, p := range t.GetPartitions() {
			dreq.Forgotten = append(dreq.Forgotten, sharegroup.TopicPartition{Topic: t.GetTopic(), Partition: p})
		}
	}
	resp, err := s.groups.ShareFetch(ctx, dreq)
	if err != nil {
		return nil, err
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
	for _, u := range resp.Unreadable {
		if !slices.Contains(denied, u) {
			denied = append(denied, u)
		}
	}
	for _, d := range denied {
		tr := byTopic[d.Topic]
		if tr == nil {
			tr = &sharelogv1.ShareFetchTopicResponse{Topic: d.Topic}
			byTopic[d.Topic] = tr
			out.Responses = append(out.Responses, tr)
		}
		msg := deniedMessage(authz.Read, d.Topic)
		tr.Partitions = append(tr.Partitions, &sharelogv1.ShareFetchPartitionResponse{Partition: d.Partition,
			ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, ErrorMessage: msg,
			AcknowledgeErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, AcknowledgeErrorMessage: msg})
	}
	return out, nil
}

// readableEntries splits entries into those of topics the caller may READ
// and the partitions of the others.
func (s *ShareGroupService) readableEntries(ctx context.Context, entries []sharegroup.PartitionEntry) (ok []sharegroup.PartitionEntry, denied []sharegroup.TopicPartition) {
	check := s.guard.Topics(authz.Read)
	first := -1 // the first denied entry: until then, entries are passed on as they are
	for i, e := range entries {
		if !check.Allowed(ctx, e.Topic) {
			first = i
			break
		}
	}
	if first < 0 {
		return entries, nil
	}
	ok = append(make([]sharegroup.PartitionEntry, 0, len(entries)), entries[:first]...)
	for _, e := range entries[first:] {
		if check.Allowed(ctx, e.Topic) {
			ok = append(ok, e)
		} else {
			denied = append(denied, e.TopicPartition)
		}
	}
	return ok, denied
}

func deniedMessage(op authz.Operation, topic string) string {
	return fmt.Sprintf("not authorized to %s topic %q", op, topic)
}

// ShareAcknowledge needs what ShareFetch needs, checked the same way.
func (s *ShareGroupService) ShareAcknowledge(ctx context.Context, req *sharelogv1.ShareAcknowledgeRequest) (*sharelogv1.ShareAcknowledgeResponse, error) {
	if err := requirePartitions(req.GetTopics()); err != nil {
		return nil, err
	}
	if err := s.guard.Require(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	entries, denied := s.readableEntries(ctx, entriesFromProto(req.GetTopics()))
	resp, err := s.groups.ShareAcknowledge(ctx, sharegroup.AckRequest{
		GroupID:    req.GetGroupId(),
		MemberID:   req.GetMemberId(),
		Epoch:      req.GetShareSessionEpoch(),
		IsRenewAck: req.GetIsRenewAck(),
		Partitions: entries,
	})
	if err != nil {
		return nil, err
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
	for _, d := range denied {
		tr := byTopic[d.Topic]
		if tr == nil {
			tr = &sharelogv1.ShareAcknowledgeTopicResponse{Topic: d.Topic}
			byTopic[d.Topic] = tr
			out.Responses = append(out.Responses, tr)
		}
		tr.Partitions = append(tr.Partitions, &sharelogv1.ShareAcknowledgePartitionResponse{Partition: d.Partition,
			ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, ErrorMessage: deniedMessage(authz.Read, d.Topic)})
	}
	return out, nil
}

func (s *ShareGroupService) GetShareGroupConfig(ctx context.Context, req *sharelogv1.GetShareGroupConfigRequest) (*sharelogv1.GetShareGroupConfigResponse, error) {
	if err := s.guard.Require(ctx, authz.DescribeConfigs, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	cfg, err := s.groups.GetConfig(ctx, req.GetGroupId())
	if err != nil {
		return nil, err
	}
	return &sharelogv1.GetShareGroupConfigResponse{GroupId: req.GetGroupId(), Config: GroupConfigToProto(cfg)}, nil
}

func (s *ShareGroupService) UpdateShareGroupConfig(ctx context.Context, req *sharelogv1.UpdateShareGroupConfigRequest) (*sharelogv1.UpdateShareGroupConfigResponse, error) {
	if err := s.guard.Require(ctx, authz.AlterConfigs, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	c := req.GetConfig()
	if c == nil {
		// An update names at least the fields it sets: without a config
		// there is nothing to apply (REST: a PATCH body of {}).
		return nil, apierr.Invalid("config is required: name the fields to set")
	}
	// The server appends to the dead-letter topic on the group's behalf:
	// whoever names it must be allowed to write it, and, when the server
	// creates missing ones, to create it as CreateTopic would require
	// (docs/security.md).
	if t := c.GetDeadLetterTopic(); t != "" {
		if err := s.guard.Require(ctx, authz.Write, authz.Topic, t); err != nil {
			return nil, err
		}
		if s.dlqAutoCreate && !s.guard.Allowed(ctx, authz.Create, authz.Cluster, authz.ClusterName) {
			if err := s.guard.Require(ctx, authz.Create, authz.Topic, t); err != nil {
				return nil, err
			}
		}
	}
	cfg, err := s.groups.UpdateConfig(ctx, req.GetGroupId(), GroupConfigFromProto(c))
	s.guard.Changed(ctx, "UpdateShareGroupConfig", authz.Group, req.GetGroupId(), err, slog.String("config", c.String()))
	if err != nil {
		return nil, err
	}
	return &sharelogv1.UpdateShareGroupConfigResponse{GroupId: req.GetGroupId(), Config: GroupConfigToProto(cfg)}, nil
}

// GroupConfigToProto is a share group's config as the protos carry it
// (the handlers' answers; another instance's request to the coordinator).
func GroupConfigToProto(c sharegroup.GroupConfig) *sharelogv1.ShareGroupConfig {
	return &sharelogv1.ShareGroupConfig{
		RecordLockDurationMs:    c.RecordLockDurationMs,
		DeliveryCountLimit:      c.DeliveryCountLimit,
		PartitionMaxRecordLocks: c.PartitionMaxRecordLocks,
		AutoOffsetReset:         c.AutoOffsetReset,
		SessionTimeoutMs:        c.SessionTimeoutMs,
		HeartbeatIntervalMs:     c.HeartbeatIntervalMs,
		DeadLetterTopic:         c.DeadLetterTopic,
		Ordering:                orderingToProto(c.Ordering),
		IsolationLevel:          isolationToProto(c.IsolationLevel),

		RedeliveryBackoffInitialMs:  c.RedeliveryBackoffInitialMs,
		RedeliveryBackoffMaxMs:      c.RedeliveryBackoffMaxMs,
		RedeliveryBackoffMultiplier: c.RedeliveryBackoffMultiplier,
	}
}

func orderingToProto(o *string) *sharelogv1.Ordering {
	if o == nil {
		return nil
	}
	v := sharelogv1.Ordering_ORDERING_NONE
	if *o == sharegroup.OrderingKey {
		v = sharelogv1.Ordering_ORDERING_KEY
	}
	return &v
}

// orderingFromProto maps ORDERING_UNSPECIFIED and ORDERING_NONE to
// "none"; an unknown number is passed on so the domain refuses it.
func orderingFromProto(o *sharelogv1.Ordering) *string {
	if o == nil {
		return nil
	}
	var v string
	switch *o {
	case sharelogv1.Ordering_ORDERING_UNSPECIFIED, sharelogv1.Ordering_ORDERING_NONE:
		v = sharegroup.OrderingNone
	case sharelogv1.Ordering_ORDERING_KEY:
		v = sharegroup.OrderingKey
	default:
		v = o.String()
	}
	return &v
}

func isolationToProto(o *string) *sharelogv1.IsolationLevel {
	if o == nil {
		return nil
	}
	v := sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	if *o == sharegroup.ReadCommitted {
		v = sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	return &v
}

// isolationFromProto maps UNSPECIFIED and READ_UNCOMMITTED to
// "read_uncommitted"; an unknown number is passed on so the domain
// refuses it.
func isolationFromProto(o *sharelogv1.IsolationLevel) *string {
	if o == nil {
		return nil
	}
	var v string
	switch *o {
	case sharelogv1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED, sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED:
		v = sharegroup.ReadUncommitted
	case sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED:
		v = sharegroup.ReadCommitted
	default:
		v = o.String()
	}
	return &v
}

// GroupConfigFromProto is the inverse of GroupConfigToProto; a nil config
// is the zero config (every field unset).
func GroupConfigFromProto(c *sharelogv1.ShareGroupConfig) sharegroup.GroupConfig {
	if c == nil {
		return sharegroup.GroupConfig{}
	}
	return sharegroup.GroupConfig{
		RecordLockDurationMs:    c.RecordLockDurationMs,
		DeliveryCountLimit:      c.DeliveryCountLimit,
		PartitionMaxRecordLocks: c.PartitionMaxRecordLocks,
		AutoOffsetReset:         c.AutoOffsetReset,
		SessionTimeoutMs:        c.SessionTimeoutMs,
		HeartbeatIntervalMs:     c.HeartbeatIntervalMs,
		DeadLetterTopic:         c.DeadLetterTopic,
		Ordering:                orderingFromProto(c.Ordering),
		IsolationLevel:          isolationFromProto(c.IsolationLevel),

		RedeliveryBackoffInitialMs:  c.RedeliveryBackoffInitialMs,
		RedeliveryBackoffMaxMs:      c.RedeliveryBackoffMaxMs,
		RedeliveryBackoffMultiplier: c.RedeliveryBackoffMultiplier,
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

// codeToProto is a per-partition outcome as the proto's ErrorCode, which
// numbers Kafka's codes: a cast of the reason's Kafka code.
func codeToProto(r apierr.Reason) sharelogv1.ErrorCode {
	return sharelogv1.ErrorCode(r.KafkaCode())
}

// requirePartitions rejects a topics entry without partitions: the
// flattened domain request could not tell it from no entry at all.
func requirePartitions(topics []*sharelogv1.ShareFetchTopic) error {
	for i, t := range topics {
		if len(t.GetPartitions()) == 0 {
			return apierr.Invalid("topics[%d] (%q) names no partitions", i, t.GetTopic())
		}
	}
	return nil
}

// ShareGroupHeartbeat needs READ on the group. Subscribed topics the caller
// may not DESCRIBE are left out of the subscription (so the group assigns
// their partitions only to members who may see them) and out of the
// assignment; a subscription of such topics only is refused with
// TOPIC_AUTHORIZATION_FAILED, since an empty one would mean "unchanged".
func (s *ShareGroupService) ShareGroupHeartbeat(ctx context.Context, req *sharelogv1.ShareGroupHeartbeatRequest) (*sharelogv1.ShareGroupHeartbeatResponse, error) {
	if err := s.guard.Require(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	check := s.guard.Topics(authz.Describe)
	subs := req.GetSubscribedTopicNames()
	if len(subs) > 0 {
		visible := make([]string, 0, len(subs))
		for _, t := range subs {
			if check.Allowed(ctx, t) {
				visible = append(visible, t)
			}
		}
		if len(visible) == 0 {
			return nil, apierr.New(apierr.TopicAuthorizationFailed, "not authorized to DESCRIBE any of the subscribed topics")
		}
		subs = visible
	}
	clientID, clientHost := callerOf(ctx)
	resp, err := s.groups.Heartbeat(ctx, sharegroup.HeartbeatRequest{
		GroupID:              req.GetGroupId(),
		MemberID:             req.GetMemberId(),
		MemberEpoch:          req.GetMemberEpoch(),
		RackID:               req.RackId,
		SubscribedTopicNames: subs,
		ClientID:             clientID,
		ClientHost:           clientHost,
	})
	if err != nil {
		return nil, err
	}
	out := &sharelogv1.ShareGroupHeartbeatResponse{
		MemberId:            resp.MemberID,
		MemberEpoch:         resp.MemberEpoch,
		HeartbeatIntervalMs: resp.HeartbeatIntervalMs,
	}
	if resp.Assignment != nil {
		a := *resp.Assignment
		a.Topics = slices.DeleteFunc(slices.Clone(a.Topics), func(t sharegroup.TopicPartitions) bool { return !check.Allowed(ctx, t.Topic) })
		out.Assignment = assignmentToProto(a)
	}
	return out, nil
}

// callerOf returns the call's client id (x-client-id metadata, empty if
// absent) and client host: the first x-forwarded-for address when present
// (the REST gateway sets it to the HTTP client's address), else the peer's
// IP address.
func callerOf(ctx context.Context) (clientID, clientHost string) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(mdClientID); len(v) > 0 {
		clientID = v[0]
	}
	if v := md.Get(mdForwardedFor); len(v) > 0 {
		first, _, _ := strings.Cut(v[0], ",")
		if h := strings.TrimSpace(first); h != "" {
			return clientID, h
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		clientHost = p.Addr.String()
		if h, _, err := net.SplitHostPort(clientHost); err == nil {
			clientHost = h
		}
	}
	return clientID, clientHost
}

func (s *ShareGroupService) ListShareGroups(ctx context.Context, req *sharelogv1.ListShareGroupsRequest) (*sharelogv1.ListShareGroupsResponse, error) {
	filter, ok := GroupStateFromProto(req.GetStateFilter())
	if !ok {
		return nil, apierr.Invalid("state_filter %d is not a share group state", req.GetStateFilter())
	}
	groups, err := s.groups.ListGroups(ctx, filter)
	if err != nil {
		return nil, err
	}
	// Groups the caller may not DESCRIBE are left out, silently.
	out := &sharelogv1.ListShareGroupsResponse{Groups: make([]*sharelogv1.ShareGroupListing, 0, len(groups))}
	for _, g := range groups {
		if s.guard.Allowed(ctx, authz.Describe, authz.Group, g.GroupID) {
			out.Groups = append(out.Groups, &sharelogv1.ShareGroupListing{GroupId: g.GroupID, State: GroupStateToProto(g.State)})
		}
	}
	return out, nil
}

func (s *ShareGroupService) DescribeShareGroup(ctx context.Context, req *sharelogv1.DescribeShareGroupRequest) (*sharelogv1.DescribeShareGroupResponse, error) {
	if err := s.guard.Require(ctx, authz.Describe, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	d, err := s.groups.DescribeGroup(ctx, req.GetGroupId())
	if err != nil {
		return nil, err
	}
	// As Kafka's group describe: the members' subscriptions and assignments
	// name topics, so a caller who may not DESCRIBE one of them gets the
	// topic's authorization error instead of the group.
	check := s.guard.Topics(authz.Describe)
	for _, m := range d.Members {
		for _, t := range m.SubscribedTopicNames {
			if !check.Allowed(ctx, t) {
				return nil, apierr.New(apierr.TopicAuthorizationFailed, "not authorized to DESCRIBE a topic of group %q's members", req.GetGroupId())
			}
		}
		for _, t := range m.Assignment.Topics {
			if !check.Allowed(ctx, t.Topic) {
				return nil, apierr.New(apierr.TopicAuthorizationFailed, "not authorized to DESCRIBE a topic of group %q's members", req.GetGroupId())
			}
		}
	}
	out := &sharelogv1.DescribeShareGroupResponse{
		GroupId:         d.GroupID,
		State:           GroupStateToProto(d.State),
		GroupEpoch:      d.GroupEpoch,
		AssignmentEpoch: d.AssignmentEpoch,
		Config:          GroupConfigToProto(d.Config),
		Members:         make([]*sharelogv1.ShareGroupMember, len(d.Members)),

		DeadLetteredRecords:      int64(d.DeadLetteredRecords),
		DeadLetterSkippedRecords: int64(d.DeadLetterSkippedRecords),
	}
	for i, m := range d.Members {
		out.Members[i] = &sharelogv1.ShareGroupMember{
			MemberId:             m.MemberID,
			MemberEpoch:          m.MemberEpoch,
			RackId:               m.RackID,
			ClientId:             m.ClientID,
			ClientHost:           m.ClientHost,
			SubscribedTopicNames: m.SubscribedTopicNames,
			Assignment:           assignmentToProto(m.Assignment),
		}
	}
	return out, nil
}

// describableTopics checks DESCRIBE on each requested topic of a
// DescribeShareGroupOffsets or DescribeSharePartitionState: it returns the
// topics to pass on and, per requested topic, whether it passed.
func (s *ShareGroupService) describableTopics(ctx context.Context, req []*sharelogv1.TopicPartitions) ([]sharegroup.TopicPartitions, []bool) {
	check := s.guard.Topics(authz.Describe)
	topics := make([]sharegroup.TopicPartitions, 0, len(req))
	allowed := make([]bool, len(req))
	for i, t := range req {
		if allowed[i] = check.Allowed(ctx, t.GetTopic()); allowed[i] {
			topics = append(topics, sharegroup.TopicPartitions{Topic: t.GetTopic(), Partitions: t.GetPartitions()})
		}
	}
	return topics, allowed
}

// deniedPartitions are the partitions a denied topic entry answers for:
// those requested, or -1 (the topic as a whole) as for an unknown topic.
func deniedPartitions(parts []int32) []int32 {
	if len(parts) == 0 {
		return []int32{-1}
	}
	return parts
}

// DescribeShareGroupOffsets needs DESCRIBE on the group and on each topic;
// a requested topic without it answers TOPIC_AUTHORIZATION_FAILED per
// partition, and with no topics requested such topics are left out.
func (s *ShareGroupService) DescribeShareGroupOffsets(ctx context.Context, req *sharelogv1.DescribeShareGroupOffsetsRequest) (*sharelogv1.DescribeShareGroupOffsetsResponse, error) {
	if err := s.guard.Require(ctx, authz.Describe, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	topics, allowed := s.describableTopics(ctx, req.GetTopics())
	var res []sharegroup.TopicOffsets
	if len(topics) > 0 || len(req.GetTopics()) == 0 {
		var err error
		if res, err = s.groups.DescribeOffsets(ctx, req.GetGroupId(), topics); err != nil {
			return nil, err
		}
	}
	toProto := func(t sharegroup.TopicOffsets) *sharelogv1.ShareGroupOffsetsTopic {
		ot := &sharelogv1.ShareGroupOffsetsTopic{Topic: t.Topic, Partitions: make([]*sharelogv1.ShareGroupOffsetsPartition, len(t.Partitions))}
		for j, p := range t.Partitions {
			ot.Partitions[j] = &sharelogv1.ShareGroupOffsetsPartition{
				Partition: p.Partition, StartOffset: p.StartOffset, Lag: p.Lag,
				ErrorCode: codeToProto(p.ErrorCode), ErrorMessage: p.ErrorMessage,
			}
		}
		return ot
	}
	out := &sharelogv1.DescribeShareGroupOffsetsResponse{}
	if len(req.GetTopics()) == 0 {
		for _, t := range res {
			if s.guard.Allowed(ctx, authz.Describe, authz.Topic, t.Topic) {
				out.Topics = append(out.Topics, toProto(t))
			}
		}
		return out, nil
	}
	next := 0
	for i, t := range req.GetTopics() {
		if allowed[i] {
			out.Topics = append(out.Topics, toProto(res[next]))
			next++
			continue
		}
		ot := &sharelogv1.ShareGroupOffsetsTopic{Topic: t.GetTopic()}
		for _, p := range deniedPartitions(t.GetPartitions()) {
			ot.Partitions = append(ot.Partitions, &sharelogv1.ShareGroupOffsetsPartition{Partition: p, StartOffset: -1, Lag: -1,
				ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, ErrorMessage: deniedMessage(authz.Describe, t.GetTopic())})
		}
		out.Topics = append(out.Topics, ot)
	}
	return out, nil
}

// AlterShareGroupOffsets needs READ on the group and on each topic; a topic
// without it is not passed on and answers TOPIC_AUTHORIZATION_FAILED per
// partition.
func (s *ShareGroupService) AlterShareGroupOffsets(ctx context.Context, req *sharelogv1.AlterShareGroupOffsetsRequest) (*sharelogv1.AlterShareGroupOffsetsResponse, error) {
	if err := s.guard.Require(ctx, authz.Read, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	check := s.guard.Topics(authz.Read)
	allowed := make([]bool, len(req.GetTopics()))
	topics := make([]sharegroup.TopicStartOffsets, 0, len(req.GetTopics()))
	for i, t := range req.GetTopics() {
		if allowed[i] = check.Allowed(ctx, t.GetTopic()); !allowed[i] {
			continue
		}
		ts := sharegroup.TopicStartOffsets{Topic: t.GetTopic()}
		for _, p := range t.GetPartitions() {
			ts.Partitions = append(ts.Partitions, sharegroup.PartitionStartOffset{Partition: p.GetPartition(), StartOffset: p.GetStartOffset()})
		}
		topics = append(topics, ts)
	}
	var res []sharegroup.TopicPartitionResults
	if len(topics) > 0 || len(req.GetTopics()) == 0 {
		var err error
		res, err = s.groups.AlterOffsets(ctx, req.GetGroupId(), topics)
		if err != nil {
			s.guard.Changed(ctx, "AlterShareGroupOffsets", authz.Group, req.GetGroupId(), err)
			return nil, err
		}
	}
	out := &sharelogv1.AlterShareGroupOffsetsResponse{Topics: make([]*sharelogv1.AlterShareGroupOffsetsTopicResult, len(req.GetTopics()))}
	next := 0
	for i, t := range req.GetTopics() {
		ot := &sharelogv1.AlterShareGroupOffsetsTopicResult{Topic: t.GetTopic()}
		if !allowed[i] {
			for _, p := range t.GetPartitions() {
				ot.Partitions = append(ot.Partitions, &sharelogv1.AlterShareGroupOffsetsPartitionResult{Partition: p.GetPartition(),
					ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, ErrorMessage: deniedMessage(authz.Read, t.GetTopic())})
			}
			out.Topics[i] = ot
			continue
		}
		for j, p := range res[next].Partitions {
			ot.Partitions = append(ot.Partitions, &sharelogv1.AlterShareGroupOffsetsPartitionResult{
				Partition: p.Partition, ErrorCode: codeToProto(p.ErrorCode), ErrorMessage: p.ErrorMessage,
			})
			var perr error
			if p.ErrorCode != apierr.None {
				perr = errors.New(p.ErrorMessage)
			}
			s.guard.Changed(ctx, "AlterShareGroupOffsets", authz.Group, req.GetGroupId(), perr, slog.String("topic", t.GetTopic()),
				slog.Int("partition", int(p.Partition)), slog.Int64("start_offset", t.GetPartitions()[j].GetStartOffset()))
		}
		next++
		out.Topics[i] = ot
	}
	return out, nil
}

// DeleteShareGroupOffsets needs DELETE on the group.
func (s *ShareGroupService) DeleteShareGroupOffsets(ctx context.Context, req *sharelogv1.DeleteShareGroupOffsetsRequest) (*sharelogv1.DeleteShareGroupOffsetsResponse, error) {
	if err := s.guard.Require(ctx, authz.Delete, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	res, err := s.groups.DeleteOffsets(ctx, req.GetGroupId(), req.GetTopics())
	if err != nil {
		s.guard.Changed(ctx, "DeleteShareGroupOffsets", authz.Group, req.GetGroupId(), err, slog.Any("topics", req.GetTopics()))
		return nil, err
	}
	out := &sharelogv1.DeleteShareGroupOffsetsResponse{Topics: make([]*sharelogv1.DeleteShareGroupOffsetsTopicResult, len(res))}
	for i, t := range res {
		out.Topics[i] = &sharelogv1.DeleteShareGroupOffsetsTopicResult{Topic: t.Topic, ErrorCode: codeToProto(t.ErrorCode), ErrorMessage: t.ErrorMessage}
		var terr error
		if t.ErrorCode != apierr.None {
			terr = errors.New(t.ErrorMessage)
		}
		s.guard.Changed(ctx, "DeleteShareGroupOffsets", authz.Group, req.GetGroupId(), terr, slog.String("topic", t.Topic))
	}
	return out, nil
}

// DeleteShareGroup needs DELETE on the group.
func (s *ShareGroupService) DeleteShareGroup(ctx context.Context, req *sharelogv1.DeleteShareGroupRequest) (*sharelogv1.DeleteShareGroupResponse, error) {
	if err := s.guard.Require(ctx, authz.Delete, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	err := s.groups.DeleteGroup(ctx, req.GetGroupId())
	s.guard.Changed(ctx, "DeleteShareGroup", authz.Group, req.GetGroupId(), err)
	if err != nil {
		return nil, err
	}
	return &sharelogv1.DeleteShareGroupResponse{}, nil
}

func assignmentToProto(a sharegroup.Assignment) *sharelogv1.Assignment {
	out := &sharelogv1.Assignment{TopicPartitions: make([]*sharelogv1.TopicPartitions, len(a.Topics))}
	for i, t := range a.Topics {
		out.TopicPartitions[i] = &sharelogv1.TopicPartitions{Topic: t.Topic, Partitions: t.Partitions}
	}
	return out
}

// GroupStateToProto is a group state as the protos carry it.
func GroupStateToProto(st sharegroup.GroupState) sharelogv1.ShareGroupState {
	switch st {
	case sharegroup.StateEmpty:
		return sharelogv1.ShareGroupState_SHARE_GROUP_STATE_EMPTY
	case sharegroup.StateStable:
		return sharelogv1.ShareGroupState_SHARE_GROUP_STATE_STABLE
	case sharegroup.StateDead:
		return sharelogv1.ShareGroupState_SHARE_GROUP_STATE_DEAD
	}
	return sharelogv1.ShareGroupState_SHARE_GROUP_STATE_UNSPECIFIED
}

// GroupStateFromProto maps a state filter; UNSPECIFIED is no filter (and
// StateUnknown); false for a value the protos do not define.
func GroupStateFromProto(st sharelogv1.ShareGroupState) (sharegroup.GroupState, bool) {
	switch st {
	case sharelogv1.ShareGroupState_SHARE_GROUP_STATE_UNSPECIFIED:
		return sharegroup.StateUnknown, true
	case sharelogv1.ShareGroupState_SHARE_GROUP_STATE_EMPTY:
		return sharegroup.StateEmpty, true
	case sharelogv1.ShareGroupState_SHARE_GROUP_STATE_STABLE:
		return sharegroup.StateStable, true
	case sharelogv1.ShareGroupState_SHARE_GROUP_STATE_DEAD:
		return sharegroup.StateDead, true
	}
	return 0, false
}

// DescribeSharePartitionState needs what DescribeShareGroupOffsets needs
// (DESCRIBE on the group and on each topic), checked the same way: it
// shows no more than the offsets do, record by record.
func (s *ShareGroupService) DescribeSharePartitionState(ctx context.Context, req *sharelogv1.DescribeSharePartitionStateRequest) (*sharelogv1.DescribeSharePartitionStateResponse, error) {
	if err := s.guard.Require(ctx, authz.Describe, authz.Group, req.GetGroupId()); err != nil {
		return nil, err
	}
	topics, allowed := s.describableTopics(ctx, req.GetTopics())
	var res []sharegroup.TopicState
	if len(topics) > 0 || len(req.GetTopics()) == 0 {
		var err error
		if res, err = s.groups.DescribePartitionState(ctx, req.GetGroupId(), topics, int(req.GetMaxRanges())); err != nil {
			return nil, err
		}
	}
	out := s.partitionStateToProto(res)
	if len(req.GetTopics()) == 0 {
		out.Topics = slices.DeleteFunc(out.Topics, func(t *sharelogv1.SharePartitionStateTopic) bool {
			return !s.guard.Allowed(ctx, authz.Describe, authz.Topic, t.GetTopic())
		})
		return out, nil
	}
	merged := make([]*sharelogv1.SharePartitionStateTopic, len(req.GetTopics()))
	next := 0
	for i, t := range req.GetTopics() {
		if allowed[i] {
			merged[i] = out.Topics[next]
			next++
			continue
		}
		ot := &sharelogv1.SharePartitionStateTopic{Topic: t.GetTopic()}
		for _, p := range deniedPartitions(t.GetPartitions()) {
			ot.Partitions = append(ot.Partitions, &sharelogv1.SharePartitionState{Partition: p, StartOffset: -1, EndOffset: -1, Lag: -1,
				ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED, ErrorMessage: deniedMessage(authz.Describe, t.GetTopic())})
		}
		merged[i] = ot
	}
	out.Topics = merged
	return out, nil
}

func (s *ShareGroupService) partitionStateToProto(res []sharegroup.TopicState) *sharelogv1.DescribeSharePartitionStateResponse {
	out := &sharelogv1.DescribeSharePartitionStateResponse{Topics: make([]*sharelogv1.SharePartitionStateTopic, len(res))}
	for i, t := range res {
		ot := &sharelogv1.SharePartitionStateTopic{Topic: t.Topic, Partitions: make([]*sharelogv1.SharePartitionState, len(t.Partitions))}
		for j, p := range t.Partitions {
			op := &sharelogv1.SharePartitionState{
				Partition: p.Partition, StartOffset: p.StartOffset, EndOffset: p.EndOffset, Lag: p.Lag,
				Truncated: p.Truncated, ErrorCode: codeToProto(p.ErrorCode), ErrorMessage: p.ErrorMessage,
				KeyWaiting: p.KeyWaiting, OldestKeyWaitingOffset: p.OldestKeyWaiting,
			}
			for _, r := range p.Ranges {
				ir := &sharelogv1.InFlightRange{
					FirstOffset: r.FirstOffset, LastOffset: r.LastOffset, DeliveryCount: r.DeliveryCount,
					State:         sharelogv1.InFlightState(sharelogv1.InFlightState_value["IN_FLIGHT_STATE_"+r.State]),
					OwnerMemberId: r.Owner,
				}
				if !r.LockDeadline.IsZero() {
					ir.LockDeadlineUnixMs = r.LockDeadline.UnixMilli()
				}
				if !r.AvailableAt.IsZero() {
					ir.AvailableAtUnixMs = r.AvailableAt.UnixMilli()
				}
				op.Ranges = append(op.Ranges, ir)
			}
			ot.Partitions[j] = op
		}
		out.Topics[i] = ot
	}
	return out
}
