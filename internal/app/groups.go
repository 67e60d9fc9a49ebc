package app

// Share groups in partitioned mode (docs/cluster.md "Share groups: one
// coordinator per group"): each share group has a lease item
// (cluster.GroupItem) placed over the live instances like the partitions,
// and its holder — the group's coordinator — serves every
// ShareGroupService call of the group from its own share-group manager
// (the log backend's), over a scoped share-state store that holds only
// the groups it adopted. Other instances forward the calls to it (one
// hop). A group nobody coordinates yet (a new one) is taken by the
// instance that receives its first call.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/ownership"
	"github.com/sharelog/sharelog/internal/sharegroup"
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
	for item := range its.Held() {
		if id, ok := groupOf(item); ok && !slices.Contains(ids, id) && b.share.HasGroup(id) {
			items = append(items, item)
		}
	}
	return items, nil
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
	}
	if state != nil {
		if err := state.DropGroup(id); err != nil && handover {
			n.s.log.Warn("share state of a group handed over was not all written; its coordinator sees the last state that was", "group", id, "err", err)
		}
	}
	n.s.log.Info("no longer coordinating a share group", "group", id, "epoch", epoch, "handover", handover)
}

// groupCall routes a ShareGroupService call naming a group to the group's
// coordinator: served here when this instance holds the group's lease,
// forwarded when another does, and taken here when none does.
func (n *clusterNode) groupCall(ctx context.Context, fullMethod string, m method, req any, id string) (any, error) {
	if sharegroup.ValidGroupID(id) != nil {
		return n.serveLocal(ctx, m, req) // the service answers the invalid request
	}
	item := cluster.GroupItem(id)
	n.mu.RLock()
	its, lease, self, state := n.part.items, n.lease, n.self.ID, n.part.state
	n.mu.RUnlock()
	if its == nil || lease == nil {
		return nil, notOwnerErr("this instance has not joined the cluster yet; retry")
	}
	for range 2 {
		if h, ok := n.part.gates.Hold(item); ok {
			return n.serveGroup(ctx, fullMethod, m, req, id, h)
		}
		owners, err := lease.LiveOwners(ctx)
		if err != nil {
			return nil, ownerUnreachableErr("cannot read the share group leases from NATS: " + err.Error())
		}
		if o, ok := owners[item]; ok && o.Owner.ID != self {
			if forwardedFrom(ctx) != "" {
				return nil, notOwnerErr(fmt.Sprintf("share group %q is coordinated by %s; retry", id, o.Owner.ID))
			}
			cc, err := n.conn(o.Owner.Addr)
			if err != nil {
				return nil, err
			}
			return n.forwardUnary(ctx, cc, fullMethod, m, req)
		}
		// No coordinator. A call that may create the group takes it here;
		// any other answers as for a group that does not exist when none
		// has state, and waits for the placement when one has.
		if !createsGroup(req) {
			if state == nil {
				return nil, notOwnerErr("this instance has not opened the share state yet; retry")
			}
			ids, err := state.LiveGroupIDs(ctx)
			if err != nil {
				return nil, ownerUnreachableErr("cannot list the share groups in NATS: " + err.Error())
			}
			if !slices.Contains(ids, id) {
				return n.serveLocal(ctx, m, req)
			}
			return nil, notOwnerErr(fmt.Sprintf("share group %q has no coordinator at the moment; retry", id))
		}
		tctx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL/2)
		its.Take(tctx, item)
		cancel()
	}
	return nil, notOwnerErr(fmt.Sprintf("share group %q is changing coordinator; retry", id))
}

// serveGroup runs a call of a group this instance coordinates, holding
// the group's gate (h, taken by the caller) until it returns:
// giving the group up cancels the call (a waiting fetch returns), waits
// for it, and the call answers NOT_OWNER.
func (n *clusterNode) serveGroup(ctx context.Context, fullMethod string, m method, req any, id string, h *ownership.Held) (any, error) {
	defer h.Release()
	calls := h.Calls
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(calls, cancel)
	defer stop()
	b, done, err := n.localBackend()
	if err != nil {
		return nil, err
	}
	defer done()
	serve := func(ctx context.Context, req any) (any, error) {
		return m.unary(implOf(b, m.service), ctx, func(v any) error {
			proto.Merge(v.(proto.Message), req.(proto.Message))
			return nil
		}, nil)
	}
	// The calls about share-partitions ask their owners too (owners.go).
	out, err := n.adminFanOut(ctx, fullMethod, m, req, serve)
	if err != nil && calls.Err() != nil {
		return nil, notOwnerErr(fmt.Sprintf("share group %q moved to another instance during the call; retry", id))
	}
	return out, err
}

// listGroups answers ListShareGroups with the groups of every live
// instance: its own, and each other's (a forwarded call, which that
// instance answers with its own only).
func (n *clusterNode) listGroups(ctx context.Context, fullMethod string, m method, req *sharelogv1.ListShareGroupsRequest) (any, error) {
	local, err := n.serveLocal(ctx, m, req)
	if err != nil || forwardedFrom(ctx) != "" {
		return local, err
	}
	out := local.(*sharelogv1.ListShareGroupsResponse)
	members, err := n.otherMembers(ctx)
	if err != nil {
		return nil, err
	}
	for _, mem := range members {
		cc, err := n.conn(mem.Addr)
		if err != nil {
			return nil, err
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := n.forwardUnary(fctx, cc, fullMethod, m, req)
		cancel()
		if err != nil {
			return nil, err
		}
		out.Groups = append(out.Groups, resp.(*sharelogv1.ListShareGroupsResponse).Groups...)
	}
	slices.SortFunc(out.Groups, func(a, b *sharelogv1.ShareGroupListing) int { return strings.Compare(a.GroupId, b.GroupId) })
	out.Groups = slices.CompactFunc(out.Groups, func(a, b *sharelogv1.ShareGroupListing) bool { return a.GroupId == b.GroupId })
	return out, nil
}

// createsGroup reports whether a call may create its group (as on a
// single server): only those take a group nobody coordinates, so a call
// about a group that does not exist creates no lease. (A session opening,
// ShareFetch at epoch 0, is served where it arrives and takes the group
// through ensureGroup: owners.go.)
func createsGroup(req any) bool {
	switch r := req.(type) {
	case *sharelogv1.ShareGroupHeartbeatRequest:
		return r.GetMemberEpoch() == 0
	case *sharelogv1.UpdateShareGroupConfigRequest, *sharelogv1.AlterShareGroupOffsetsRequest:
		return true
	}
	return false
}

// groupRequest is a ShareGroupService request naming one group.
type groupRequest interface{ GetGroupId() string }
