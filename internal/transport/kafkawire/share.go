package kafkawire

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// shareSessionKey names a share session (group, member).
type shareSessionKey struct{ group, member string }

// Kafka acknowledge types (KIP-932, KIP-1222).
const (
	kafkaAckGap     = 0
	kafkaAckAccept  = 1
	kafkaAckRelease = 2
	kafkaAckReject  = 3
	kafkaAckRenew   = 4
)

var ackTypes = map[int8]sharegroup.AckType{
	kafkaAckGap: sharegroup.AckGap, kafkaAckAccept: sharegroup.AckAccept, kafkaAckRelease: sharegroup.AckRelease,
	kafkaAckReject: sharegroup.AckReject, kafkaAckRenew: sharegroup.AckRenew,
}

func init() {
	shareHandlers[76] = handler{1, 1, (*Listener).handleShareGroupHeartbeat}
	shareHandlers[78] = handler{1, 2, (*Listener).handleShareFetch}
	shareHandlers[79] = handler{1, 2, (*Listener).handleShareAcknowledge}
}

// ownShareSession records that c opened (group, member)'s share session: it
// ends when c closes, unless another connection opens it again first.
func (c *conn) ownShareSession(k shareSessionKey) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.l.shareOwners == nil {
		c.l.shareOwners = map[shareSessionKey]*conn{}
	}
	c.l.shareOwners[k] = c
	if c.shareSessions == nil {
		c.shareSessions = map[shareSessionKey]struct{}{}
	}
	c.shareSessions[k] = struct{}{}
}

// disownShareSession forgets a session c closed itself.
func (c *conn) disownShareSession(k shareSessionKey) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.l.shareOwners[k] == c {
		delete(c.l.shareOwners, k)
	}
	delete(c.shareSessions, k)
}

