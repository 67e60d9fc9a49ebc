package sharegroup

// Routing by group coordinator (docs/cluster.md "Share groups: one
// coordinator per group"): in a partitioned cluster each share group has
// one coordinator, which keeps its membership and config and answers its
// admin calls; an instance that receives a call naming a group it does
// not coordinate asks the coordinator (one hop: a forwarded call is never
// forwarded again). The admin calls about share-partitions are answered
// by the coordinator merged with every other instance's owned-only answer
// (owners.go): each instance serves the share-partitions of the
// partitions it owns. ListGroups lists every instance's groups. A single
// server has no Coordinators: every call is served here.
//
// ShareFetch and ShareAcknowledge are not routed: they are served by the
// instance that receives them, over the share sessions it holds (owners.go).

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
)

// Coordinators says which instance coordinates each share group. It is
// consulted at the entry of every call naming a group but ShareFetch and
// ShareAcknowledge.
type Coordinators interface {
	// Coordinator is who coordinates group right now: this instance
	// (Coordinator.Hold set) or a peer (Coordinator.Peer). create says the
	// call may create the group, so a group nobody coordinates is taken
	// here; without it, a group that exists nowhere is this instance's, so
	// that this manager answers for it. The error (a retryable NOT_OWNER
	// or OWNER_UNREACHABLE) says that nobody coordinates it right now.
	Coordinator(ctx context.Context, group string, create bool) (Coordinator, error)
}

// Coordinator is the coordinator of one group as [Coordinators.Coordinator]
// found it.
type Coordinator struct {
	// Hold, when this instance coordinates the group, keeps it here until
	// released: the call runs under it.
	Hold Hold
	// Peer is the address of the instance that coordinates the group,
	// when this one does not.
	Peer string
}

// Hold keeps a group at this instance for one call: giving the group up
// ends Term, which ends the call, then waits for the holds taken before.
type Hold interface {
	// Term ends when this instance stops coordinating the group.
	Term() context.Context
	// Release ends the hold.
	Release()
}

// Peers calls the share-group operations of another instance, as the
// caller of this instance (its identity goes along, and the mark of a
// forwarded call: the peer forwards it no further). A ctx marked
// [OwnedOnly] asks the peer's owned-only answer (owners.go). A peer that
// cannot be reached answers OWNER_UNREACHABLE.
type Peers interface {
	// Others lists the addresses of the other live instances.
	Others(ctx context.Context) ([]string, error)

	// The calls routed to the group's coordinator, as the methods of
	// Manager of the same names at the peer.
	Heartbeat(ctx context.Context, peer string, req HeartbeatRequest) (HeartbeatResponse, error)
	GetConfig(ctx context.Context, peer, groupID string) (GroupConfig, error)
	UpdateConfig(ctx context.Context, peer, groupID string, c GroupConfig) (GroupConfig, error)
	DescribeGroup(ctx context.Context, peer, groupID string) (GroupDescription, error)
	DescribeOffsets(ctx context.Context, peer, groupID string, topics []TopicPartitions) ([]TopicOffsets, error)
	DescribePartitionState(ctx context.Context, peer, groupID string, topics []TopicPartitions, maxRanges int) ([]TopicState, error)
	AlterOffsets(ctx context.Context, peer, groupID string, topics []TopicStartOffsets) ([]TopicPartitionResults, error)
	DeleteOffsets(ctx context.Context, peer, groupID string, topics []string) ([]TopicResult, error)
	DeleteGroup(ctx context.Context, peer, groupID string) error

	// ListGroups is the peer's own groups (ListGroups of a forwarded call).
	ListGroups(ctx context.Context, peer string, filter GroupState) ([]GroupListing, error)
}

// ownersTimeout bounds each instance's answer when a call asks every
// instance (ListGroups, the admin calls' owned-only answers).
const ownersTimeout = 10 * time.Second

