package sharegroup

import (
	"context"
	"fmt"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/sessioncache"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Share-partitions at their partition's owner (docs/cluster.md
// "Share-partitions at their owners"): in a cluster in partitioned mode a
// share-partition — the records of one partition as one group consumes
// them — lives on the instance that owns the partition, whichever instance
// coordinates the group. So a manager may hold a group for two reasons: it
// coordinates it (membership, config; Options.Coordinates), or it serves
// some of the group's share-partitions (Options.Owner). A group it does
// not coordinate is a follower here: its config comes from the
// coordinator (Options.FollowedConfig, FollowConfig), and this manager
// writes none of the group's own state, only its share-partitions.
//
// ShareFetch and ShareAcknowledge name partitions; one this manager does
// not serve is answered NOT_LEADER_OR_FOLLOWER with its owner in the
// message, and leaves the request's session, as a Kafka broker answers
// for a partition it does not lead. A partition that moves away while
// sessions hold it (ReleasePartition) is reported so by their next fetch.

// ownerMode reports whether this manager serves only the partitions it
// adopted (Options.Owner set), not every partition.
func (m *Manager) ownerMode() bool { return m.opts.Owner != nil }

// serving reports whether this manager serves the partition's
// share-partitions: always on a single server; in owner mode from
// AdoptPartition until ReleasePartition.
func (m *Manager) serving(topicID string, part int32) bool {
	if !m.ownerMode() {
		return true
	}
	m.servedMu.RLock()
	defer m.servedMu.RUnlock()
	return m.served[partKey{topicID, part}]
}

// away returns "" when this manager serves the partition, otherwise a
// description of the instance that does, for messages.
func (m *Manager) away(topicID, topic string, part int32) string {
	if m.serving(topicID, part) {
		return ""
	}
	if o := m.opts.Owner(topic, part); o != "" {
		return o
	}
	return "another instance (none is known to own it at the moment; retry)"
}

// coordinates reports whether this manager coordinates the group.
func (m *Manager) coordinates(id string) bool {
	return m.opts.Coordinates == nil || m.opts.Coordinates(id)
}

// notHere is the per-partition message of a partition served elsewhere.
func notHere(owner string) string {
	return "this instance does not own the partition; it is served by " + owner
}

// AdoptPartition makes the share-partitions of one partition — states,
// one GroupState per group with this partition's state as its only
// partition, as a partition-scoped share-state store recovers them —
// live in this manager: the instance now owns the partition. A group not
// live here yet is created as a follower (its config from
// Options.FollowedConfig), or as a coordinated group when Coordinates
// says so. A share-partition of a topic deleted meanwhile is dropped and
// its deletion written. None of the share-partitions may be live here
// already.
func (m *Manager) AdoptPartition(topicID string, part int32, states []sharestate.GroupState) error {
	if !m.enter() {
		return ErrClosed
	}
	defer m.leave()
	if !m.ownerMode() {
		return fmt.Errorf("sharegroup: AdoptPartition needs Options.Owner")
	}
	k := partKey{topicID, part}
	m.servedMu.Lock()
	if m.served[k] {
		m.servedMu.Unlock()
		return fmt.Errorf("sharegroup: adopting partition %d of topic ID %s, which is served here already", part, topicID)
	}
	m.servedMu.Unlock()
	infos := map[string]*logstore.TopicInfo{}
	var added, stale []*sharePartition
	undo := func() {
		// A failed adoption leaves nothing behind: the partition can be
		// adopted again.
		for _, sp := range added {
			sp.g.mu.Lock()
			if sp.g.parts[k] == sp {
				delete(sp.g.parts, k)
			}
			sp.g.mu.Unlock()
			sp.mu.Lock()
			sp.dropLocked()
			sp.mu.Unlock()
		}
	}
	for i := range states {
		rg := &states[i]
		if len(rg.Partitions) != 1 || rg.Partitions[0].TopicID != topicID || rg.Partitions[0].Partition != part {
			undo()
			return fmt.Errorf("sharegroup: adopting partition %d of topic ID %s: share group %q's state is not of exactly that partition", part, topicID, rg.ID)
		}
		g := m.groupFor(rg.ID, true)
		sps, dropped, err := m.loadPartitions(g, rg.Partitions, infos)
		if err != nil {
			undo()
			return fmt.Errorf("sharegroup: adopting a partition of share group %q: %w", rg.ID, err)
		}
		for _, rp := range dropped {
			_, _ = m.state.Write(sharestate.Entry{Kind: sharestate.KindPartDelete, Group: rg.ID, Topic: rp.Topic, TopicID: rp.TopicID, Partition: rp.Partition})
		}
		for _, sp := range sps {
			g.mu.Lock()
			if g.deleted || g.dead {
				g.mu.Unlock()
				undo()
				return fmt.Errorf("sharegroup: adopting %s, whose group is being deleted here; retry", sp)
			}
			if old := g.parts[k]; old != nil {
				// Not served, so not in use: what an earlier release or
				// failed adoption left.
				stale = append(stale, old)
			}
			g.parts[k] = sp
			g.mu.Unlock()
			added = append(added, sp)
		}
	}
	for _, sp := range stale {
		sp.mu.Lock()
		sp.dropLocked()
		sp.mu.Unlock()
	}
	for _, sp := range added {
		if sp.dlqCheck {
			m.dlq.add(sp)
		}
	}
	// Served from now on: a fetch may create the share-partition of a
	// group that had none.
	m.servedMu.Lock()
	m.served[k] = true
	m.servedMu.Unlock()
	return nil
}

// ReleasePartition gives up every group's share-partition of one
// partition without writing anything: the instance no longer owns it.
// Records ACQUIRED in it are released in memory only (the durable state
// keeps their delivery counts; the next owner finds them AVAILABLE);
// fetches waiting on it return, and the sessions holding it report
// NOT_LEADER_OR_FOLLOWER naming owner at their next fetch. The caller
// then flushes the share-state store before another instance adopts the
// partition.
func (m *Manager) ReleasePartition(topicID string, part int32, owner string) {
	if !m.enter() {
		return
	}
	defer m.leave()
	k := partKey{topicID, part}
	// Not served first: a share-partition created after this by a call
	// that found the partition served is in its group when the loop
	// below looks (partition checks under the group's mu).
	m.servedMu.Lock()
	delete(m.served, k)
	m.servedMu.Unlock()
	for _, g := range m.groupList() {
		g.mu.Lock()
		sp := g.parts[k]
		delete(g.parts, k)
		g.mu.Unlock()
		if sp == nil {
			continue
		}
		sp.mu.Lock()
		sp.movedTo = owner
		sp.dropLocked()
		sp.mu.Unlock()
	}
}

// FollowConfig sets the config of a group this manager follows (it does
// not coordinate it) to the coordinator's explicit fields c, without
// writing anything. Nothing happens for a group not live here or
// coordinated here.
func (m *Manager) FollowConfig(groupID string, c GroupConfig) {
	if !m.enter() {
		return
	}
	defer m.leave()
	if m.coordinates(groupID) {
		return
	}
	g := m.groupFor(groupID, false)
	if g == nil {
		return
	}
	g.mu.Lock()
	g.explicit = mergeConfig(GroupConfig{}, c)
	g.cfg.Store(m.opts.effective(&g.explicit))
	parts := make([]*sharePartition, 0, len(g.parts))
	for _, sp := range g.parts {
		parts = append(parts, sp)
	}
	g.mu.Unlock()
	for _, sp := range parts {
		sp.signal()
	}
}

// follow sets a new follower group's config from Options.FollowedConfig.
func (m *Manager) follow(g *group) {
	if m.opts.FollowedConfig == nil {
		return
	}
	if c, ok := m.opts.FollowedConfig(g.id); ok {
		g.explicit = mergeConfig(GroupConfig{}, c)
		g.cfg.Store(m.opts.effective(&g.explicit))
	}
}

// movedAway reports whether p was dropped because its partition moved to
// another owner (ReleasePartition), with the result a session holding it
// reports.
func (p *sharePartition) movedAway() (apierr.Reason, string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != spDropped || p.movedTo == "" {
		return apierr.None, "", false
	}
	code, msg := p.droppedResult()
	return code, msg, true
}

// droppedResult is the per-partition result of a dropped share-partition:
// moved to another owner, or gone with its topic or group. mu is held.
func (p *sharePartition) droppedResult() (apierr.Reason, string) {
	if p.movedTo != "" {
		if o := p.g.m.opts.Owner(p.topic, p.part); o != "" {
			return apierr.NotOwner, notHere(o)
		}
		return apierr.NotOwner, notHere(p.movedTo)
	}
	return apierr.UnknownTopicOrPartition, "topic was deleted"
}

// promote makes rg's group (its config and epoch: in owner mode a
// coordinator's adoption reads no share-partition) coordinated here: the
// follower group live here, if any, takes them; otherwise the group is
// created from them. Its membership starts empty, as after a restart.
func (m *Manager) promote(rg *sharestate.GroupState) error {
	if len(rg.Partitions) > 0 {
		return fmt.Errorf("sharegroup: adopting share group %q with share-partitions: in owner mode their owners adopt them", rg.ID)
	}
	g := m.lockGroup(rg.ID, true)
	defer g.op.Unlock()
	g.mu.Lock()
	g.explicit, g.epoch = GroupConfig(rg.Config), rg.GroupEpoch
	g.cfg.Store(m.opts.effective(&g.explicit))
	g.mu.Unlock()
	g.mem.assignEpoch = rg.GroupEpoch
	return nil
}

// demoteLocked makes a group this manager stops coordinating a follower
// (op held): its members go (their bindings are gone already; they join
// the next coordinator), its share-partitions and sessions stay — they
// belong to the partitions' owner, not to the coordinator.
func (m *Manager) demoteLocked(g *group) {
	clear(g.mem.members)
	g.mem.topics = nil
	g.nMembers.Store(0)
	m.follow(g)
}

// FollowerIDs lists the groups live here that this manager does not
// coordinate (their config is followed: FollowConfig).
func (m *Manager) FollowerIDs() []string {
	var ids []string
	for _, g := range m.groupList() {
		if !m.coordinates(g.id) {
			ids = append(ids, g.id)
		}
	}
	return ids
}

// EnsureGroup makes sure the group exists with its own entry written,
// when this manager coordinates it: a group a ShareFetch created on the
// partitions' owners has no group entry until its coordinator writes one.
func (m *Manager) EnsureGroup(groupID string) {
	if !m.enter() {
		return
	}
	defer m.leave()
	if !m.coordinates(groupID) || validGroupID(groupID) != nil {
		return
	}
	g := m.lockGroup(groupID, true)
	defer g.op.Unlock()
	g.mu.Lock()
	_, _ = m.state.Write(g.entryLocked())
	g.mu.Unlock()
}

// Admin calls in owner mode (docs/cluster.md "Share-partitions at their
// owners"): the group's coordinator answers DescribeShareGroupOffsets,
// DescribeSharePartitionState, AlterShareGroupOffsets,
// DeleteShareGroupOffsets and DeleteShareGroup for the partitions it owns
// and asks every other instance for theirs (Peers, route.go); each answers
// NOT_LEADER_OR_FOLLOWER for the partitions it does not own, so the
// coordinator merges the answers partition by partition. The other
// instances' calls are owned-only (OwnedOnly): the group need not be live
// there, and DeleteShareGroup only drops the share-partitions served
// there. The coordinator makes them after its own checks — the group
// exists and has no members — holding the group's lock, so no member
// joins in between.

type ownedOnlyKey struct{}

// OwnedOnly marks ctx for an admin call a coordinator sends to the other
// instances: answer for the partitions this manager serves. The
// transports set it only on a call that proves it comes from an instance.
func OwnedOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, ownedOnlyKey{}, true)
}