// endShareSessions ends every share session c still owns, as an epoch -1
// close does: Kafka ties a share session to its connection, and the
// records it holds are released (without charging their delivery count).
func (c *conn) endShareSessions() {
	if len(c.shareSessions) == 0 {
		return
	}
	var owned []shareSessionKey
	c.l.mu.Lock()
	for k := range c.shareSessions {
		if c.l.shareOwners[k] == c {
			delete(c.l.shareOwners, k)
			owned = append(owned, k)
		}
	}
	c.shareSessions = nil
	c.l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx, release, err := c.l.withDomain(ctx)
	if err != nil {
		return // no backend: its sessions went with it
	}
	defer release()
	share := c.l.shareOf(ctx)
	if share == nil {
		return
	}
	for _, k := range owned {
		_, err := share.ShareAcknowledge(ctx, sharegroup.AckRequest{GroupID: k.group, MemberID: k.member, Epoch: -1})
		if err != nil && apierr.ReasonOf(err) != apierr.ShareSessionNotFound {
			c.l.logger.Warn("kafka: end share session of a closed connection", "group", k.group, "member", k.member, "error", err)
		}
	}
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// resolveTopicID returns the name of the topic with id; ok is false when
// no topic has that id (now).
func (l *Listener) resolveTopicID(ctx context.Context, id [16]byte) (string, bool) {
	if v, ok := l.idNames.Load(id); ok {
		name := v.(string)
		if info, err := l.logOf(ctx).TopicInfo(ctx, name); err == nil && topicID(info.ID) == id {
			return name, true
		}
		l.idNames.Delete(id)
	}
	info, err := l.topicByID(ctx, id)
	if err != nil {
		if id == l.internalTopicID(ctx) {
			return consumerOffsetsTopic, true
		}
		return "", false
	}
	l.idNames.Store(id, info.Name)
	return info.Name, true
}

// nameID returns the Kafka topic id of a topic name (zero if unknown).
func (l *Listener) nameID(ctx context.Context, name string) [16]byte {
	if name == consumerOffsetsTopic {
		return l.internalTopicID(ctx)
	}
	info, err := l.logOf(ctx).TopicInfo(ctx, name)
	if err != nil {
		return [16]byte{}
	}
	return topicID(info.ID)
}

func (l *Listener) handleShareGroupHeartbeat(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ShareGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	if err := l.requireGroup(ctx, authz.Read, req.GroupID); err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("share group heartbeat", err)
		return resp, nil
	}
	if l.cfg.Cluster != nil {
		// At the group's coordinator only, as Kafka: a client sends its
		// heartbeats where FindCoordinator pointed it.
		if node := l.cfg.Cluster.Coordinator(ctx, coordinatorGroup, req.GroupID); node != l.self() {
			resp.ErrorCode = kerr.NotCoordinator.Code
			msg := fmt.Sprintf("share group %q is coordinated by broker %d", req.GroupID, node)
			resp.ErrorMessage = &msg
			return resp, nil
		}
	}
	// Subscribed topics the caller may not DESCRIBE are left out; only such
	// topics is TOPIC_AUTHORIZATION_FAILED (an empty list would mean
	// "unchanged"), as the gRPC ShareGroupHeartbeat.
	subs := req.SubscribedTopicNames
	if len(subs) > 0 && l.cfg.Guard.Enforcing() {
		check := l.topics(authz.Describe)
		visible := make([]string, 0, len(subs))
		for _, t := range subs {
			if check.Allowed(ctx, t) {
				visible = append(visible, t)
			}
		}
		if len(visible) == 0 {
			resp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			msg := "not authorized to DESCRIBE any of the subscribed topics"
			resp.ErrorMessage = &msg
			return resp, nil
		}
		subs = visible
	}
	host, _, _ := net.SplitHostPort(c.nc.RemoteAddr().String())
	hr := sharegroup.HeartbeatRequest{
		GroupID: req.GroupID, MemberID: req.MemberID, MemberEpoch: req.MemberEpoch, RackID: req.RackID,
		SubscribedTopicNames: subs, ClientHost: host,
	}
	if c.clientID != nil {
		hr.ClientID = *c.clientID
	}
	out, err := l.shareOf(ctx).Heartbeat(ctx, hr)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("share group heartbeat", err)
		return resp, nil
	}
	resp.MemberID = &out.MemberID
	resp.MemberEpoch = out.MemberEpoch
	resp.HeartbeatIntervalMillis = out.HeartbeatIntervalMs
	if out.Assignment != nil {
		a := kmsg.NewShareGroupHeartbeatResponseAssignment()
		for _, t := range out.Assignment.Topics {
			// The ID the partitions were assigned of, not the one the
			// name has now: a topic re-created meanwhile (maybe with
			// fewer partitions) is another topic, assigned by the next
			// heartbeat.
			id := topicID(t.TopicID)
			if id == ([16]byte{}) || l.nameID(ctx, t.Topic) != id {
				continue // deleted since the assignment was computed
			}
			tp := kmsg.NewShareGroupHeartbeatResponseAssignmentTopicPartition()
			tp.TopicID, tp.Partitions = id, t.Partitions
			a.TopicPartitions = append(a.TopicPartitions, tp)
		}
		resp.Assignment = &a
	}
	return resp, nil
}

// ackBatches converts Kafka acknowledgement batches.
func ackBatches[B any](in []B, get func(*B) (int64, int64, []int8)) ([]sharegroup.AckBatch, bool) {
	out := make([]sharegroup.AckBatch, 0, len(in))
	for i := range in {
		first, last, types := get(&in[i])
		b := sharegroup.AckBatch{FirstOffset: first, LastOffset: last, Types: make([]sharegroup.AckType, len(types))}
		for j, t := range types {
			at, ok := ackTypes[t]
			if !ok {
				return nil, false
			}
			b.Types[j] = at
		}
		out = append(out, b)
	}
	return out, true
}