// routed runs a call naming group at its coordinator: here (under the
// group's hold) or at the peer that coordinates it. An invalid group ID,
// an owned-only call and a single server are served here.
func routed[R any](m *Manager, ctx context.Context, group string, create bool,
	here func(context.Context) (R, error), there func(ctx context.Context, peer string) (R, error)) (R, error) {
	var zero R
	if m.opts.Coordinators == nil || isOwnedOnly(ctx) || validGroupID(group) != nil {
		return here(ctx) // the call answers an invalid ID itself
	}
	if !m.enter() {
		return zero, ErrClosed
	}
	defer m.leave()
	c, err := m.opts.Coordinators.Coordinator(ctx, group, create)
	switch {
	case err == nil && c.Hold != nil:
		return underHold(ctx, group, c.Hold, here)
	case err != nil:
		return zero, err
	case broker.ForwardedBy(ctx) != "":
		return zero, apierr.New(apierr.NotOwner, "share group %q is coordinated by another instance (%s); retry", group, c.Peer)
	case c.Peer == "":
		return zero, apierr.New(apierr.NotOwner, "share group %q has no coordinator at the moment; retry", group)
	}
	return there(ctx, c.Peer)
}

// underHold runs a call of a group this instance coordinates, holding h
// until it returns: giving the group up cancels the call (a waiting call
// returns), waits for it, and the call answers NOT_OWNER.
func underHold[R any](ctx context.Context, group string, h Hold, here func(context.Context) (R, error)) (R, error) {
	defer h.Release()
	term := h.Term()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(term, cancel)
	defer stop()
	out, err := here(ctx)
	if err != nil && term.Err() != nil {
		var zero R
		return zero, apierr.New(apierr.NotOwner, "share group %q moved to another instance during the call; retry", group)
	}
	return out, err
}

// Heartbeat serves ShareGroupHeartbeat at the group's coordinator (a join
// may create the group): join at epoch 0, heartbeat at the member's
// current or previous epoch, leave at -1.
func (m *Manager) Heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatResponse, error) {
	return routed(m, ctx, req.GroupID, req.MemberEpoch == 0,
		func(ctx context.Context) (HeartbeatResponse, error) { return m.heartbeat(ctx, req) },
		func(ctx context.Context, peer string) (HeartbeatResponse, error) {
			return m.opts.Peers.Heartbeat(ctx, peer, req)
		})
}

// GetConfig returns a group's effective configuration, at its coordinator.
func (m *Manager) GetConfig(ctx context.Context, groupID string) (GroupConfig, error) {
	return routed(m, ctx, groupID, false,
		func(context.Context) (GroupConfig, error) { return m.getConfig(groupID) },
		func(ctx context.Context, peer string) (GroupConfig, error) {
			return m.opts.Peers.GetConfig(ctx, peer, groupID)
		})
}

// UpdateConfig sets the fields of c that are not nil, at the group's
// coordinator, creating the group if needed. Every set field is validated
// first; one bad value fails the call with INVALID_REQUEST and changes
// nothing. The change is durable before it returns; it applies as follows
// (lock duration to later locks, the limits at the next transition or
// acquisition, auto_offset_reset to uninitialised share-partitions) and
// wakes waiting fetches.
func (m *Manager) UpdateConfig(ctx context.Context, groupID string, c GroupConfig) (GroupConfig, error) {
	return routed(m, ctx, groupID, true,
		func(context.Context) (GroupConfig, error) { return m.updateConfig(groupID, c) },
		func(ctx context.Context, peer string) (GroupConfig, error) {
			return m.opts.Peers.UpdateConfig(ctx, peer, groupID, c)
		})
}

// DescribeGroup describes a group, its effective config and its members,
// at its coordinator.
func (m *Manager) DescribeGroup(ctx context.Context, groupID string) (GroupDescription, error) {
	return routed(m, ctx, groupID, false,
		func(ctx context.Context) (GroupDescription, error) { return m.describeGroup(ctx, groupID) },
		func(ctx context.Context, peer string) (GroupDescription, error) {
			return m.opts.Peers.DescribeGroup(ctx, peer, groupID)
		})
}

