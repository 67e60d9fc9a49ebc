package sharegroup

import (
	"fmt"

	"github.com/sharelog/sharelog/internal/logstore"
	"github.com/sharelog/sharelog/internal/sharestate"
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

// ownerOf returns where topic's partition is served: "" here, otherwise a
// description of its owner for error messages.
func (m *Manager) ownerOf(topic string, part int32) string {
	if m.opts.Owner == nil {
		return ""
	}
	return m.opts.Owner(topic, part)
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
func (m *Manager) AdoptPartition(states []sharestate.GroupState) error {
	if !m.enter() {
		return ErrClosed
	}
	defer m.leave()
	infos := map[string]*logstore.TopicInfo{}
	for i := range states {
		rg := &states[i]
		if len(rg.Partitions) != 1 {
			return fmt.Errorf("sharegroup: adopting a partition of share group %q: %d partition states, want 1", rg.ID, len(rg.Partitions))
		}
		g := m.groupFor(rg.ID, true)
		sps, dropped, err := m.loadPartitions(g, rg.Partitions, infos)
		if err != nil {
			return fmt.Errorf("sharegroup: adopting a partition of share group %q: %w", rg.ID, err)
		}
		for _, rp := range dropped {
			_, _ = m.state.Write(sharestate.Entry{Kind: sharestate.KindPartDelete, Group: rg.ID, Topic: rp.Topic, TopicID: rp.TopicID, Partition: rp.Partition})
		}
		for _, sp := range sps {
			k := partKey{sp.topicID, sp.part}
			g.mu.Lock()
			if g.parts[k] != nil || g.deleted || g.dead {
				g.mu.Unlock()
				return fmt.Errorf("sharegroup: adopting %s, which is live here already or whose group is being deleted", sp)
			}
			g.parts[k] = sp
			g.mu.Unlock()
			if sp.dlqCheck {
				m.dlq.add(sp)
			}
		}
	}
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

// droppedResult is the per-partition result of a dropped share-partition:
// moved to another owner, or gone with its topic or group. mu is held.
func (p *sharePartition) droppedResult() (ErrorCode, string) {
	if p.movedTo != "" {
		return CodeNotLeaderOrFollower, notHere(p.movedTo)
	}
	return CodeUnknownTopicOrPartition, "topic was deleted"
}
