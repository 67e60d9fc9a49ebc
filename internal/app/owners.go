package app

// Share-partitions at their partition's owner (docs/cluster.md
// "Share-partitions at their owners"): in partitioned mode the instance
// owning a partition serves every group's share-partition of it — the
// records it hands out, their locks and acknowledgements — as a Kafka
// broker leading a partition does, and a group's coordinator keeps the
// group's membership and config. ShareFetch and ShareAcknowledge are
// therefore served by the instance that receives them, over the share
// sessions it holds; partitions it does not own come back per partition
// with NOT_LEADER_OR_FOLLOWER naming the owner (sharegroup's owner mode).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/cluster"
	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jsstate"
)

// shareOwnerHooks are the share-group manager's owner-mode options for
// this instance (sharegroup.Options.Owner, Coordinates, FollowedConfig)
// and its routing to the groups' coordinators and the partitions' owners
// (Coordinators, Peers: groups.go, grouppeers.go).
func (n *clusterNode) shareOwnerHooks() *sharegroup.Options {
	return &sharegroup.Options{
		Owner:          n.partitionOwnerName,
		Coordinates:    func(group string) bool { return n.part.gates.Serves(cluster.GroupItem(group)) },
		FollowedConfig: func(group string) (sharegroup.GroupConfig, bool) { return n.followedConfig(group, true) },
		Coordinators:   groupCoordinators{n},
		Peers:          grpcGroupPeers{n},
	}
}

// partitionOwnerName names the instance that owns topic's partition, for
// NOT_LEADER_OR_FOLLOWER messages ("" when unknown or this instance).
func (n *clusterNode) partitionOwnerName(topic string, part int32) string {
	n.mu.RLock()
	store, its, self := n.part.store, n.part.items, n.self.ID
	n.mu.RUnlock()
	if store == nil || its == nil {
		return ""
	}
	id, err := store.TopicID(topic)
	if err != nil {
		return ""
	}
	o, ok := its.Owner(cluster.PartitionItem(id, part))
	if !ok || o.Owner.ID == "" || o.Owner.ID == self {
		return ""
	}
	return fmt.Sprintf("instance %s at %s", o.Owner.ID, o.Owner.Addr)
}