// IsOwnedOnly reports whether ctx is marked OwnedOnly: for Peers, which
// then ask the peer's owned-only answer.
func IsOwnedOnly(ctx context.Context) bool { return isOwnedOnly(ctx) }

func isOwnedOnly(ctx context.Context) bool {
	v, _ := ctx.Value(ownedOnlyKey{}).(bool)
	return v
}

// ask runs askOwners, if set, with ctx.
func ask(ctx context.Context, askOwners func(context.Context) error) error {
	if askOwners == nil {
		return nil
	}
	return askOwners(ctx)
}

// adminGroup is the group of an admin call with op held: GROUP_ID_NOT_FOUND
// when it does not exist, except in an owned-only call, which answers for
// a group not live here as for one with no state (a scratch group, never
// registered).
func (m *Manager) adminGroup(ctx context.Context, groupID string) (*group, error) {
	if g := m.lockGroup(groupID, false); g != nil {
		return g, nil
	}
	if !isOwnedOnly(ctx) {
		return nil, groupNotFound(groupID)
	}
	g := &group{m: m, id: groupID, parts: make(map[partKey]*sharePartition), deleted: true}
	g.mem.members = make(map[string]*member)
	g.cfg.Store(m.opts.effective(&g.explicit))
	g.op.Lock()
	return g, nil
}

