package sharegroup

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/principal"
	"github.com/sharelog/sharelog/internal/sessioncache"
)

// Membership: ShareGroupHeartbeat, member expiry, group and
// assignment epochs, and the target assignment.
//
// Everything here runs under group.op, which serialises a group's
// heartbeats, expiries and admin calls. A change — a new member, a leave,
// an expiry, a subscription change, a subscribed topic created, deleted or
// grown — increments group_epoch once per call and recomputes the target
// assignment at once (assignment_epoch = group_epoch), initialising
// every share-partition of the new target, under one fsync, before
// any member can see it. A member behind the target takes it and its epoch
// at its next heartbeat.
//
// Topic changes are detected lazily: each heartbeat (and DescribeShareGroup)
// looks up the subscribed topics — cheap, the manager caches topic
// identities until the log store signals a change — and compares them with
// the snapshot taken at the last recomputation. Members learn of their
// assignment only through heartbeats, so nothing is lost by not reacting
// sooner. Member expiry is driven by one timer per group armed at the
// earliest deadline; every call also applies passed deadlines first, so a
// deadline is authoritative even if the timer lags.
//
// Member identity: a member id is bound to the principal (principal.User)
// that first used it, by joining or by opening a share session; the
// binding is kept in the session cache (sessioncache: Ownership) so that
// heartbeats and sessions see one binding, and lasts while the member or
// its session exists. Another principal's heartbeat with that id, at any
// epoch, gets UNKNOWN_MEMBER_ID with the message an absent member gets,
// and changes nothing (no epoch, assignment or expected_epoch is
// revealed).

// membership is a group's members and target assignment (guarded by op).
type membership struct {
	members     map[string]*member
	assignEpoch int32
	// topics is the subscribed topics as looked up at the last
	// recomputation (an absent topic has an empty id).
	topics  map[string]topicMeta
	timer   *time.Timer // expiry, at the earliest member deadline
	timerAt int64       // when the armed timer fires; 0 if not armed
}

// topicMeta is a topic's identity as the assignor sees it.
type topicMeta struct {
	id         string // "" = does not exist
	partitions int32
}

// member is one group member.
type member struct {
	id          string
	epoch, prev int32 // current and previous member epoch
	rackID      string
	clientID    string
	clientHost  string
	subscribed  []string           // sorted, unique
	current     map[string][]int32 // the assignment it holds (at epoch)
	currentIDs  map[string]string  // the IDs of current's topics when assigned
	target      map[string][]int32 // its part of the target (at assignEpoch)
	deadline    int64              // removed when the manager clock passes it
}

// lockGroup returns the group with op held, creating it if asked; nil if
// it does not exist. A group deleted while we waited for op is skipped.
func (m *Manager) lockGroup(id string, create bool) *group {
	for {
		g := m.groupFor(id, create)
		if g == nil {
			return nil
		}
		g.op.Lock()
		if !g.isDeleted() {
			return g
		}
		g.op.Unlock()
	}
}

func (g *group) isDeleted() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deleted
}

func groupNotFound(id string) *apierr.Error {
	return &apierr.Error{Reason: apierr.GroupIDNotFound, Message: fmt.Sprintf("share group %q does not exist", id)}
}

// validateHeartbeat is ShareGroupHeartbeat's request-level validation.
func validateHeartbeat(r *HeartbeatRequest) error {
	if err := validIDs(r.GroupID, r.MemberID); err != nil {
		return err
	}
	if r.MemberEpoch < -1 {
		return invalidRequest("member_epoch %d is invalid", r.MemberEpoch)
	}
	if r.MemberEpoch == 0 && len(r.SubscribedTopicNames) == 0 {
		return invalidRequest("subscribed_topic_names must be set to join (member_epoch 0)")
	}
	return nil
}

