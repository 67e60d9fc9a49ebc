package app

// Share groups in partitioned mode (docs/cluster.md "Share groups: one
// coordinator per group"): each share group has a lease item
// (cluster.GroupItem) placed over the live instances like the partitions,
// and its holder — the group's coordinator — serves every
// ShareGroupService call of the group from its own share-group manager
// (the log backend's), over a scoped share-state store that holds only
// the groups it adopted. Other instances forward the calls to it (one
// hop). A group nobody coordinates yet (a new one) is taken by the
// instance that receives its first call. The share-group domain does the
// routing (sharegroup.Coordinators, Peers): groupCoordinators here,
// grpcGroupPeers (grouppeers.go).

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/ownership"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsoffsets"
)

// groupOf is the share group a lease item names, false for other items.
func groupOf(item string) (string, bool) {
	return strings.CutPrefix(item, cluster.GroupItem(""))
}

// placeItems lists every item to place: the partitions of every topic and
// the share groups — those with state in the share bucket, and those this
// instance coordinates that have none yet (created by a call a moment ago).
func (n *clusterNode) placeItems() ([]string, error) {
	items, err := n.partitionItems()
	if err != nil {
		return nil, err
	}
	n.mu.RLock()
	state, b, its := n.part.state, n.part.logB, n.part.items
	n.mu.RUnlock()
	if state == nil || b == nil {
		return items, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.s.cfg.Cluster.LeaseTTL/2)
	defer cancel()
	ids, err := state.LiveGroupIDs(ctx)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		items = append(items, cluster.GroupItem(id))
	}
	n.followConfigs()
	// Consumer groups share the group items (their ids are unique across
	// both kinds): those with committed offsets in the offsets bucket.
	if offs := n.offsetsStore(); offs != nil {
		cids, err := offs.GroupIDs(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range cids {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
				items = append(items, cluster.GroupItem(id))
			}
		}
	}
	for item := range its.Held() {
		if id, ok := groupOf(item); ok && !slices.Contains(ids, id) &&
			(b.share.HasGroup(id) || b.groups != nil && b.groups.Has(id)) {
			items = append(items, item)
		}
	}
	return items, nil
}

// offsetsStore is the consumer groups' offsets store, nil without one.
func (n *clusterNode) offsetsStore() *jsoffsets.Store {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.part.offsets
}

// acquireItem and releaseItem are the lease hooks: partitions and groups.
func (n *clusterNode) acquireItem(ctx context.Context, item string, epoch uint64) error {
	if id, ok := groupOf(item); ok {
		return n.acquireGroup(ctx, item, id, epoch)
	}
	return n.acquirePartition(ctx, item, epoch)
}

func (n *clusterNode) releaseItem(item string, epoch uint64, handover bool) {
	if id, ok := groupOf(item); ok {
		n.releaseGroup(item, id, epoch, handover)
		return
	}
	n.releasePartition(item, epoch, handover)
}

// keepItem is the lease hook that keeps a consumer group with members
// here though the placement moved it: its members are not persisted, and
// at the next coordinator they would find no group (a commit of theirs
// answered GROUP_ID_NOT_FOUND) until they joined again. It moves once
// they have left.
func (n *clusterNode) keepItem(item string) bool {
	id, ok := groupOf(item)
	if !ok {
		return false
	}
	n.mu.RLock()
	b := n.part.logB
	n.mu.RUnlock()
	return b != nil && b.groups != nil && b.groups.HasMembers(id)
}

// acquireGroup adopts the group's durable state, then serves its calls.
func (n *clusterNode) acquireGroup(ctx context.Context, item, id string, epoch uint64) error {
	n.mu.RLock()
	state, b := n.part.state, n.part.logB
	n.mu.RUnlock()
	if state == nil || b == nil {
		return fmt.Errorf("share group %q: the share state is not open", id)
	}
	actx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL/2)
	gs, err := state.AdoptGroup(actx, id)
	cancel()
	if err != nil {
		return fmt.Errorf("share group %q: %w", id, err)
	}
	if err := b.share.AdoptGroup(gs); err != nil {
		_ = state.DropGroup(id)
		return err
	}
	if offs := n.offsetsStore(); offs != nil && b.groups != nil {
		// A consumer group's committed offsets, fenced with this term
		// (jsoffsets' doc.go "Fencing"); its members join again here.
		actx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL/2)
		g, ok, err := offs.Adopt(actx, id, epoch)
		cancel()
		if err != nil {
			b.share.ReleaseGroup(id)
			_ = state.DropGroup(id)
			return fmt.Errorf("consumer group %q: %w", id, err)
		}
		if ok {
			b.groups.AdoptGroup(g)
		}
	}
	if gs == nil && b.share.HasGroup(id) {
		// Created here by a session opening before it had a coordinator
		// (owners.go): its group key is written now.
		defer b.share.EnsureGroup(id)
	}
	n.part.gates.Serve(item, epoch)
	n.s.log.Info("coordinating a share group", "group", id, "epoch", epoch)
	return nil
}

// releaseGroup stops serving the group: calls running on it end (waiting
// fetches return), the manager forgets it, and the share state store
// writes what it still holds of it before the lease goes.
func (n *clusterNode) releaseGroup(item, id string, epoch uint64, handover bool) {
	if !n.part.gates.Stop(item, epoch) { // running calls end first
		return
	}
	n.mu.RLock()
	state, b := n.part.state, n.part.logB
	n.mu.RUnlock()
	if b != nil {
		b.share.ReleaseGroup(id)
		if b.groups != nil {
			// Waiting joins and syncs answer NOT_COORDINATOR; the
			// write running, if any, ends first.
			b.groups.ReleaseGroup(id)
		}
	}
	if offs := n.offsetsStore(); offs != nil {
		offs.Drop(id)
	}
	if state != nil {
		if err := state.DropGroup(id); err != nil && handover {
			n.s.log.Warn("share state of a group handed over was not all written; its coordinator sees the last state that was", "group", id, "err", err)
		}
	}
	n.s.log.Info("no longer coordinating a share group", "group", id, "epoch", epoch, "handover", handover)
}

