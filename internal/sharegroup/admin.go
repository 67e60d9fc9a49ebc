package sharegroup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/sessioncache"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Admin RPCs. Each runs under the group's op lock, so it is ordered
// with the group's heartbeats and other admin calls, and first applies
// passed member deadlines (an expired member does not make a group
// non-empty). Offsets writes (alter, delete) and group deletion hold the
// locks of the share-partitions they change until their share-state entries
// are durable: nobody sees an effect that may still fail, and on failure
// nothing changes.

func nonEmpty(g *group) *apierr.Error {
	n := len(g.mem.members)
	return &apierr.Error{
		Reason:   apierr.NonEmptyGroup,
		Message:  fmt.Sprintf("share group %q has %d active member(s); stop its consumers first", g.id, n),
		Metadata: map[string]string{"members": strconv.Itoa(n)},
	}
}

// state is the group's state for ListGroups and DescribeGroup.
func (g *group) state() GroupState {
	g.mu.Lock()
	dead := g.dead
	g.mu.Unlock()
	switch {
	case dead:
		return StateDead
	case g.nMembers.Load() > 0:
		return StateStable
	}
	return StateEmpty
}

// listGroups is ListGroups of this instance's groups: those it
// coordinates, sorted by ID.
func (m *Manager) listGroups(filter GroupState) ([]GroupListing, error) {
	if !m.enter() {
		return nil, ErrClosed
	}
	defer m.leave()
	var out []GroupListing
	for _, g := range m.groupList() {
		if !m.coordinates(g.id) {
			continue // a follower here (owners.go): its coordinator lists it
		}
		st := g.state()
		if filter == StateUnknown || filter == st {
			out = append(out, GroupListing{GroupID: g.id, State: st})
		}
	}
	return out, nil
}

// describeGroup is DescribeGroup here.
func (m *Manager) describeGroup(ctx context.Context, groupID string) (GroupDescription, error) {
	if !m.enter() {
		return GroupDescription{}, ErrClosed
	}
	defer m.leave()
	g := m.lockGroup(groupID, false)
	if g == nil {
		return GroupDescription{}, groupNotFound(groupID)
	}
	defer g.op.Unlock()
	if err := g.refreshLocked(ctx, m.now()); err != nil {
		return GroupDescription{}, err
	}
	g.mu.Lock()
	epoch := g.epoch
	g.mu.Unlock()
	d := GroupDescription{
		GroupID:         g.id,
		State:           g.state(),
		GroupEpoch:      epoch,
		AssignmentEpoch: g.mem.assignEpoch,
		Config:          g.config().public(),
		Members:         make([]MemberDescription, 0, len(g.mem.members)),

		DeadLetteredRecords:      g.dlqCopied.Load(),
		DeadLetterSkippedRecords: g.dlqSkipped.Load(),
	}
	for _, mem := range g.mem.members {
		d.Members = append(d.Members, MemberDescription{
			MemberID:             mem.id,
			MemberEpoch:          mem.epoch,
			RackID:               mem.rackID,
			ClientID:             mem.clientID,
			ClientHost:           mem.clientHost,
			SubscribedTopicNames: slices.Clone(mem.subscribed),
			Assignment:           toAssignment(mem.current, mem.currentIDs),
		})
	}
	slices.SortFunc(d.Members, func(a, b MemberDescription) int { return cmp.Compare(a.MemberID, b.MemberID) })
	return d, nil
}

// describeOffsets is DescribeOffsets of the share-partitions served here
// (NOT_LEADER_OR_FOLLOWER for the others).
func (m *Manager) describeOffsets(ctx context.Context, groupID string, topics []TopicPartitions) ([]TopicOffsets, error) {
	if !m.enter() {
		return nil, ErrClosed
	}
	defer m.leave()
	g, err := m.adminGroup(ctx, groupID)
	if err != nil {
		return nil, err
	}
	defer g.op.Unlock()
	if len(topics) == 0 {
		names, err := m.topicsWithState(ctx, g)
		if err != nil {
			return nil, err
		}
		for _, t := range names {
			topics = append(topics, TopicPartitions{Topic: t})
		}
	}
	unknown := func(p int32, msg string) PartitionOffsets {
		return PartitionOffsets{Partition: p, StartOffset: -1, Lag: -1, ErrorCode: apierr.UnknownTopicOrPartition, ErrorMessage: msg}
	}
	out := make([]TopicOffsets, 0, len(topics))
	for _, t := range topics {
		to := TopicOffsets{Topic: t.Topic}
		ref, err := m.topicRef(ctx, t.Topic)
		if err != nil {
			return nil, err
		}
		if ref == nil {
			parts := t.Partitions
			if len(parts) == 0 {
				parts = []int32{-1} // the topic as a whole
			}
			for _, p := range parts {
				to.Partitions = append(to.Partitions, unknown(p, "topic does not exist"))
			}
			out = append(out, to)
			continue
		}
		parts := t.Partitions
		if len(parts) == 0 {
			parts = make([]int32, ref.partitions)
			for i := range parts {
				parts[i] = int32(i)
			}
		}
		for _, p := range parts {
			if p < 0 || p >= ref.partitions {
				to.Partitions = append(to.Partitions, unknown(p, fmt.Sprintf("topic %q has no partition %d", t.Topic, p)))
				continue
			}
			po := PartitionOffsets{Partition: p, StartOffset: -1, Lag: -1}
			if o := m.away(ref.id, t.Topic, p); o != "" {
				po.ErrorCode, po.ErrorMessage = apierr.NotOwner, notHere(o)
			} else if sp := g.partition(ref.id, t.Topic, p, false); sp != nil {
				po.StartOffset, po.Lag, po.ErrorCode, po.ErrorMessage = sp.offsets()
			}
			to.Partitions = append(to.Partitions, po)
		}
		out = append(out, to)
	}
	return out, nil
}