// DescribeOffsets reports each share-partition's start offset (SPSO) and
// lag, at the group's coordinator with every owner's answer merged. No
// topics: every topic with share state in the group (all its partitions);
// a topic without partitions: all of them.
func (m *Manager) DescribeOffsets(ctx context.Context, groupID string, topics []TopicPartitions) ([]TopicOffsets, error) {
	return routed(m, ctx, groupID, false,
		func(ctx context.Context) ([]TopicOffsets, error) {
			return describeOwners(m, ctx, topics,
				func(ctx context.Context, topics []TopicPartitions) ([]TopicOffsets, error) {
					return m.describeOffsets(ctx, groupID, topics)
				},
				func(ctx context.Context, peer string, topics []TopicPartitions) ([]TopicOffsets, error) {
					return m.opts.Peers.DescribeOffsets(ctx, peer, groupID, topics)
				},
				func(t TopicOffsets) []PartitionOffsets { return t.Partitions })
		},
		func(ctx context.Context, peer string) ([]TopicOffsets, error) {
			return m.opts.Peers.DescribeOffsets(ctx, peer, groupID, topics)
		})
}

// DescribePartitionState reports the in-flight records of a group's
// share-partitions, at the group's coordinator with every owner's answer
// merged: [SPSO, SPEO] as runs of uniform state, then the ACQUIRED runs
// below SPSO, at most maxRanges per partition (0 means
// DefaultStateRanges). It changes nothing a client could observe: like
// DescribeOffsets it only applies the lazy log-start moves and lock
// expiries that every operation applies first. topics selects as in
// DescribeOffsets.
func (m *Manager) DescribePartitionState(ctx context.Context, groupID string, topics []TopicPartitions, maxRanges int) ([]TopicState, error) {
	return routed(m, ctx, groupID, false,
		func(ctx context.Context) ([]TopicState, error) {
			return describeOwners(m, ctx, topics,
				func(ctx context.Context, topics []TopicPartitions) ([]TopicState, error) {
					return m.describePartitionState(ctx, groupID, topics, maxRanges)
				},
				func(ctx context.Context, peer string, topics []TopicPartitions) ([]TopicState, error) {
					return m.opts.Peers.DescribePartitionState(ctx, peer, groupID, topics, maxRanges)
				},
				func(t TopicState) []PartitionState { return t.Partitions })
		},
		func(ctx context.Context, peer string) ([]TopicState, error) {
			return m.opts.Peers.DescribePartitionState(ctx, peer, groupID, topics, maxRanges)
		})
}

// AlterOffsets restarts share-partitions at the given start offsets, with
// no in-flight state, at the group's coordinator and at every owner. It
// creates the group if needed; the group must have no members. Durable
// before it returns.
func (m *Manager) AlterOffsets(ctx context.Context, groupID string, topics []TopicStartOffsets) ([]TopicPartitionResults, error) {
	return routed(m, ctx, groupID, true,
		func(ctx context.Context) ([]TopicPartitionResults, error) {
			if !m.asksOwners(ctx) {
				return m.alterOffsets(ctx, groupID, topics, nil)
			}
			var owners [][]TopicPartitionResults
			local, err := m.alterOffsets(ctx, groupID, topics, func(ctx context.Context) (err error) {
				owners, err = askOwners(m, ctx, func(ctx context.Context, peer string) ([]TopicPartitionResults, error) {
					return m.opts.Peers.AlterOffsets(OwnedOnly(ctx), peer, groupID, topics)
				})
				return err
			})
			if err != nil {
				return nil, err
			}
			return local, mergeOwners(local, owners, func(t TopicPartitionResults) []PartitionResult { return t.Partitions })
		},
		func(ctx context.Context, peer string) ([]TopicPartitionResults, error) {
			return m.opts.Peers.AlterOffsets(ctx, peer, groupID, topics)
		})
}

