package kafkawire

// The listener in cluster mode (docs/kafka.md "Cluster mode"): every
// instance with a Kafka listener is a broker; each partition is led by
// the instance that serves it (its owner in partitioned mode, the active
// instance in active-standby mode) and a request for a partition led
// elsewhere is answered NOT_LEADER_OR_FOLLOWER, never forwarded: Kafka
// clients refresh their metadata and follow the leader, as they do
// against Kafka.

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/txn"
)

// Cluster is the cluster this listener is a broker of (Config.Cluster).
// Without one the listener is a single broker that leads everything.
type Cluster interface {
	// Self is this broker's node id (Brokers.Self), -1 while it has none.
	Self() int32
	// Brokers is the cluster as Kafka clients see it now.
	Brokers(ctx context.Context) Brokers
	// Domain is what this instance serves Kafka calls with now; release
	// ends the call's use of it. Domain.Log is nil while the instance has
	// opened none yet.
	Domain() (d Domain, release func())
	// Leader is the leader of topic's partition part now. A topic or
	// partition that does not exist is led here, so that the domain
	// answers for it.
	Leader(ctx context.Context, topic string, part int32) Leader
	// Coordinator is the node that coordinates the group (key type
	// group or share) or transactional id (key type transaction) named
	// key; this node when nobody does yet (a call here takes it), -1 when
	// none can be told.
	Coordinator(ctx context.Context, keyType int8, key string) int32
	// Transactions reports whether the cluster serves transactional ids
	// (docs/kafka.md "Transactions"); Domain.Txn is then the coordinator
	// of those this instance coordinates.
	Transactions() bool
}

// Brokers is the cluster's brokers and controller.
type Brokers struct {
	// Self is this broker's node id, -1 while it has none yet.
	Self int32
	// Controller is the controller's node id (-1: none known).
	Controller int32
	// List is every live broker, this one included.
	List []Broker
	// ClusterID is the cluster's Kafka cluster id, the same at every
	// broker ("" while unknown: this listener's own).
	ClusterID string
}

// Broker is one broker of the cluster.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
}

// Leader is a partition's leader: its node id (-1: no live broker leads
// it right now) and the leader epoch, which grows with every change of
// leader.
type Leader struct {
	Node  int32
	Epoch int32
}

// Domain is the log domain, share-group manager, consumer-group
// coordinator and transaction coordinator of this instance's backend;
// Share, Groups and Txn are nil where share groups, consumer groups or
// transactions are not served (a standby).
type Domain struct {
	Log    *broker.Log
	Share  *sharegroup.Manager
	Groups *consumergroup.Coordinator
	Txn    *txn.Coordinator
}

// domainKey carries a call's Domain in its context.
type domainKey struct{}

// logOf is the log domain of ctx's call.
func (l *Listener) logOf(ctx context.Context) *broker.Log {
	if d, ok := ctx.Value(domainKey{}).(Domain); ok {
		return d.Log
	}
	return l.log
}

// shareOf is the share-group manager of ctx's call, nil when there is none.
func (l *Listener) shareOf(ctx context.Context) *sharegroup.Manager {
	if d, ok := ctx.Value(domainKey{}).(Domain); ok {
		return d.Share
	}
	return l.cfg.Share
}

// groupsOf is the consumer-group coordinator of ctx's call, or
// errNoCoordinator where this instance serves none (a standby, or one
// whose backend is not open): NOT_COORDINATOR, on which the client looks
// the coordinator up again.
func (l *Listener) groupsOf(ctx context.Context) (*consumergroup.Coordinator, error) {
	c := l.cfg.Groups
	if d, ok := ctx.Value(domainKey{}).(Domain); ok {
		c = d.Groups
	}
	if c == nil {
		return nil, errNoCoordinator
	}
	return c, nil
}

var errNoCoordinator = apierr.New(apierr.NotOwner, "this broker coordinates no consumer groups right now; find the coordinator again")

