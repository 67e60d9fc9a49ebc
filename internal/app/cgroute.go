package app

// ConsumerGroupService in partitioned mode (docs/consumer-groups.md
// "Cluster mode"): a call about one group is served by the group's
// coordinator — the holder of its group lease — and forwarded there (one
// hop) from any other instance; ListConsumerGroups merges every live
// instance's groups. A group nobody coordinates is answered here by the
// consumer-group domain, which takes it when it has committed offsets
// (consumerGroupCoordinates, groups.go). In active-standby mode the
// phase-1 routing forwards every call to the active instance (forward.go),
// whose backend serves them.

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/cluster"
)

// consumerGroupCall routes one ConsumerGroupService call (punary).
func (n *clusterNode) consumerGroupCall(ctx context.Context, m method, info *grpc.UnaryServerInfo, req any) (any, error) {
	if forwardedFrom(ctx) != "" { // one hop: answered here
		return n.serveLocal(ctx, m, req)
	}
	if lr, ok := req.(*sharelogv1.ListConsumerGroupsRequest); ok {
		return n.listConsumerGroups(ctx, m, info, lr)
	}
	g, ok := req.(interface{ GetGroup() string })
	if !ok {
		return n.serveLocal(ctx, m, req)
	}
	addr, err := n.consumerGroupPeer(ctx, g.GetGroup())
	if err != nil {
		return nil, err
	}
	if addr == "" {
		return n.serveLocal(ctx, m, req)
	}
	cc, err := n.conn(addr)
	if err != nil {
		return nil, err
	}
	return n.forwardUnary(ctx, cc, info.FullMethod, m, req)
}

// consumerGroupPeer is the address of the instance coordinating group
// when that is another one, "" when the call is answered here: it is
// coordinated here, being adopted here, or by nobody.
func (n *clusterNode) consumerGroupPeer(ctx context.Context, group string) (string, error) {
	item := cluster.GroupItem(group)
	if n.part.gates.Serves(item) {
		return "", nil
	}
	n.mu.RLock()
	lease, self := n.lease, n.self.ID
	n.mu.RUnlock()
	if lease == nil {
		return "", notOwnerErr("this instance has not joined the cluster yet; retry")
	}
	owners, err := lease.LiveOwners(ctx)
	if err != nil {
		return "", ownerUnreachableErr("cannot read the group leases from NATS: " + err.Error())
	}
	if o, ok := owners[item]; ok && o.Owner.ID != self {
		return o.Owner.Addr, nil
	}
	return "", nil
}

// listConsumerGroups is this instance's groups and every other live
// instance's (each lists the groups it coordinates), sorted by id; a
// group listed by two (it moved between the reads) is listed once.
func (n *clusterNode) listConsumerGroups(ctx context.Context, m method, info *grpc.UnaryServerInfo, req *sharelogv1.ListConsumerGroupsRequest) (any, error) {
	local, err := n.serveLocal(ctx, m, req)
	if err != nil {
		return nil, err
	}
	out := local.(*sharelogv1.ListConsumerGroupsResponse)
	others, err := n.otherMembers(ctx)
	if err != nil {
		return nil, err
	}
	for _, mem := range others {
		cc, err := n.conn(mem.Addr)
		if err != nil {
			return nil, err
		}
		resp, err := n.forwardUnary(ctx, cc, info.FullMethod, m, req)
		if err != nil {
			return nil, err
		}
		out.Groups = append(out.Groups, resp.(*sharelogv1.ListConsumerGroupsResponse).GetGroups()...)
	}
	slices.SortStableFunc(out.Groups, func(a, b *sharelogv1.ConsumerGroupListing) int { return strings.Compare(a.GetGroup(), b.GetGroup()) })
	out.Groups = slices.CompactFunc(out.Groups, func(a, b *sharelogv1.ConsumerGroupListing) bool { return a.GetGroup() == b.GetGroup() })
	return out, nil
}