// DeleteOffsets makes the group's share-partitions of each topic
// uninitialised, at the group's coordinator and at every owner. The group
// must exist and have no members. Durable before it returns.
func (m *Manager) DeleteOffsets(ctx context.Context, groupID string, topics []string) ([]TopicResult, error) {
	return routed(m, ctx, groupID, false,
		func(ctx context.Context) ([]TopicResult, error) {
			if !m.asksOwners(ctx) {
				return m.deleteOffsets(ctx, groupID, topics, nil)
			}
			var owners [][]TopicResult
			local, err := m.deleteOffsets(ctx, groupID, topics, func(ctx context.Context) (err error) {
				owners, err = askOwners(m, ctx, func(ctx context.Context, peer string) ([]TopicResult, error) {
					return m.opts.Peers.DeleteOffsets(OwnedOnly(ctx), peer, groupID, topics)
				})
				return err
			})
			if err != nil {
				return nil, err
			}
			for i := range local {
				for _, o := range owners {
					if len(o) != len(local) {
						return nil, errShapeChanged()
					}
					local[i] = betterDelete(local[i], o[i])
				}
			}
			return local, nil
		},
		func(ctx context.Context, peer string) ([]TopicResult, error) {
			return m.opts.Peers.DeleteOffsets(ctx, peer, groupID, topics)
		})
}

// DeleteGroup deletes a group without members, at its coordinator and at
// every owner: its config and share state (durably) and its sessions,
// whose records are released. The ID may then be used for a new group.
func (m *Manager) DeleteGroup(ctx context.Context, groupID string) error {
	_, err := routed(m, ctx, groupID, false,
		func(ctx context.Context) (struct{}, error) {
			var ask func(context.Context) error
			if m.asksOwners(ctx) {
				ask = func(ctx context.Context) error {
					_, err := askOwners(m, ctx, func(ctx context.Context, peer string) (struct{}, error) {
						return struct{}{}, m.opts.Peers.DeleteGroup(OwnedOnly(ctx), peer, groupID)
					})
					return err
				}
			}
			return struct{}{}, m.deleteGroup(ctx, groupID, ask)
		},
		func(ctx context.Context, peer string) (struct{}, error) {
			return struct{}{}, m.opts.Peers.DeleteGroup(ctx, peer, groupID)
		})
	return err
}

// ListGroups lists every group sorted by ID, only those in state filter
// unless it is StateUnknown: in a cluster, those every instance
// coordinates (a forwarded call: this instance's only).
func (m *Manager) ListGroups(ctx context.Context, filter GroupState) ([]GroupListing, error) {
	local, err := m.listGroups(filter)
	if err != nil || m.opts.Peers == nil || broker.ForwardedBy(ctx) != "" {
		return local, err
	}
	others, err := askOwners(m, ctx, func(ctx context.Context, peer string) ([]GroupListing, error) {
		return m.opts.Peers.ListGroups(ctx, peer, filter)
	})
	if err != nil {
		return nil, err
	}
	for _, o := range others {
		local = append(local, o...)
	}
	slices.SortStableFunc(local, func(a, b GroupListing) int { return strings.Compare(a.GroupID, b.GroupID) })
	return slices.CompactFunc(local, func(a, b GroupListing) bool { return a.GroupID == b.GroupID }), nil
}

// asksOwners reports whether a call this instance coordinates asks the
// other instances for the share-partitions they own: in a cluster, unless
// the call is itself such a question.
func (m *Manager) asksOwners(ctx context.Context) bool {
	return m.opts.Peers != nil && !isOwnedOnly(ctx)
}

// askOwners runs ask at every other instance, at once, each within
// ownersTimeout, and returns their answers in the order of Peers.Others.
// The first failure (in that order) fails it. The calls about
// share-partitions (owners.go) are owned-only.
func askOwners[R any](m *Manager, ctx context.Context, ask func(ctx context.Context, peer string) (R, error)) ([]R, error) {
	peers, err := m.opts.Peers.Others(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]R, len(peers))
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, peer := range peers {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, ownersTimeout)
			defer cancel()
			out[i], errs[i] = ask(actx, peer)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Merging the coordinator's answer with the owners' (owned-only): every
// instance answered every partition of the request in the same order,
// NOT_LEADER_OR_FOLLOWER (NotOwner) for those it does not own; the
// owner's entry replaces the coordinator's.

// errShapeChanged is the answer when the instances' answers do not have
// the same topics and partitions.
func errShapeChanged() error {
	return apierr.New(apierr.NotOwner, "the partitions changed while the call was answered; retry")
}