// handleShareFetch serves ShareFetch: sessions by epoch (0 opens, N
// continues, -1 closes), piggybacked acknowledgements, acquisition with
// long-poll; each acquired range is returned as one record batch beside its
// AcquiredRecords entry.
func (l *Listener) handleShareFetch(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ShareFetchRequest)
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	if req.GroupID == nil || req.MemberID == nil {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	if err := l.requireGroup(ctx, authz.Read, *req.GroupID); err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("share fetch", err)
		return resp, nil
	}
	if l.shareOf(ctx) == nil {
		ids := map[[16]byte][]int32{}
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				ids[t.TopicID] = append(ids[t.TopicID], p.Partition)
			}
		}
		byTopic := map[[16]byte]int{}
		ls := l.notLeaderShare(ctx, ids, func(id [16]byte, part int32, code int16, leader, epoch int32) {
			i, ok := byTopic[id]
			if !ok {
				t := kmsg.NewShareFetchResponseTopic()
				t.TopicID = id
				resp.Topics = append(resp.Topics, t)
				i = len(resp.Topics) - 1
				byTopic[id] = i
			}
			rp := kmsg.NewShareFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode = part, code
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leader, epoch
			resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
		})
		for _, b := range ls.elsewhere() {
			e := kmsg.NewShareFetchResponseNodeEndpoint()
			e.NodeID, e.Host, e.Port = b.NodeID, b.Host, b.Port
			resp.NodeEndpoints = append(resp.NodeEndpoints, e)
		}
		return resp, nil
	}
	fr := sharegroup.FetchRequest{
		GroupID: *req.GroupID, MemberID: *req.MemberID, Epoch: req.ShareSessionEpoch,
		MaxWaitMs: req.MaxWaitMillis, MinBytes: req.MinBytes, BatchSize: req.BatchSize, IsRenewAck: req.IsRenewAck,
	}
	if l.cfg.Guard.Enforcing() {
		// READ on each topic, rechecked for the partitions the session
		// already holds, as over gRPC (docs/security.md).
		readable := l.topics(authz.Read)
		fr.Readable = func(topic string) bool { return readable.Allowed(ctx, topic) }
	}
	maxBytes, maxRecords := req.MaxBytes, req.MaxRecords
	fr.MaxBytes, fr.MaxRecords = &maxBytes, &maxRecords
	unknown := map[[16]byte][]int32{}
	ids := map[string][16]byte{}
	// A partition of a topic the caller may not READ is not passed on (nor
	// are its acknowledgements) and answers TOPIC_AUTHORIZATION_FAILED, as
	// over gRPC (docs/security.md).
	readable := l.topics(authz.Read)
	var denied []sharegroup.TopicPartition
	for _, t := range req.Topics {
		name, ok := l.resolveTopicID(ctx, t.TopicID)
		for _, p := range t.Partitions {
			if !ok {
				unknown[t.TopicID] = append(unknown[t.TopicID], p.Partition)
				continue
			}
			ids[name] = t.TopicID
			batches, valid := ackBatches(p.AcknowledgementBatches, func(b *kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) (int64, int64, []int8) {
				return b.FirstOffset, b.LastOffset, b.AcknowledgeTypes
			})
			if !valid {
				resp.ErrorCode = kerr.InvalidRequest.Code
				return resp, nil
			}
			if !readable.Allowed(ctx, name) {
				denied = append(denied, sharegroup.TopicPartition{Topic: name, Partition: p.Partition})
				continue
			}
			fr.Partitions = append(fr.Partitions, sharegroup.PartitionEntry{
				TopicPartition: sharegroup.TopicPartition{Topic: name, Partition: p.Partition},
				TopicID:        uuid.UUID(t.TopicID).String(), Batches: batches})
		}
	}
	for _, t := range req.ForgottenTopicsData {
		name, ok := l.resolveTopicID(ctx, t.TopicID)
		if !ok {
			continue // nothing of an unknown topic can be in the session
		}
		for _, p := range t.Partitions {
			fr.Forgotten = append(fr.Forgotten, sharegroup.TopicPartition{Topic: name, Partition: p})
		}
	}
	out, err := l.shareOf(ctx).ShareFetch(ctx, fr)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("share fetch", err)
		return resp, nil
	}
	key := shareSessionKey{fr.GroupID, fr.MemberID}
	switch {
	case fr.Epoch == 0:
		c.ownShareSession(key)
	case fr.Epoch == -1:
		c.disownShareSession(key)
	}
	resp.AcquisitionLockTimeoutMillis = out.AcquisitionLockTimeoutMs
	leaders := l.newLeaders(ctx)
	defer func() {
		for _, b := range leaders.elsewhere() {
			e := kmsg.NewShareFetchResponseNodeEndpoint()
			e.NodeID, e.Host, e.Port = b.NodeID, b.Host, b.Port
			resp.NodeEndpoints = append(resp.NodeEndpoints, e)
		}
	}()
	byTopic := map[[16]byte]int{}
	topicOf := func(id [16]byte) *kmsg.ShareFetchResponseTopic {
		i, ok := byTopic[id]
		if !ok {
			t := kmsg.NewShareFetchResponseTopic()
			t.TopicID = id
			resp.Topics = append(resp.Topics, t)
			i = len(resp.Topics) - 1
			byTopic[id] = i
		}
		return &resp.Topics[i]
	}
	for _, p := range out.Partitions {
		id := resultID(ctx, l, p.TopicID, p.Topic, ids)
		rp := kmsg.NewShareFetchResponseTopicPartition()
		rp.Partition = p.Partition
		rp.ErrorCode, rp.ErrorMessage = p.ErrorCode.KafkaCode(), optString(p.ErrorMessage)
		rp.AcknowledgeErrorCode, rp.AcknowledgeErrorMessage = p.AckErrorCode.KafkaCode(), optString(p.AckErrorMessage)
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leaders.of(p.Topic, p.Partition)
		rp.Records = encodeAcquired(p.Records, p.Acquired)
		for _, a := range p.Acquired {
			ar := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
			ar.FirstOffset, ar.LastOffset, ar.DeliveryCount = a.FirstOffset, a.LastOffset, int16(min(a.DeliveryCount, 1<<15-1))
			rp.AcquiredRecords = append(rp.AcquiredRecords, ar)
		}
		t := topicOf(id)
		t.Partitions = append(t.Partitions, rp)
	}
	for _, u := range out.Unreadable {
		if !slices.Contains(denied, u) {
			denied = append(denied, u)
		}
	}
	for _, d := range denied {
		rp := kmsg.NewShareFetchResponseTopicPartition()
		rp.Partition, rp.ErrorCode = d.Partition, kerr.TopicAuthorizationFailed.Code
		rp.ErrorMessage = optString(fmt.Sprintf("not authorized to %s topic %q", authz.Read, d.Topic))
		rp.AcknowledgeErrorCode = kerr.TopicAuthorizationFailed.Code
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
		rp.Records = []byte{}
		t := topicOf(resultID(ctx, l, "", d.Topic, ids))
		t.Partitions = append(t.Partitions, rp)
	}
	for id, parts := range unknown {
		t := topicOf(id)
		for _, p := range parts {
			rp := kmsg.NewShareFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, kerr.UnknownTopicID.Code
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
			t.Partitions = append(t.Partitions, rp)
		}
	}
	return resp, nil
}