// dropOwned is DeleteGroup in an owned-only call: the group's
// share-partitions served here are deleted (durably) and the group leaves
// this manager, ending its sessions here; its own state is the
// coordinator's to delete.
func (m *Manager) dropOwned(groupID string) error {
	g := m.lockGroup(groupID, false)
	if g == nil {
		return nil
	}
	defer g.op.Unlock()
	if m.coordinates(groupID) {
		return fmt.Errorf("sharegroup: an owned-only delete of share group %q, which this instance coordinates", groupID)
	}
	g.mu.Lock()
	g.dead = true
	g.mu.Unlock()
	sps := lockPartitions(g.partitions())
	var last uint64
	var err error
	for _, sp := range sps {
		if err == nil && (sp.status == spLive || sp.offline != "") {
			last, err = sp.note(m.state.Write(sp.entry(sharestate.KindPartDelete)))
		}
	}
	if err == nil && last > 0 {
		_ = m.state.Wait(last)
		for _, sp := range sps {
			if t := sp.lastTicket.Load(); t != 0 && m.state.Lost(t) {
				err = m.state.Wait(t)
			}
		}
	}
	if err != nil {
		unlockPartitions(sps)
		g.mu.Lock()
		g.dead = false
		g.mu.Unlock()
		return storageError("share group %q: deletion of its share state here not saved: %v", groupID, err)
	}
	m.forget(g, sps, sessioncache.EndGroupDeleted)
	return nil
}
