package sharegroup

import (
	"fmt"

	"github.com/sharelog/sharelog/internal/sessioncache"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Groups move between managers when a cluster in partitioned mode spreads
// its share groups over instances (docs/cluster.md "Share groups: one
// coordinator per group"): the instance that takes a group's lease adopts
// the group's durable state, and the one that gives the lease up releases
// the group, which changes nothing durable. Between the two, the share
// state store flushes what the releasing manager wrote (jsstate's
// DropGroup), so the adopting one reads every acknowledgement confirmed
// before.

// AdoptGroup makes rg (a group's durable state, as a scoped share-state
// store recovers it) a live group of this manager. A nil rg (the group has
// no durable state) adopts nothing: calls create the group as usual.
// Share-partitions of topics deleted meanwhile are dropped, and their
// deletion written. The group must not be live here already.
func (m *Manager) AdoptGroup(rg *sharestate.GroupState) error {
	if !m.enter() {
		return ErrClosed
	}
	defer m.leave()
	if rg == nil {
		return nil
	}
	if m.ownerMode() {
		return m.promote(rg)
	}
	if m.groupFor(rg.ID, false) != nil {
		return fmt.Errorf("sharegroup: adopting share group %q, which is live here already", rg.ID)
	}
	g, dropped, err := m.loadGroup(rg, map[string]*logstore.TopicInfo{})
	if err != nil {
		return fmt.Errorf("sharegroup: adopting share group %q: %w", rg.ID, err)
	}
	for _, rp := range dropped {
		_, _ = m.state.Write(sharestate.Entry{Kind: sharestate.KindPartDelete, Group: g.id, Topic: rp.Topic, TopicID: rp.TopicID, Partition: rp.Partition})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groups[g.id] != nil {
		return fmt.Errorf("sharegroup: adopting share group %q, which became live here meanwhile", rg.ID)
	}
	m.groups[g.id] = g
	return nil
}

// ReleaseGroup gives a group up without writing anything: its timers
// stop, its share sessions end (what they held is released in memory
// only: the durable state keeps delivery counts, and the next coordinator
// finds those records available), its member bindings go, and the group
// leaves this manager. The caller must make sure no call of the group is
// running or starts here (the server's per-group gate), then flush the
// share-state store before another manager adopts the group.
func (m *Manager) ReleaseGroup(groupID string) {
	if !m.enter() {
		return
	}
	defer m.leave()
	g := m.lockGroup(groupID, false)
	if g == nil {
		return
	}
	g.stopTimerLocked()
	for id := range g.mem.members {
		m.sessions.UnbindMember(sessioncache.Key{Group: g.id, Member: id})
	}
	if m.ownerMode() {
		m.demoteLocked(g)
		g.op.Unlock()
		return
	}
	g.mu.Lock()
	g.dead = true // no new share-partition
	g.mu.Unlock()
	m.forget(g, lockPartitions(g.partitions()), sessioncache.EndMoved)
	g.op.Unlock()
}

// HasGroup reports whether the group is live here (it has state or
// members in this manager).
func (m *Manager) HasGroup(groupID string) bool { return m.groupFor(groupID, false) != nil }