// resultID is the Kafka topic ID a share result is reported under: the ID
// of the topic the domain served (a deleted topic's partition under its
// old ID, never the ID of a topic re-created with its name since), else
// the ID the request named it by, else the name's current ID.
func resultID(ctx context.Context, l *Listener, domainID, name string, named map[string][16]byte) [16]byte {
	if id := topicID(domainID); id != ([16]byte{}) {
		return id
	}
	if id, ok := named[name]; ok {
		return id
	}
	return l.nameID(ctx, name)
}

// encodeAcquired encodes records (one per acquired offset, ascending) as
// one batch per acquired range.
func encodeAcquired(recs []broker.Record, acquired []sharegroup.AcquiredRange) []byte {
	out := []byte{} // empty, not null, as for Fetch
	i := 0
	for _, a := range acquired {
		j := i
		for j < len(recs) && recs[j].Offset <= a.LastOffset {
			j++
		}
		out = appendBatch(out, recs[i:j])
		i = j
	}
	return out
}

// handleShareAcknowledge applies acknowledgements outside a fetch
// (including RENEW when IsRenewAck) and closes the session at epoch -1.
func (l *Listener) handleShareAcknowledge(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ShareAcknowledgeRequest)
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	if req.GroupID == nil || req.MemberID == nil {
		resp.ErrorCode = kerr.InvalidRequest.Code
		return resp, nil
	}
	if err := l.requireGroup(ctx, authz.Read, *req.GroupID); err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("share acknowledge", err)
		return resp, nil
	}
	if l.shareOf(ctx) == nil {
		ids := map[[16]byte][]int32{}
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				ids[t.TopicID] = append(ids[t.TopicID], p.Partition)
			}
		}
		byTopic := map[[16]byte]int{}
		ls := l.notLeaderShare(ctx, ids, func(id [16]byte, part int32, code int16, leader, epoch int32) {
			i, ok := byTopic[id]
			if !ok {
				t := kmsg.NewShareAcknowledgeResponseTopic()
				t.TopicID = id
				resp.Topics = append(resp.Topics, t)
				i = len(resp.Topics) - 1
				byTopic[id] = i
			}
			rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			rp.Partition, rp.ErrorCode = part, code
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leader, epoch
			resp.Topics[i].Partitions = append(resp.Topics[i].Partitions, rp)
		})
		for _, b := range ls.elsewhere() {
			e := kmsg.NewShareAcknowledgeResponseNodeEndpoint()
			e.NodeID, e.Host, e.Port = b.NodeID, b.Host, b.Port
			resp.NodeEndpoints = append(resp.NodeEndpoints, e)
		}
		return resp, nil
	}
	ar := sharegroup.AckRequest{GroupID: *req.GroupID, MemberID: *req.MemberID, Epoch: req.ShareSessionEpoch, IsRenewAck: req.IsRenewAck}
	unknown := map[[16]byte][]int32{}
	ids := map[string][16]byte{}
	// READ on each topic, as ShareFetch and the gRPC ShareAcknowledge
	// (docs/security.md): a denied topic's acknowledgements are not passed on
	// and its partitions answer TOPIC_AUTHORIZATION_FAILED.
	readable := l.topics(authz.Read)
	var denied []sharegroup.TopicPartition
	for _, t := range req.Topics {
		name, ok := l.resolveTopicID(ctx, t.TopicID)
		for _, p := range t.Partitions {
			if !ok {
				unknown[t.TopicID] = append(unknown[t.TopicID], p.Partition)
				continue
			}
			ids[name] = t.TopicID
			batches, valid := ackBatches(p.AcknowledgementBatches, func(b *kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) (int64, int64, []int8) {
				return b.FirstOffset, b.LastOffset, b.AcknowledgeTypes
			})
			if !valid {
				resp.ErrorCode = kerr.InvalidRequest.Code
				return resp, nil
			}
			if !readable.Allowed(ctx, name) {
				denied = append(denied, sharegroup.TopicPartition{Topic: name, Partition: p.Partition})
				continue
			}
			ar.Partitions = append(ar.Partitions, sharegroup.PartitionEntry{
				TopicPartition: sharegroup.TopicPartition{Topic: name, Partition: p.Partition},
				TopicID:        uuid.UUID(t.TopicID).String(), Batches: batches})
		}
	}
	out, err := l.shareOf(ctx).ShareAcknowledge(ctx, ar)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = l.requestError("share acknowledge", err)
		return resp, nil
	}
	if ar.Epoch == -1 {
		c.disownShareSession(shareSessionKey{ar.GroupID, ar.MemberID})
	}
	resp.AcquisitionLockTimeoutMillis = out.AcquisitionLockTimeoutMs
	leaders := l.newLeaders(ctx)
	defer func() {
		for _, b := range leaders.elsewhere() {
			e := kmsg.NewShareAcknowledgeResponseNodeEndpoint()
			e.NodeID, e.Host, e.Port = b.NodeID, b.Host, b.Port
			resp.NodeEndpoints = append(resp.NodeEndpoints, e)
		}
	}()
	byTopic := map[[16]byte]int{}
	topicOf := func(id [16]byte) *kmsg.ShareAcknowledgeResponseTopic {
		i, ok := byTopic[id]
		if !ok {
			t := kmsg.NewShareAcknowledgeResponseTopic()
			t.TopicID = id
			resp.Topics = append(resp.Topics, t)
			i = len(resp.Topics) - 1
			byTopic[id] = i
		}
		return &resp.Topics[i]
	}
	for _, p := range out.Partitions {
		rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
		rp.Partition = p.Partition
		rp.ErrorCode, rp.ErrorMessage = p.ErrorCode.KafkaCode(), optString(p.ErrorMessage)
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = leaders.of(p.Topic, p.Partition)
		t := topicOf(resultID(ctx, l, p.TopicID, p.Topic, ids))
		t.Partitions = append(t.Partitions, rp)
	}
	for _, d := range denied {
		rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
		rp.Partition, rp.ErrorCode = d.Partition, kerr.TopicAuthorizationFailed.Code
		rp.ErrorMessage = optString(fmt.Sprintf("not authorized to %s topic %q", authz.Read, d.Topic))
		rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
		t := topicOf(ids[d.Topic])
		t.Partitions = append(t.Partitions, rp)
	}
	for id, parts := range unknown {
		t := topicOf(id)
		for _, p := range parts {
			rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, kerr.UnknownTopicID.Code
			rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
			t.Partitions = append(t.Partitions, rp)
		}
	}
	return resp, nil
}