// groupCoordinators is the sharegroup.Coordinators of this instance: a
// group is coordinated here while its gate is open (its lease held, its
// state adopted), else by the holder of its lease; a group nobody
// coordinates is taken here by a call that may create it.
type groupCoordinators struct{ n *clusterNode }

var _ sharegroup.Coordinators = groupCoordinators{}

func (c groupCoordinators) Coordinator(ctx context.Context, id string, create bool) (sharegroup.Coordinator, error) {
	n := c.n
	item := cluster.GroupItem(id)
	n.mu.RLock()
	its, lease, self, state := n.part.items, n.lease, n.self.ID, n.part.state
	n.mu.RUnlock()
	if its == nil || lease == nil {
		return sharegroup.Coordinator{}, notOwnerErr("this instance has not joined the cluster yet; retry")
	}
	for range 2 {
		if h, ok := n.part.gates.Hold(item); ok {
			return sharegroup.Coordinator{Hold: groupHold{h}}, nil
		}
		owners, err := lease.LiveOwners(ctx)
		if err != nil {
			return sharegroup.Coordinator{}, ownerUnreachableErr("cannot read the share group leases from NATS: " + err.Error())
		}
		if o, ok := owners[item]; ok && o.Owner.ID != self {
			return sharegroup.Coordinator{Peer: o.Owner.Addr}, nil
		}
		// No coordinator. A call that may create the group takes it here;
		// any other is answered here, as for a group that does not exist,
		// when none has state, and waits for the placement when one has.
		if !create {
			if state == nil {
				return sharegroup.Coordinator{}, notOwnerErr("this instance has not opened the share state yet; retry")
			}
			ids, err := state.LiveGroupIDs(ctx)
			if err != nil {
				return sharegroup.Coordinator{}, ownerUnreachableErr("cannot list the share groups in NATS: " + err.Error())
			}
			if !slices.Contains(ids, id) {
				return sharegroup.Coordinator{Hold: noGroupHold{}}, nil
			}
			return sharegroup.Coordinator{}, notOwnerErr(fmt.Sprintf("share group %q has no coordinator at the moment; retry", id))
		}
		tctx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL/2)
		its.Take(tctx, item)
		cancel()
	}
	return sharegroup.Coordinator{}, notOwnerErr(fmt.Sprintf("share group %q is changing coordinator; retry", id))
}

// groupHold is the hold of a group this instance coordinates, on its
// gate: giving the group up ends the term's calls, then waits for them.
type groupHold struct{ h *ownership.Held }

func (g groupHold) Term() context.Context { return g.h.Calls }
func (g groupHold) Release()              { g.h.Release() }

// noGroupHold is the "hold" of a group that exists nowhere: nothing to
// keep, the manager answers for it.
type noGroupHold struct{}

func (noGroupHold) Term() context.Context { return context.Background() }
func (noGroupHold) Release()              {}

// consumerGroupCoordinates is consumergroup.Options.Coordinates in
// partitioned mode: a consumer group is coordinated here while its gate
// is open (its lease held, its offsets adopted); one coordinated
// elsewhere, or being adopted here, is NOT_OWNER (the client's
// NOT_COORDINATOR: it finds the coordinator again). A group nobody
// coordinates is taken here by a call that may create it, or when it has
// committed offsets; any other call is answered here, as for a group that
// does not exist.
func (n *clusterNode) consumerGroupCoordinates(ctx context.Context, id string, create bool) error {
	item := cluster.GroupItem(id)
	n.mu.RLock()
	its, lease, self, offs := n.part.items, n.lease, n.self.ID, n.part.offsets
	n.mu.RUnlock()
	if its == nil || lease == nil || offs == nil {
		return notOwnerErr("this instance has not joined the cluster yet; retry")
	}
	for range 2 {
		if n.part.gates.Serves(item) {
			return nil
		}
		owners, err := lease.LiveOwners(ctx)
		if err != nil {
			return ownerUnreachableErr("cannot read the group leases from NATS: " + err.Error())
		}
		if o, ok := owners[item]; ok {
			if o.Owner.ID != self {
				return notOwnerErr(fmt.Sprintf("consumer group %q is coordinated by instance %s", id, o.Owner.ID))
			}
			return notOwnerErr(fmt.Sprintf("consumer group %q is being adopted by this instance; retry", id))
		}
		if !create {
			ids, err := offs.GroupIDs(ctx)
			if err != nil {
				return ownerUnreachableErr("cannot list the consumer groups in NATS: " + err.Error())
			}
			if !slices.Contains(ids, id) {
				return nil
			}
		}
		tctx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL/2)
		its.Take(tctx, item)
		cancel()
	}
	return notOwnerErr(fmt.Sprintf("consumer group %q is changing coordinator; retry", id))
}

// offsetsFenced: a write of a consumer group's offsets found the group
// written by a newer term (another instance took it over): give the
// lease up, as a fenced share-state write does.
func (n *clusterNode) offsetsFenced(id string) {
	item := cluster.GroupItem(id)
	n.mu.RLock()
	its := n.part.items
	n.mu.RUnlock()
	epoch, owned := n.part.gates.Term(item)
	if its == nil || !owned {
		return
	}
	n.s.log.Warn("a consumer group's offsets write was refused: another instance wrote them; giving the group up", "group", id)
	its.Fenced(item, epoch)
}