// perPartition is one partition's entry of an answer.
type perPartition interface {
	at() (partition int32, code apierr.Reason)
}

func (p PartitionOffsets) at() (int32, apierr.Reason) { return p.Partition, p.ErrorCode }
func (p PartitionState) at() (int32, apierr.Reason)   { return p.Partition, p.ErrorCode }
func (p PartitionResult) at() (int32, apierr.Reason)  { return p.Partition, p.ErrorCode }

// pick returns the first entry of local and others that is not NotOwner
// (local when all are).
func pick[P perPartition](local P, others []P) P {
	if _, code := local.at(); code != apierr.NotOwner {
		return local
	}
	for _, o := range others {
		if _, code := o.at(); code != apierr.NotOwner {
			return o
		}
	}
	return local
}

// mergeOwners merges, partition by partition, the owners' answers into
// local (parts returns a topic's partitions, sharing its storage); all
// must have the same topics and partitions.
func mergeOwners[T any, P perPartition](local []T, owners [][]T, parts func(T) []P) error {
	for ti, t := range local {
		lp := parts(t)
		for pi := range lp {
			lpart, _ := lp[pi].at()
			others := make([]P, 0, len(owners))
			for _, ot := range owners {
				if len(ot) != len(local) {
					return errShapeChanged()
				}
				op := parts(ot[ti])
				if refused(op) {
					// The owner refused the caller the topic (the
					// transport here refuses it too): it says nothing.
					continue
				}
				if len(op) != len(lp) {
					return errShapeChanged()
				}
				if opart, _ := op[pi].at(); opart != lpart {
					return errShapeChanged()
				}
				others = append(others, op[pi])
			}
			lp[pi] = pick(lp[pi], others)
		}
	}
	return nil
}

// refused reports whether an owner answered TOPIC_AUTHORIZATION_FAILED
// for every partition of a topic, as a transport answers a topic the
// caller may not see: a topic named because it has state here, when no
// topics were asked, may be one.
func refused[P perPartition](ps []P) bool {
	for _, p := range ps {
		if _, code := p.at(); code != apierr.TopicAuthorizationFailed {
			return false
		}
	}
	return len(ps) > 0
}

// named is a topic of a describe answer.
type named interface{ topicName() string }

func (t TopicOffsets) topicName() string { return t.Topic }
func (t TopicState) topicName() string   { return t.Topic }

// describeOwners answers a describe call of a group's share-partitions
// here (local), then at every owner (owned-only), merged partition by
// partition. Without topics (every topic with share state) it first
// learns the topics with state here and at every owner, then asks again
// naming them, so that every answer has the same shape.
func describeOwners[T named, P perPartition](m *Manager, ctx context.Context, topics []TopicPartitions,
	local func(context.Context, []TopicPartitions) ([]T, error),
	owner func(ctx context.Context, peer string, topics []TopicPartitions) ([]T, error),
	parts func(T) []P) ([]T, error) {
	here, err := local(ctx, topics)
	if err != nil || !m.asksOwners(ctx) {
		return here, err
	}
	owners, err := askOwners(m, ctx, func(ctx context.Context, peer string) ([]T, error) {
		return owner(OwnedOnly(ctx), peer, topics)
	})
	if err != nil {
		return nil, err
	}
	if len(topics) == 0 {
		var names []string
		for _, answer := range append([][]T{here}, owners...) {
			for _, t := range answer {
				names = append(names, t.topicName())
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		if len(names) == 0 {
			return here, nil
		}
		ts := make([]TopicPartitions, len(names))
		for i, n := range names {
			ts[i] = TopicPartitions{Topic: n}
		}
		return describeOwners(m, ctx, ts, local, owner, parts)
	}
	return here, mergeOwners(here, owners, parts)
}

// betterDelete is the topic result of a DeleteOffsets that says most:
// deleted somewhere, else a failure, else "nothing to delete".
func betterDelete(a, b TopicResult) TopicResult {
	rank := func(r TopicResult) int {
		switch r.ErrorCode {
		case apierr.None:
			return 2
		case apierr.UnknownTopicOrPartition:
			return 0
		}
		return 1
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}