// heartbeat is Heartbeat here.
func (m *Manager) heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatResponse, error) {
	if !m.enter() {
		return HeartbeatResponse{}, ErrClosed
	}
	defer m.leave()
	if err := validateHeartbeat(&req); err != nil {
		return HeartbeatResponse{}, err
	}
	subs := slices.Compact(slices.Sorted(slices.Values(req.SubscribedTopicNames)))
	g := m.lockGroup(req.GroupID, req.MemberEpoch == 0)
	if g == nil {
		return HeartbeatResponse{}, groupNotFound(req.GroupID)
	}
	defer g.op.Unlock()
	now := m.now()
	g.expireLocked(ctx, now)

	key := sessioncache.Key{Group: req.GroupID, Member: req.MemberID}
	user := principal.User(ctx)
	if owner, ok := m.sessions.BoundTo(key); ok && owner != user {
		return HeartbeatResponse{}, unknownMember(req.MemberID, g.id)
	}
	mem := g.mem.members[req.MemberID]
	joining := false
	switch {
	case req.MemberEpoch == 0:
		if mem == nil && len(g.mem.members) >= m.opts.GroupMaxSize {
			return HeartbeatResponse{}, &apierr.Error{
				Reason:   apierr.GroupMaxSizeReached,
				Message:  fmt.Sprintf("share group %q has reached its maximum size of %d members", g.id, m.opts.GroupMaxSize),
				Metadata: map[string]string{"max_size": strconv.Itoa(m.opts.GroupMaxSize)},
			}
		}
		joining = mem == nil
	case mem == nil:
		return HeartbeatResponse{}, unknownMember(req.MemberID, g.id)
	case req.MemberEpoch > 0 && req.MemberEpoch != mem.epoch && req.MemberEpoch != mem.prev:
		return HeartbeatResponse{}, &apierr.Error{
			Reason:   apierr.FencedMemberEpoch,
			Message:  fmt.Sprintf("member epoch %d is fenced: the member's epoch is %d", req.MemberEpoch, mem.epoch),
			Metadata: map[string]string{"expected_epoch": strconv.Itoa(int(mem.epoch))},
		}
	}

	// The topics the group subscribes to after this call, looked up
	// before anything changes (a failed lookup changes nothing).
	subscribe := len(subs) > 0 && (mem == nil || !slices.Equal(mem.subscribed, subs))
	names := g.subscribedNames()
	if subscribe {
		for _, t := range subs {
			names[t] = struct{}{}
		}
	}
	metas, err := m.lookupTopics(ctx, names)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	changed := g.topicsChanged(metas)

	cfg := g.config()
	resp := HeartbeatResponse{MemberID: req.MemberID, HeartbeatIntervalMs: cfg.heartbeatMs}
	if req.MemberEpoch == -1 {
		g.removeMember(mem)
		g.bumpLocked(ctx, metas)
		g.armLocked(now)
		resp.MemberEpoch = -1
		return resp, nil
	}
	if joining {
		// Bound here, when nothing has changed yet: a session of another
		// principal may have taken the id since the check above.
		if !m.sessions.BindMember(key, user) {
			return HeartbeatResponse{}, unknownMember(req.MemberID, g.id)
		}
		mem = &member{id: req.MemberID}
		g.mem.members[mem.id] = mem
		g.nMembers.Store(int32(len(g.mem.members)))
		changed = true
	}
	if subscribe {
		mem.subscribed = subs
		changed = true
	}
	if req.RackID != nil {
		mem.rackID = *req.RackID
	}
	mem.clientID, mem.clientHost = req.ClientID, req.ClientHost
	mem.deadline = now + int64(cfg.sessionMs)*int64(time.Millisecond)
	if changed {
		g.bumpLocked(ctx, metas)
	}
	g.armLocked(now)

	usedPrev := req.MemberEpoch > 0 && req.MemberEpoch != mem.epoch
	moved := g.catchUp(mem)
	resp.MemberEpoch = mem.epoch
	if req.MemberEpoch == 0 || moved || len(subs) > 0 || usedPrev {
		a := toAssignment(mem.current, mem.currentIDs)
		resp.Assignment = &a
	}
	return resp, nil
}

// catchUp gives a member behind the target assignment the target and its
// epoch (no revocation phase); it reports whether its assignment changed.
func (g *group) catchUp(mem *member) bool {
	if mem.epoch == g.mem.assignEpoch {
		return false
	}
	mem.prev, mem.epoch = mem.epoch, g.mem.assignEpoch
	ids := make(map[string]string, len(mem.target))
	for t := range mem.target {
		ids[t] = g.mem.topics[t].id
	}
	// A topic re-created with its name is another topic: same names and
	// partitions under a new ID are a new assignment (Kafka members hold
	// theirs by topic ID).
	changed := !equalAssignment(mem.current, mem.target) || !maps.Equal(mem.currentIDs, ids)
	mem.current, mem.currentIDs = mem.target, ids
	return changed
}