// txnOf is the transaction coordinator of ctx's call, or errNoTxnCoordinator
// where this instance coordinates no transactional ids (a standby, or one
// whose backend is not open): NOT_COORDINATOR, on which the client looks
// the coordinator up again.
func (l *Listener) txnOf(ctx context.Context) (*txn.Coordinator, error) {
	c := l.cfg.Txn
	if d, ok := ctx.Value(domainKey{}).(Domain); ok {
		c = d.Txn
	}
	if c == nil {
		return nil, errNoTxnCoordinator
	}
	return c, nil
}

var errNoTxnCoordinator = apierr.New(apierr.NotOwner, "this broker coordinates no transactional ids right now; find the coordinator again")

// readsCommitted reports whether isolation_level read_committed stops at
// the last stable offset here: on a single node, and in a cluster that
// serves transactions, where a partition's leader reads its own log (a
// cluster without them has no open transactions; its leaders answer the
// high watermark, as read uncommitted).
func (l *Listener) readsCommitted() bool {
	return l.cfg.Cluster == nil || l.cfg.Cluster.Transactions()
}

// servesTxn reports whether this listener serves transactional ids: with
// a coordinator on a single node, or where the cluster serves them.
func (l *Listener) servesTxn() bool {
	if l.cfg.Cluster != nil {
		return l.cfg.Cluster.Transactions()
	}
	return l.cfg.Txn != nil
}

// withDomain resolves the call's domain in cluster mode; release ends it.
func (l *Listener) withDomain(ctx context.Context) (context.Context, func(), error) {
	if l.cfg.Cluster == nil {
		return ctx, func() {}, nil
	}
	d, release := l.cfg.Cluster.Domain()
	if d.Log == nil {
		release()
		return ctx, nil, errNoDomain
	}
	return context.WithValue(ctx, domainKey{}, d), release, nil
}

// errNoDomain: the instance has no log open yet; the connection is closed
// and the client tries another broker.
var errNoDomain = errors.New("this instance has not opened the log yet")

// The listener's own leadership errors (wireErrors).
var (
	errLeaderNotAvailable = errors.New("no broker leads the partition right now (one is being chosen); retry")
	errFencedLeaderEpoch  = errors.New("the request's leader epoch is older than the partition's")
	errUnknownLeaderEpoch = errors.New("the request's leader epoch is newer than the partition's")
)

// brokers is the cluster's brokers: this single node without a Cluster.
func (l *Listener) brokers(ctx context.Context) Brokers {
	if l.cfg.Cluster == nil {
		return Brokers{Self: nodeID, Controller: nodeID, List: []Broker{{NodeID: nodeID, Host: l.host, Port: l.port}}}
	}
	return l.cfg.Cluster.Brokers(ctx)
}

// leader is the leader of a partition: this single node at epoch 0
// without a Cluster.
func (l *Listener) leader(ctx context.Context, topic string, part int32) Leader {
	if l.cfg.Cluster == nil {
		return Leader{Node: nodeID}
	}
	return l.cfg.Cluster.Leader(ctx, topic, part)
}

// self is this broker's node id.
func (l *Listener) self() int32 {
	if l.cfg.Cluster == nil {
		return nodeID
	}
	return l.cfg.Cluster.Self()
}

// leads checks that this broker leads topic's partition part (a single
// node leads every one, at epoch 0), and that a leader epoch the client
// sent (current, -1 = none) is the leader's: the
// error is NOT_LEADER_OR_FOLLOWER for a partition led elsewhere,
// LEADER_NOT_AVAILABLE for one nobody leads, FENCED_LEADER_EPOCH and
// UNKNOWN_LEADER_EPOCH for an older and a newer epoch, as Kafka answers.
// The leader is returned either way (for KIP-951's current leader).
func (l *Listener) leads(ctx context.Context, topic string, part, current int32) (Leader, error) {
	ld := l.leader(ctx, topic, part)
	switch self := l.self(); {
	case ld.Node < 0:
		return ld, errLeaderNotAvailable
	case ld.Node != self:
		return ld, apierr.New(apierr.NotOwner, "%s-%d is led by broker %d", topic, part, ld.Node)
	}
	switch {
	case current < 0:
	case current < ld.Epoch:
		return ld, fmt.Errorf("%w (%d < %d)", errFencedLeaderEpoch, current, ld.Epoch)
	case current > ld.Epoch:
		return ld, fmt.Errorf("%w (%d > %d)", errUnknownLeaderEpoch, current, ld.Epoch)
	}
	return ld, nil
}