// followedConfig is the explicit config of a group coordinated elsewhere,
// from the share bucket's group key: read with every acknowledged write in
// it when exact (a group's first appearance here: a share-partition it
// initialises must see the auto_offset_reset just set), else from the
// bucket's watch, a moment behind (following changes).
func (n *clusterNode) followedConfig(group string, exact bool) (sharegroup.GroupConfig, bool) {
	n.mu.RLock()
	state := n.part.state
	n.mu.RUnlock()
	if state == nil {
		return sharegroup.GroupConfig{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	read := state.LiveGroup
	if exact {
		read = state.ReadGroup
	}
	cfg, _, ok, err := read(ctx, group)
	if err != nil || !ok {
		return sharegroup.GroupConfig{}, false
	}
	return sharegroup.GroupConfig(cfg), true
}

// followConfigs brings the config of every group this instance follows up
// to date with its coordinator's (every lease interval: a config change
// reaches the partitions' owners within about a second).
func (n *clusterNode) followConfigs() {
	n.mu.RLock()
	b := n.part.logB
	n.mu.RUnlock()
	if b == nil {
		return
	}
	for _, id := range b.share.FollowerIDs() {
		if cfg, ok := n.followedConfig(id, false); ok {
			b.share.FollowConfig(id, cfg)
		}
	}
}

// adoptSharePartitions reads the share state of every group on the
// partition (the previous owner's writes, fencing it) and serves it here.
func (n *clusterNode) adoptSharePartitions(ctx context.Context, topicID string, part int32) error {
	n.mu.RLock()
	state, b := n.part.state, n.part.logB
	n.mu.RUnlock()
	if state == nil || b == nil {
		return fmt.Errorf("partition %d of topic ID %s: the share state is not open", part, topicID)
	}
	actx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL/2)
	states, err := state.AdoptPartition(actx, topicID, part)
	cancel()
	if err != nil {
		return fmt.Errorf("partition %d of topic ID %s: read its share state: %w", part, topicID, err)
	}
	if err := b.share.AdoptPartition(topicID, part, states); err != nil {
		_ = state.DropPartition(topicID, part)
		return err
	}
	return nil
}

// releaseSharePartitions stops serving the partition's share-partitions
// and writes what the share state store still holds of them, so the next
// owner reads every acknowledgement confirmed here. A partition whose
// topic was deleted has its share state deleted first.
func (n *clusterNode) releaseSharePartitions(topicID string, part int32, handover bool) {
	n.mu.RLock()
	state, b := n.part.state, n.part.logB
	n.mu.RUnlock()
	if b != nil {
		if handover && n.topicName(context.Background(), topicID) == "" {
			b.share.TopicDeleted(topicID)
		}
		b.share.ReleasePartition(topicID, part, "another instance")
	}
	if state != nil {
		if err := state.DropPartition(topicID, part); err != nil && handover {
			n.s.log.Warn("share state of a partition handed over was not all written; its next owner sees the last state that was",
				"topic_id", topicID, "partition", part, "err", err)
		}
	}
}

// shareFenced gives up at once a partition or group whose share state
// write another instance's write refused (jsstate's OnFenced): it is not
// this instance's any more, or a previous owner's late write created a key
// behind its back. Either way its lease goes, and whoever takes it next —
// this instance again, if the placement says so — adopts it from what the
// bucket holds, as an append refused by the stream's sequence drops its
// partition.
func (n *clusterNode) shareFenced(f jsstate.Fenced) {
	item := cluster.PartitionItem(f.TopicID, f.Partition)
	if f.GroupKey {
		item = cluster.GroupItem(f.Group)
	}
	n.mu.RLock()
	its := n.part.items
	n.mu.RUnlock()
	epoch, owned := n.part.gates.Term(item)
	if its == nil || !owned {
		return
	}
	n.s.log.Warn("a share state write was refused: another instance wrote it; giving the item up to adopt it again", "item", item, "group", f.Group)
	its.Fenced(item, epoch)
}

// ensureGroup gives a group named by a session opening (ShareFetch epoch
// 0) a coordinator and a group key when it has neither, as a single
// server creates the group with the session: taken here if free. Best
// effort — the session opens either way, and a heartbeat creates the
// group at its coordinator too.
func (n *clusterNode) ensureGroup(ctx context.Context, id string) {
	if sharegroup.ValidGroupID(id) != nil {
		return
	}
	item := cluster.GroupItem(id)
	n.mu.RLock()
	its, lease, state, b := n.part.items, n.lease, n.part.state, n.part.logB
	n.mu.RUnlock()
	if its == nil || lease == nil || state == nil || b == nil {
		return
	}
	ids, err := state.LiveGroupIDs(ctx)
	if err != nil || slices.Contains(ids, id) {
		return
	}
	if n.part.gates.Serves(item) {
		b.share.EnsureGroup(id)
		return
	}
	owners, err := lease.LiveOwners(ctx)
	if err != nil {
		return
	}
	if _, ok := owners[item]; ok {
		return // its coordinator writes the group key when it creates the group
	}
	tctx, cancel := context.WithTimeout(ctx, n.s.cfg.Cluster.LeaseTTL/2)
	its.Take(tctx, item)
	cancel()
	if n.part.gates.Serves(item) {
		b.share.EnsureGroup(id)
	}
}

// mdOwnedOnly marks a group's admin call its coordinator sends to the
// other instances (sharegroup.OwnedOnly, grpcGroupPeers): answer for the
// partitions you own. Its value
// is the cluster's instance secret when the cluster uses tokens, so only
// an instance can send it (or the call must come over a connection
// presenting this instance's certificate, with --tls-client-ca).
const mdOwnedOnly = "sharelog-owned-only"

// ownedOnlyCall reports whether the call carries mdOwnedOnly, and refuses
// one that does without coming from an instance of the cluster.
func (n *clusterNode) ownedOnlyCall(ctx context.Context) (bool, error) {
	v := metadata.ValueFromIncomingContext(ctx, mdOwnedOnly)
	if len(v) == 0 {
		return false, nil
	}
	a := n.s.auth
	switch {
	case a.TokensEnabled():
		if a.IsInstanceSecret(v[len(v)-1]) {
			return true, nil
		}
	case a.ClientCerts():
		if edge.PeerIsSelf(ctx, n.s.selfCert) {
			return true, nil
		}
	default:
		return true, nil // no credentials in this cluster: nothing to tell instances from clients
	}
	return false, apierr.New(apierr.ClusterAuthorizationFailed, mdOwnedOnly+" is for calls between the instances of a cluster")
}

// ownedOnlyOutgoing is the outgoing context of a fan-out call: the
// caller's credentials (the other instance authorizes the caller as this
// one did) and mdOwnedOnly.
func (n *clusterNode) ownedOnlyOutgoing(ctx context.Context) context.Context {
	out := n.outgoing(ctx)
	md, _ := metadata.FromOutgoingContext(out)
	md = md.Copy()
	n.mu.RLock()
	proof := n.secret
	n.mu.RUnlock()
	if proof == "" {
		proof = "1"
	}
	md.Set(mdOwnedOnly, proof)
	return metadata.NewOutgoingContext(out, md)
}

// otherMembers lists the live instances but this one.
func (n *clusterNode) otherMembers(ctx context.Context) ([]cluster.Member, error) {
	n.mu.RLock()
	lease, self := n.lease, n.self.ID
	n.mu.RUnlock()
	members, err := lease.LiveMembers(ctx)
	if err != nil {
		return nil, ownerUnreachableErr("cannot read the cluster members from NATS: " + err.Error())
	}
	return slices.DeleteFunc(members, func(mem cluster.Member) bool { return mem.ID == self }), nil
}