// topicRef is lookupTopic for a name that may be invalid (then: nil).
func (m *Manager) topicRef(ctx context.Context, name string) (*topicRef, error) {
	if name == "" || len(name) > maxTopicLen {
		return nil, nil
	}
	return m.lookupTopic(ctx, name)
}

// topicsWithState returns the names of the existing topics on which the
// group has initialised share-partitions, sorted.
func (m *Manager) topicsWithState(ctx context.Context, g *group) ([]string, error) {
	type named struct{ topic, id string }
	seen := map[named]bool{}
	for _, sp := range g.partitions() {
		sp.mu.Lock()
		if sp.status == spLive || sp.offline != "" {
			seen[named{sp.topic, sp.topicID}] = true
		}
		sp.mu.Unlock()
	}
	var names []string
	for n := range seen {
		ref, err := m.topicRef(ctx, n.topic)
		if err != nil {
			return nil, err
		}
		if ref != nil && ref.id == n.id {
			names = append(names, n.topic)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// partitions snapshots the group's share-partitions.
func (g *group) partitions() []*sharePartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*sharePartition, 0, len(g.parts))
	for _, sp := range g.parts {
		out = append(out, sp)
	}
	return out
}

// offsets returns SPSO and lag: high watermark - SPSO - the terminal
// offsets at or above SPSO; -1 and -1 when uninitialised.
func (p *sharePartition) offsets() (spso, lag int64, code apierr.Reason, msg string) {
	m := p.g.m
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.offline != "" {
		return -1, -1, apierr.KafkaStorageError, p.offline
	}
	if p.status != spLive {
		return -1, -1, apierr.None, ""
	}
	ls, hw, err := m.store.Bounds(p.topic, p.part)
	if err != nil {
		code, msg = storeCode(err)
		return -1, -1, code, msg
	}
	p.prepare(ls, m.now())
	var terminal int64
	for i := range p.runs {
		if r := &p.runs[i]; r.state.terminal() {
			terminal += r.last - r.first + 1
		}
	}
	return p.spso, max(hw-p.spso-terminal, 0), apierr.None, ""
}

// spSaved is a share-partition's state before an offsets reset, to undo
// it when its write fails.
type spSaved struct {
	status       uint8
	spso, speo   int64
	runs, below  []run
	nextDeadline int64
}

func (p *sharePartition) save() spSaved {
	return spSaved{p.status, p.spso, p.speo, p.runs, p.below, p.nextDeadline}
}

func (p *sharePartition) restore(s spSaved) {
	p.status, p.spso, p.speo, p.runs, p.below, p.nextDeadline = s.status, s.spso, s.speo, s.runs, s.below, s.nextDeadline
}

// alterOffsets is AlterOffsets of the share-partitions served here; when
// askOwners is set it runs after the checks passed and before anything
// changes here, with the group's lock held (so no member joins in
// between), and its error fails the call.
func (m *Manager) alterOffsets(ctx context.Context, groupID string, topics []TopicStartOffsets, askOwners func(context.Context) error) ([]TopicPartitionResults, error) {
	if !m.enter() {
		return nil, ErrClosed
	}
	defer m.leave()
	if err := validGroupID(groupID); err != nil {
		return nil, err
	}
	if dup := duplicateAlter(topics); dup != nil {
		return nil, invalidRequest("%s/%d appears twice", dup.Topic, dup.Partition)
	}
	g := m.lockGroup(groupID, true)
	defer g.op.Unlock()
	g.expireLocked(ctx, m.now())
	if len(g.mem.members) > 0 {
		return nil, nonEmpty(g)
	}
	if err := ask(ctx, askOwners); err != nil {
		return nil, err
	}

	type job struct {
		res   *PartitionResult
		sp    *sharePartition
		start int64
		saved spSaved
		done  bool
	}
	out := make([]TopicPartitionResults, len(topics))
	var jobs []*job
	for i, t := range topics {
		out[i] = TopicPartitionResults{Topic: t.Topic, Partitions: make([]PartitionResult, len(t.Partitions))}
		ref, err := m.topicRef(ctx, t.Topic)
		if err != nil {
			return nil, err
		}
		for j, p := range t.Partitions {
			r := &out[i].Partitions[j]
			r.Partition = p.Partition
			if ref == nil || p.Partition < 0 || p.Partition >= ref.partitions {
				r.ErrorCode, r.ErrorMessage = apierr.UnknownTopicOrPartition, fmt.Sprintf("topic %q has no partition %d", t.Topic, p.Partition)
				continue
			}
			sp := g.partition(ref.id, t.Topic, p.Partition, true)
			if sp == nil { // served by another instance (owners.go)
				r.ErrorCode, r.ErrorMessage = apierr.NotOwner, notHere(m.away(ref.id, t.Topic, p.Partition))
				continue
			}
			jobs = append(jobs, &job{res: r, sp: sp, start: p.StartOffset})
		}
	}
	sps := make([]*sharePartition, len(jobs))
	for i, j := range jobs {
		sps[i] = j.sp
	}
	sps = lockPartitions(sps)
	defer unlockPartitions(sps)
	var last uint64
	for _, j := range jobs {
		sp := j.sp
		ls, hw, err := m.store.Bounds(sp.topic, sp.part)
		if err == nil && sp.status == spDropped {
			err = logstore.ErrUnknownTopic // deleted meanwhile
		}
		if err != nil {
			j.res.ErrorCode, j.res.ErrorMessage = storeCode(err)
			continue
		}
		if sp.offline != "" {
			j.res.ErrorCode, j.res.ErrorMessage = apierr.KafkaStorageError, sp.offline
			continue
		}
		if j.start < ls || j.start > hw {
			j.res.ErrorCode = apierr.OffsetOutOfRange
			j.res.ErrorMessage = fmt.Sprintf("start offset %d is outside [%d, %d] (log start offset, high watermark)", j.start, ls, hw)
			continue
		}
		j.saved = sp.save()
		sp.status, sp.spso, sp.speo, sp.runs, sp.below = spLive, j.start, j.start-1, nil, nil
		sp.nextDeadline, sp.logStart = never, max(sp.logStart, ls)
		ticket, err := sp.writeFull()
		if err != nil {
			sp.restore(j.saved)
			j.res.ErrorCode, j.res.ErrorMessage = apierr.KafkaStorageError, storageErrMsg(err)
			continue
		}
		j.done, last = true, ticket
	}
	if last > 0 {
		_ = m.state.Wait(last)
	}
	for _, j := range jobs {
		if !j.done {
			continue
		}
		// Each entry may have failed on its own (failures are not sticky).
		if werr := m.state.Wait(j.sp.lastTicket.Load()); werr != nil {
			j.sp.restore(j.saved)
			j.res.ErrorCode, j.res.ErrorMessage = apierr.KafkaStorageError, storageErrMsg(werr)
			continue
		}
		j.sp.signal() // waiting fetches continue from the new start
	}
	return out, nil
}

func duplicateAlter(topics []TopicStartOffsets) *TopicPartition {
	var all []TopicPartition
	for _, t := range topics {
		for _, p := range t.Partitions {
			all = append(all, TopicPartition{Topic: t.Topic, Partition: p.Partition})
		}
	}
	return duplicate(len(all), func(i int) TopicPartition { return all[i] })
}

// deleteOffsets is DeleteOffsets of the share-partitions served here;
// askOwners as in alterOffsets.
func (m *Manager) deleteOffsets(ctx context.Context, groupID string, topics []string, askOwners func(context.Context) error) ([]TopicResult, error) {
	if !m.enter() {
		return nil, ErrClosed
	}
	defer m.leave()
	seen := make(map[string]bool, len(topics))
	for _, t := range topics {
		if seen[t] {
			return nil, invalidRequest("topic %q appears twice", t)
		}
		seen[t] = true
	}
	g, err := m.adminGroup(ctx, groupID)
	if err != nil {
		return nil, err
	}
	defer g.op.Unlock()
	g.expireLocked(ctx, m.now())
	if len(g.mem.members) > 0 {
		return nil, nonEmpty(g)
	}
	if err := ask(ctx, askOwners); err != nil {
		return nil, err
	}

	out := make([]TopicResult, len(topics))
	byTopic := make([][]*sharePartition, len(topics))
	var all []*sharePartition
	for i, t := range topics {
		out[i].Topic = t
		ref, err := m.topicRef(ctx, t)
		if err != nil {
			return nil, err
		}
		if ref == nil {
			continue
		}
		for _, sp := range g.partitions() {
			if sp.topicID == ref.id {
				byTopic[i] = append(byTopic[i], sp)
			}
		}
		all = append(all, byTopic[i]...)
	}
	all = lockPartitions(all)
	defer unlockPartitions(all)
	var last uint64
	var werr error
	for i := range topics {
		live := byTopic[i][:0]
		offline := ""
		for _, sp := range byTopic[i] {
			if sp.offline != "" {
				offline = sp.offline
			}
			if sp.status == spLive {
				live = append(live, sp)
			}
		}
		if offline != "" {
			byTopic[i] = nil
			out[i].ErrorCode, out[i].ErrorMessage = apierr.KafkaStorageError, offline
			continue
		}
		byTopic[i] = live
		if len(live) == 0 {
			out[i].ErrorCode, out[i].ErrorMessage = apierr.UnknownTopicOrPartition, "there is no offset information to delete for this topic"
			continue
		}
		for _, sp := range live {
			if werr != nil {
				break
			}
			e := sp.entry(sharestate.KindPartDelete)
			last, werr = sp.note(m.state.Write(e))
		}
	}
	if werr == nil && last > 0 {
		// The last entry settles all; any failure among them fails the
		// topic's result (entries are not sticky-failed any more).
		_ = m.state.Wait(last)
		for i := range topics {
			for _, sp := range byTopic[i] {
				if err := m.state.Wait(sp.lastTicket.Load()); err != nil {
					werr = err
				}
			}
		}
	}
	for i := range topics {
		if len(byTopic[i]) == 0 {
			continue
		}
		if werr != nil {
			out[i].ErrorCode, out[i].ErrorMessage = apierr.KafkaStorageError, "share state write failed"
			continue
		}
		for _, sp := range byTopic[i] {
			sp.resetUninit()
		}
	}
	return out, nil
}

// resetUninit makes the share-partition uninitialised: its next use
// initialises it from auto_offset_reset. mu is held.
func (p *sharePartition) resetUninit() {
	p.status, p.spso, p.speo, p.runs, p.below = spUninit, 0, -1, nil, nil
	p.nextDeadline = never
	p.signal()
}

// deleteGroup is DeleteGroup here (an owned-only call: of the
// share-partitions served here only); askOwners as in alterOffsets.
func (m *Manager) deleteGroup(ctx context.Context, groupID string, askOwners func(context.Context) error) error {
	if !m.enter() {
		return ErrClosed
	}
	defer m.leave()
	if isOwnedOnly(ctx) {
		return m.dropOwned(groupID)
	}
	g := m.lockGroup(groupID, false)
	if g == nil {
		return groupNotFound(groupID)
	}
	defer g.op.Unlock()
	g.expireLocked(ctx, m.now())
	if len(g.mem.members) > 0 {
		return nonEmpty(g)
	}
	if err := ask(ctx, askOwners); err != nil {
		return err
	}
	// DEAD: no share-partition is created from now on, so every entry of
	// the group either precedes the delete entry or is never written.
	g.mu.Lock()
	g.dead = true
	g.mu.Unlock()
	sps := lockPartitions(g.partitions())
	ticket, err := m.state.Write(sharestate.Entry{Kind: sharestate.KindGroupDelete, Group: g.id})
	if err == nil {
		err = m.state.Wait(ticket)
	}
	if err != nil {
		unlockPartitions(sps)
		g.mu.Lock()
		g.dead = false
		g.mu.Unlock()
		return storageError("share group %q: deletion not saved: %v", groupID, err)
	}
	g.stopTimerLocked()
	m.forget(g, sps, sessioncache.EndGroupDeleted)
	return nil
}

// forget removes a DEAD group (op held) from the manager: its
// share-partitions sps (locked by the caller, unlocked here) are dropped,
// waking their fetches, and its sessions end with why.
func (m *Manager) forget(g *group, sps []*sharePartition, why sessioncache.EndReason) {
	for _, sp := range sps {
		sp.dropLocked()
	}
	unlockPartitions(sps)
	m.mu.Lock()
	g.mu.Lock()
	g.deleted = true
	g.mu.Unlock()
	if m.groups[g.id] == g {
		delete(m.groups, g.id)
	}
	m.mu.Unlock()
	m.sessions.EndIfSession(func(s *session) bool { return s.State.g == g }, why)
}
