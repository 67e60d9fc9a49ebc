package sharegroup

import (
	"context"
	"fmt"
	"time"

	"github.com/sharelog/sharelog/apierr"
)

// DescribePartitionState's bounds on the ranges returned per share-partition.
const (
	DefaultStateRanges = 100
	MaxStateRanges     = 1000
)

// InFlightRange is one range of uniform state in DescribePartitionState.
type InFlightRange struct {
	FirstOffset, LastOffset int64
	State                   string // AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING or ARCHIVED
	DeliveryCount           int32
	Owner                   string    // ACQUIRED: the member holding the records ("" if its session just ended)
	LockDeadline            time.Time // ACQUIRED: when the lock expires; zero otherwise
	// AvailableAt: AVAILABLE records waiting for their redelivery backoff
	// or deliver-at time, when that passes; zero otherwise (docs/queues.md).
	AvailableAt time.Time

	ownerID uint64 // the owning session, resolved to Owner
}

// PartitionState is one partition of DescribePartitionState.
type PartitionState struct {
	Partition    int32
	StartOffset  int64 // SPSO; -1 when uninitialised or on error
	EndOffset    int64 // SPEO; -1 when uninitialised or on error
	Lag          int64 // as in PartitionOffsets
	Ranges       []InFlightRange
	Truncated    bool // Ranges stopped at the bound
	ErrorCode    apierr.Reason
	ErrorMessage string
	// KeyWaiting counts the records of an ORDERING_KEY group seen waiting
	// behind an earlier record of their key; OldestKeyWaiting is the lowest
	// (-1 if none).
	KeyWaiting, OldestKeyWaiting int64
}

// TopicState is one topic of DescribePartitionState.
type TopicState struct {
	Topic      string
	Partitions []PartitionState
}

// describePartitionState is DescribePartitionState of the
// share-partitions served here (NOT_LEADER_OR_FOLLOWER for the others).
func (m *Manager) describePartitionState(ctx context.Context, groupID string, topics []TopicPartitions, maxRanges int) ([]TopicState, error) {
	if err := validGroupID(groupID); err != nil {
		return nil, err
	}
	switch {
	case maxRanges == 0:
		maxRanges = DefaultStateRanges
	case maxRanges < 0 || maxRanges > MaxStateRanges:
		return nil, invalidRequest("max_ranges must be 0 to %d", MaxStateRanges)
	}
	if !m.enter() {
		return nil, ErrClosed
	}
	defer m.leave()
	out, owners, err := m.partitionState(ctx, groupID, topics, maxRanges)
	if err != nil {
		return nil, err
	}
	// Owners are session IDs; resolve them to member IDs with no group
	// lock held (the session cache's locks are not taken under it here).
	if len(owners) > 0 {
		names := make(map[uint64]string, len(owners))
		m.sessions.EndIfSession(func(s *session) bool {
			if owners[s.ID()] {
				names[s.ID()] = s.Key().Member
			}
			return false // look only: no session ends
		}, 0)
		for i := range out {
			for j := range out[i].Partitions {
				rs := out[i].Partitions[j].Ranges
				for k := range rs {
					if rs[k].ownerID != 0 {
						rs[k].Owner = names[rs[k].ownerID]
					}
				}
			}
		}
	}
	return out, nil
}

// partitionState is DescribePartitionState under the group's lock; it also
// returns the set of owning session IDs.
func (m *Manager) partitionState(ctx context.Context, groupID string, topics []TopicPartitions, maxRanges int) ([]TopicState, map[uint64]bool, error) {
	g, err := m.adminGroup(ctx, groupID)
	if err != nil {
		return nil, nil, err
	}
	defer g.op.Unlock()
	if len(topics) == 0 {
		names, err := m.topicsWithState(ctx, g)
		if err != nil {
			return nil, nil, err
		}
		for _, t := range names {
			topics = append(topics, TopicPartitions{Topic: t})
		}
	}
	unknown := func(p int32, msg string) PartitionState {
		return PartitionState{Partition: p, StartOffset: -1, EndOffset: -1, Lag: -1, OldestKeyWaiting: -1, ErrorCode: apierr.UnknownTopicOrPartition, ErrorMessage: msg}
	}
	owners := map[uint64]bool{}
	out := make([]TopicState, 0, len(topics))
	for _, t := range topics {
		ts := TopicState{Topic: t.Topic}
		ref, err := m.topicRef(ctx, t.Topic)
		if err != nil {
			return nil, nil, err
		}
		if ref == nil {
			parts := t.Partitions
			if len(parts) == 0 {
				parts = []int32{-1} // the topic as a whole
			}
			for _, p := range parts {
				ts.Partitions = append(ts.Partitions, unknown(p, "topic does not exist"))
			}
			out = append(out, ts)
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
				ts.Partitions = append(ts.Partitions, unknown(p, fmt.Sprintf("topic %q has no partition %d", t.Topic, p)))
				continue
			}
			ps := PartitionState{Partition: p, StartOffset: -1, EndOffset: -1, Lag: -1, OldestKeyWaiting: -1}
			if o := m.away(ref.id, t.Topic, p); o != "" {
				ps.ErrorCode, ps.ErrorMessage = apierr.NotOwner, notHere(o)
			} else if sp := g.partition(ref.id, t.Topic, p, false); sp != nil {
				sp.state(&ps, maxRanges, owners)
			}
			ts.Partitions = append(ts.Partitions, ps)
		}
		out = append(out, ts)
	}
	return out, owners, nil
}

// state fills ps from the share-partition, adding owning sessions to owners.
func (p *sharePartition) state(ps *PartitionState, maxRanges int, owners map[uint64]bool) {
	m := p.g.m
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.offline != "" {
		ps.ErrorCode, ps.ErrorMessage = apierr.KafkaStorageError, p.offline
		return
	}
	if p.status != spLive {
		return
	}
	ls, hw, err := m.store.Bounds(p.topic, p.part)
	if err != nil {
		ps.ErrorCode, ps.ErrorMessage = storeCode(err)
		return
	}
	now := m.now()
	wall := time.Now()
	p.prepare(ls, now)
	var terminal int64
	for i := range p.runs {
		if r := &p.runs[i]; r.state.terminal() {
			terminal += r.last - r.first + 1
		}
	}
	ps.StartOffset, ps.EndOffset, ps.Lag = p.spso, p.speo, max(hw-p.spso-terminal, 0)
	ps.KeyWaiting, ps.OldestKeyWaiting = p.keyWaiting()
	add := func(r *run) bool {
		if len(ps.Ranges) == maxRanges {
			ps.Truncated = true
			return false
		}
		ir := InFlightRange{FirstOffset: r.first, LastOffset: r.last, State: r.state.String(), DeliveryCount: int32(r.count)}
		if r.state == stAcquired {
			ir.ownerID = r.owner
			ir.LockDeadline = wall.Add(time.Duration(r.deadline - now))
			owners[r.owner] = true
		}
		if r.state == stAvailable && r.availAt > now {
			ir.AvailableAt = wall.Add(time.Duration(r.availAt - now))
		}
		ps.Ranges = append(ps.Ranges, ir)
		return true
	}
	for i := range p.runs {
		if !add(&p.runs[i]) {
			return
		}
	}
	for i := range p.below {
		if !add(&p.below[i]) {
			return
		}
	}
}