func (g *group) removeMember(mem *member) {
	delete(g.mem.members, mem.id)
	g.nMembers.Store(int32(len(g.mem.members)))
	g.m.sessions.UnbindMember(sessioncache.Key{Group: g.id, Member: mem.id})
}

// unknownMember is UNKNOWN_MEMBER_ID, for a member that does not exist and
// for one bound to another principal alike.
func unknownMember(memberID, groupID string) *apierr.Error {
	return &apierr.Error{Reason: apierr.UnknownMemberID,
		Message: fmt.Sprintf("member %q is not in share group %q", memberID, groupID)}
}

// subscribedNames is the set of topics some member subscribes to, plus
// those of the last recomputation (to notice their creation or deletion).
func (g *group) subscribedNames() map[string]struct{} {
	names := make(map[string]struct{}, len(g.mem.topics))
	for t := range g.mem.topics {
		names[t] = struct{}{}
	}
	for _, mem := range g.mem.members {
		for _, t := range mem.subscribed {
			names[t] = struct{}{}
		}
	}
	return names
}

// topicsChanged reports whether a topic of the last recomputation was
// created, deleted (or re-created) or grew since.
func (g *group) topicsChanged(metas map[string]topicMeta) bool {
	for t, old := range g.mem.topics {
		if cur, ok := metas[t]; ok && cur != old {
			return true
		}
	}
	return false
}

// lookupTopics returns the current identity of each named topic.
func (m *Manager) lookupTopics(ctx context.Context, names map[string]struct{}) (map[string]topicMeta, error) {
	out := make(map[string]topicMeta, len(names))
	for t := range names {
		if t == "" || len(t) > maxTopicLen {
			out[t] = topicMeta{}
			continue
		}
		ref, err := m.lookupTopic(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("looking up topic %q: %w", t, err)
		}
		if ref != nil {
			out[t] = topicMeta{id: ref.id, partitions: ref.partitions}
		} else {
			out[t] = topicMeta{}
		}
	}
	return out, nil
}

// refreshLocked applies what happened since the last call: passed member
// deadlines and changes of the subscribed topics.
func (g *group) refreshLocked(ctx context.Context, now int64) error {
	g.expireLocked(ctx, now)
	if len(g.mem.topics) == 0 {
		return nil
	}
	metas, err := g.m.lookupTopics(ctx, g.subscribedNames())
	if err != nil {
		return err
	}
	if g.topicsChanged(metas) {
		g.bumpLocked(ctx, metas)
	}
	return nil
}