// brokerOf finds node among bs (ok false: not a live broker).
func brokerOf(bs Brokers, node int32) (Broker, bool) {
	for _, b := range bs.List {
		if b.NodeID == node {
			return b, true
		}
	}
	return Broker{}, false
}

// notCoordinatorResponse answers a share-group API at an instance that
// serves no share groups (a standby in active-standby mode):
// NOT_COORDINATOR, on which the client looks the coordinator up again;
// nil for an API that is not a share-group one.
func notCoordinatorResponse(req kmsg.Request) kmsg.Response {
	if _, ok := shareHandlers[req.Key()]; !ok {
		return nil
	}
	switch req.(type) {
	case *kmsg.ShareFetchRequest, *kmsg.ShareAcknowledgeRequest:
		return nil // per partition: NOT_LEADER_OR_FOLLOWER (share.go)
	}
	code := kerr.NotCoordinator.Code
	resp := req.ResponseKind()
	switch r := resp.(type) {
	case *kmsg.ShareGroupHeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.ListGroupsResponse:
		r.ErrorCode = code
	case *kmsg.AlterShareGroupOffsetsResponse:
		r.ErrorCode = code
	case *kmsg.DeleteShareGroupOffsetsResponse:
		r.ErrorCode = code
	case *kmsg.ShareGroupDescribeResponse:
		for _, g := range req.(*kmsg.ShareGroupDescribeRequest).GroupIDs {
			rg := kmsg.NewShareGroupDescribeResponseGroup()
			rg.GroupID, rg.ErrorCode = g, code
			r.Groups = append(r.Groups, rg)
		}
	case *kmsg.DescribeShareGroupOffsetsResponse:
		for _, g := range req.(*kmsg.DescribeShareGroupOffsetsRequest).Groups {
			rg := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
			rg.GroupID, rg.ErrorCode = g.GroupID, code
			r.Groups = append(r.Groups, rg)
		}
	default:
		return nil
	}
	return resp
}

// leaders gathers the leaders of a share response's partitions, and the
// brokers among them other than this one (the response's node
// endpoints, KIP-951).
type leaders struct {
	l     *Listener
	ctx   context.Context
	bs    Brokers
	named map[int32]bool
}

func (l *Listener) newLeaders(ctx context.Context) *leaders {
	return &leaders{l: l, ctx: ctx, bs: l.brokers(ctx), named: map[int32]bool{}}
}

// of is the leader's node id and epoch of topic's partition part.
func (ls *leaders) of(topic string, part int32) (int32, int32) {
	ld := ls.l.leader(ls.ctx, topic, part)
	if _, live := brokerOf(ls.bs, ld.Node); !live {
		return -1, ld.Epoch
	}
	if ld.Node != ls.bs.Self {
		ls.named[ld.Node] = true
	}
	return ld.Node, ld.Epoch
}

// elsewhere are the brokers of is answers other than this one.
func (ls *leaders) elsewhere() []Broker {
	var out []Broker
	for node := range ls.named {
		if b, ok := brokerOf(ls.bs, node); ok {
			out = append(out, b)
		}
	}
	return out
}

// notLeaderShare is a ShareFetch or ShareAcknowledge at an instance that
// serves no share groups (a standby): every partition named is
// NOT_LEADER_OR_FOLLOWER with its current leader and that leader's node
// endpoint, as a Kafka broker answers for partitions it does not lead
// (an unknown topic id UNKNOWN_TOPIC_ID).
func (l *Listener) notLeaderShare(ctx context.Context, ids map[[16]byte][]int32, add func(id [16]byte, part int32, code int16, leader, epoch int32)) *leaders {
	ls := l.newLeaders(ctx)
	for id, parts := range ids {
		name, ok := l.resolveTopicID(ctx, id)
		for _, p := range parts {
			if !ok {
				add(id, p, kerr.UnknownTopicID.Code, -1, -1)
				continue
			}
			leader, epoch := ls.of(name, p)
			add(id, p, kerr.NotLeaderForPartition.Code, leader, epoch)
		}
	}
	return ls
}