// expireLocked removes the members whose deadline has passed (no accepted
// heartbeat within the session timeout) and recomputes the assignment if any was.
func (g *group) expireLocked(ctx context.Context, now int64) {
	var gone []string
	for id, mem := range g.mem.members {
		if mem.deadline <= now {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return
	}
	for _, id := range gone {
		g.removeMember(g.mem.members[id])
	}
	slices.Sort(gone)
	g.m.log.Info("share group members expired", "group", g.id, "members", gone)
	metas, err := g.m.lookupTopics(ctx, g.subscribedNames())
	if err != nil {
		// Assign over the topics as last seen; the next call looks again.
		g.m.log.Warn("looking up subscribed topics after member expiry", "group", g.id, "err", err)
		metas = g.mem.topics
	}
	g.bumpLocked(ctx, metas)
}

// bumpLocked increments group_epoch (written without waiting for the fsync) and
// recomputes the target assignment over metas, which holds every
// subscribed topic.
func (g *group) bumpLocked(ctx context.Context, metas map[string]topicMeta) {
	g.mu.Lock()
	g.epoch++
	_, _ = g.m.state.Write(g.entryLocked())
	epoch := g.epoch
	g.mu.Unlock()
	g.recomputeLocked(ctx, metas)
	g.mem.assignEpoch = epoch
}

// recomputeLocked computes the target assignment with the simple assignor
// (assignor.go) and initialises its share-partitions.
func (g *group) recomputeLocked(ctx context.Context, metas map[string]topicMeta) {
	ids := slices.Sorted(maps.Keys(g.mem.members))
	targets := make(map[string]map[string][]int32, len(ids))
	for _, id := range ids {
		targets[id] = make(map[string][]int32)
	}
	snapshot := make(map[string]topicMeta)
	var initial []TopicPartition
	var initialIDs []string
	if g.homogeneousLocked(ids) {
		// Identical subscriptions: the topics' partitions are pooled
		// and assigned together (assignor.go).
		initial, initialIDs = g.assignPooledLocked(ids, metas, targets, snapshot)
		metas = nil
	}
	for _, t := range slices.Sorted(maps.Keys(metas)) {
		var subscribers []string
		var prev [][]int32
		for _, id := range ids {
			mem := g.mem.members[id]
			if _, ok := slices.BinarySearch(mem.subscribed, t); ok {
				subscribers = append(subscribers, id)
				prev = append(prev, mem.target[t])
			}
		}
		if len(subscribers) == 0 {
			continue // no longer subscribed: not watched any more
		}
		meta := metas[t]
		snapshot[t] = meta
		if meta.id == "" {
			continue
		}
		assigned := make([]bool, meta.partitions)
		for i, parts := range assignTopic(subscribers, meta.partitions, prev) {
			if len(parts) > 0 {
				targets[subscribers[i]][t] = parts
			}
			for _, p := range parts {
				assigned[p] = true
			}
		}
		for p, ok := range assigned {
			if ok {
				initial = append(initial, TopicPartition{Topic: t, Partition: int32(p)})
				initialIDs = append(initialIDs, meta.id)
			}
		}
	}
	for _, id := range ids {
		g.mem.members[id].target = targets[id]
	}
	g.mem.topics = snapshot
	g.initPartitions(ctx, initial, initialIDs)
}

// homogeneousLocked reports whether the members ids (at least two) all
// subscribe to the same topics.
func (g *group) homogeneousLocked(ids []string) bool {
	if len(ids) < 2 {
		return false
	}
	first := g.mem.members[ids[0]].subscribed
	for _, id := range ids[1:] {
		if !slices.Equal(g.mem.members[id].subscribed, first) {
			return false
		}
	}
	return true
}

// assignPooledLocked is the homogeneous case of the simple assignor:
// every member subscribes to the same topics, so their partitions form one
// pool, in (topic name, partition) order, assigned by assignTopic as if
// they were one topic's. It fills targets and snapshot and returns the
// assigned partitions with their topic IDs.
func (g *group) assignPooledLocked(ids []string, metas map[string]topicMeta, targets map[string]map[string][]int32, snapshot map[string]topicMeta) ([]TopicPartition, []string) {
	type poolTP struct {
		topic string
		part  int32
	}
	var pool []poolTP
	index := map[poolTP]int32{}
	for _, t := range g.mem.members[ids[0]].subscribed {
		meta, ok := metas[t]
		if !ok {
			continue
		}
		snapshot[t] = meta
		if meta.id == "" {
			continue
		}
		for p := range meta.partitions {
			index[poolTP{t, p}] = int32(len(pool))
			pool = append(pool, poolTP{t, p})
		}
	}
	prev := make([][]int32, len(ids))
	for i, id := range ids {
		for t, parts := range g.mem.members[id].target {
			for _, p := range parts {
				if k, ok := index[poolTP{t, p}]; ok {
					prev[i] = append(prev[i], k)
				}
			}
		}
	}
	assigned := make([]bool, len(pool))
	for i, ks := range assignTopic(ids, int32(len(pool)), prev) {
		for _, k := range ks {
			tp := pool[k]
			targets[ids[i]][tp.topic] = append(targets[ids[i]][tp.topic], tp.part)
			assigned[k] = true
		}
	}
	var initial []TopicPartition
	var initialIDs []string
	for k, ok := range assigned {
		if ok {
			initial = append(initial, TopicPartition{Topic: pool[k].topic, Partition: pool[k].part})
			initialIDs = append(initialIDs, metas[pool[k].topic].id)
		}
	}
	return initial, initialIDs
}

// initPartitions initialises the uninitialised share-partitions
// among tps (with their topic IDs) before they appear in an assignment:
// all under one durability wait, holding their locks (in topic ID,
// partition order) until it completes so nobody uses an SPSO a crash could
// re-evaluate. A failure is logged and leaves the share-partition
// uninitialised: ShareFetch initialises it, or reports the error, later.
func (g *group) initPartitions(ctx context.Context, tps []TopicPartition, ids []string) {
	m := g.m
	var sps []*sharePartition
	for i, tp := range tps {
		if !m.serving(ids[i], tp.Partition) {
			continue // its owner initialises it, at its first fetch (owners.go)
		}
		if sp := g.partition(ids[i], tp.Topic, tp.Partition, true); sp != nil {
			sps = append(sps, sp)
		}
	}
	sps = lockPartitions(sps)
	defer unlockPartitions(sps)
	var pending []*sharePartition
	var last uint64
	for _, sp := range sps {
		if sp.status != spUninit || sp.offline != "" {
			continue // initialised, or its lost state awaits a repair
		}
		ls, hw, err := m.store.Bounds(sp.topic, sp.part)
		if err != nil {
			continue // deleted meanwhile
		}
		ticket, err := sp.initStart(ctx, ls, hw)
		if err != nil {
			sp.status = spUninit
			m.log.Warn("share-partition initialisation failed", "group", g.id, "partition", sp.String(), "err", err)
			continue
		}
		pending, last = append(pending, sp), ticket
	}
	if last == 0 {
		return
	}
	_ = m.state.Wait(last)
	failed := 0
	var ferr error
	for _, sp := range pending {
		// Each entry may have failed on its own (failures are not sticky).
		if err := m.state.Wait(sp.lastTicket.Load()); err != nil {
			sp.status = spUninit
			failed, ferr = failed+1, err
		}
	}
	if failed > 0 {
		m.log.Warn("share-partition initialisation failed", "group", g.id, "partitions", failed, "err", ferr)
	}
}

// lockPartitions sorts share-partitions in (topic ID, partition) order —
// the only order in which more than one is ever held — drops duplicates,
// locks them and returns them for unlockPartitions.
func lockPartitions(sps []*sharePartition) []*sharePartition {
	slices.SortFunc(sps, func(a, b *sharePartition) int {
		return cmp.Or(cmp.Compare(a.topicID, b.topicID), cmp.Compare(a.part, b.part))
	})
	sps = slices.Compact(sps)
	for _, sp := range sps {
		sp.mu.Lock()
	}
	return sps
}

func unlockPartitions(sps []*sharePartition) {
	for i := len(sps) - 1; i >= 0; i-- {
		sps[i].mu.Unlock()
	}
}

// armLocked makes the expiry timer fire at the earliest member deadline
// (or earlier).
func (g *group) armLocked(now int64) {
	at := int64(never)
	for _, mem := range g.mem.members {
		at = min(at, mem.deadline)
	}
	if at == never {
		g.stopTimerLocked()
		return
	}
	if g.mem.timerAt != 0 && g.mem.timerAt <= at {
		return
	}
	d := time.Duration(at - now)
	if g.mem.timer == nil {
		g.mem.timer = time.AfterFunc(d, g.onExpiryTimer)
	} else {
		g.mem.timer.Reset(d)
	}
	g.mem.timerAt = at
}

func (g *group) stopTimerLocked() {
	if g.mem.timer != nil {
		g.mem.timer.Stop()
	}
	g.mem.timerAt = 0
}

// onExpiryTimer removes the members whose session timed out, so a silent
// member leaves the assignment without anyone calling.
func (g *group) onExpiryTimer() {
	m := g.m
	if !m.enter() {
		return
	}
	defer m.leave()
	g.op.Lock()
	defer g.op.Unlock()
	g.mem.timerAt = 0
	if g.isDeleted() {
		return
	}
	now := m.now()
	g.expireLocked(context.Background(), now)
	g.armLocked(now)
}

// toAssignment renders an assignment (with its topics' IDs): topics
// sorted, partitions ascending.
func toAssignment(a map[string][]int32, ids map[string]string) Assignment {
	out := Assignment{Topics: make([]TopicPartitions, 0, len(a))}
	for _, t := range slices.Sorted(maps.Keys(a)) {
		out.Topics = append(out.Topics, TopicPartitions{Topic: t, TopicID: ids[t], Partitions: slices.Clone(a[t])})
	}
	return out
}

func equalAssignment(a, b map[string][]int32) bool {
	return maps.EqualFunc(a, b, slices.Equal)
}
