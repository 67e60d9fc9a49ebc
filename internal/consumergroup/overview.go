package consumergroup

// The admin view of a group for the non-Kafka surfaces (ConsumerGroupService
// in proto/sharelog/v1/consumer_group.proto, the CLI, the console, the
// metrics): one description for both protocols, with the members'
// assignments decoded, and the committed offsets beside the log end offsets
// (docs/consumer-groups.md "Over gRPC and REST").

import (
	"context"
	"encoding/binary"
	"errors"
	"sort"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// OffsetQuery says which offset Options.ListOffsets resolves.
type OffsetQuery uint8

const (
	OffsetEarliest    OffsetQuery = iota + 1 // the log start offset
	OffsetLatest                             // the high watermark (the log end offset)
	OffsetByTimestamp                        // the first offset at or after a timestamp; -1 when none
)

// MemberOverview is one member of a group of either protocol.
type MemberOverview struct {
	MemberID             string
	InstanceID           *string
	ClientID, ClientHost string
	// Assignment is what the member was given: decoded from the
	// consumer protocol's assignment of a Stable classic group, or what a
	// consumer-protocol (KIP-848) member owns. nil when not known (a
	// rebalancing group, another protocol type).
	Assignment []TopicPartitions
}

// GroupOverview is a group of either protocol as the admin surfaces show
// it.
type GroupOverview struct {
	Group string
	// Type is "classic" or "consumer" (KIP-848), as ListGroups says.
	Type string
	// State is Kafka's name of the state of the group's type.
	State        string
	ProtocolType string
	// Protocol is the classic group's chosen protocol (its assignor;
	// Stable groups only) or the consumer group's server-side assignor.
	Protocol string
	// Epoch is the classic group's generation or the consumer group's
	// epoch.
	Epoch   int32
	Members []MemberOverview
}

// Overview describes a group of either protocol; GROUP_ID_NOT_FOUND when
// there is none.
func (c *Coordinator) Overview(ctx context.Context, group string) (GroupOverview, error) {
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil {
		return GroupOverview{}, err
	}
	if g == nil {
		return GroupOverview{}, apierr.New(apierr.GroupIDNotFound, "group %q does not exist", group)
	}
	defer g.mu.Unlock()
	if g.cs != nil {
		cs := g.cs
		o := GroupOverview{Group: group, Type: "consumer", State: g.consumerStateName(), ProtocolType: consumerProtocol,
			Protocol: g.groupAssignor(), Epoch: cs.epoch}
		ids := make([]string, 0, len(cs.members))
		for id := range cs.members {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			m := cs.members[id]
			o.Members = append(o.Members, MemberOverview{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID,
				ClientHost: m.clientHost, Assignment: toTopicPartitions(m.assigned)})
		}
		return o, nil
	}
	o := GroupOverview{Group: group, Type: "classic", State: g.state.String(), ProtocolType: g.protocolType, Epoch: g.generation}
	stable := g.state == Stable
	if stable {
		o.Protocol = g.protocol
	}
	for _, m := range g.sortedMembers() {
		mo := MemberOverview{MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost}
		if stable && g.protocolType == consumerProtocol {
			if a, err := DecodeConsumerAssignment(m.assignment); err == nil {
				mo.Assignment = a
			}
		}
		o.Members = append(o.Members, mo)
	}
	return o, nil
}

// errShortAssignment is a consumer-protocol assignment cut short.
var errShortAssignment = errors.New("consumergroup: short consumer protocol assignment")

// DecodeConsumerAssignment decodes the assignment a classic consumer
// group's leader gives a member: Kafka's ConsumerProtocolAssignment
// (version int16; topics as [topic string16, partitions [int32]]; user
// data, ignored). Every version so far starts with these fields, and a
// later one may only add to the end, so the version is not checked. The
// topics come back sorted, with their partitions in the order given.
func DecodeConsumerAssignment(b []byte) ([]TopicPartitions, error) {
	if len(b) < 6 {
		return nil, errShortAssignment
	}
	b = b[2:] // version
	n := int32(binary.BigEndian.Uint32(b))
	b = b[4:]
	if n < 0 {
		return []TopicPartitions{}, nil // a null array
	}
	if int(n) > len(b)/6 { // each topic takes at least 6 bytes
		return nil, errShortAssignment
	}
	byTopic := map[string][]int32{}
	for range n {
		if len(b) < 2 {
			return nil, errShortAssignment
		}
		l := int(int16(binary.BigEndian.Uint16(b)))
		b = b[2:]
		if l < 0 || len(b) < l+4 {
			return nil, errShortAssignment
		}
		topic := string(b[:l])
		b = b[l:]
		np := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if np < 0 {
			np = 0
		}
		if int(np) > len(b)/4 {
			return nil, errShortAssignment
		}
		ps := byTopic[topic]
		for range np {
			ps = append(ps, int32(binary.BigEndian.Uint32(b)))
			b = b[4:]
		}
		byTopic[topic] = ps
	}
	out := make([]TopicPartitions, 0, len(byTopic))
	for t, ps := range byTopic {
		out = append(out, TopicPartitions{Topic: t, Partitions: ps})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, nil
}

// PartitionLag is a committed offset beside its partition's log end
// offset.
type PartitionLag struct {
	Topic       string
	Partition   int32
	Offset      int64 // -1: none committed
	LeaderEpoch int32 // -1: none
	Metadata    string
	// LogEndOffset is the partition's high watermark; -1 when it could
	// not be looked up (Err says why).
	LogEndOffset int64
	// Lag is LogEndOffset - Offset, at least 0; -1 when either is
	// unknown (no commit: Kafka's "-").
	Lag int64
	Err error
}

// OffsetsWithLag is a group's committed offsets with their lag: with no
// topics, every partition the group committed an offset for; with topics,
// every partition of each (an unknown topic is one entry, partition -1,
// with UNKNOWN_TOPIC_OR_PARTITION). GROUP_ID_NOT_FOUND when the group does
// not exist. The log end offsets are looked up with no lock held.
func (c *Coordinator) OffsetsWithLag(ctx context.Context, group string, topics []string) ([]PartitionLag, error) {
	return c.offsetsWithLag(ctx, group, topics, nil)
}

func (c *Coordinator) offsetsWithLag(ctx context.Context, group string, topics []string, memo map[partKey]logEnd) ([]PartitionLag, error) {
	var counts map[string]int32
	if len(topics) > 0 {
		var err error
		if counts, err = c.partitionCounts(ctx, topics); err != nil {
			return nil, err
		}
	}
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return nil, apierr.New(apierr.GroupIDNotFound, "group %q does not exist", group)
	}
	var out []PartitionLag
	add := func(topic string, p int32, o groupoffsets.Offset, ok bool) {
		pl := PartitionLag{Topic: topic, Partition: p, Offset: -1, LeaderEpoch: -1, LogEndOffset: -1, Lag: -1}
		if ok {
			pl.Offset, pl.LeaderEpoch, pl.Metadata = o.Offset, o.LeaderEpoch, o.Metadata
		}
		out = append(out, pl)
	}
	if len(topics) == 0 {
		for k, o := range g.offsets {
			add(k.topic, k.partition, o, true)
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Topic != out[j].Topic {
				return out[i].Topic < out[j].Topic
			}
			return out[i].Partition < out[j].Partition
		})
	} else {
		seen := map[string]bool{}
		for _, t := range topics {
			if seen[t] {
				continue
			}
			seen[t] = true
			if counts[t] < 0 {
				out = append(out, PartitionLag{Topic: t, Partition: -1, Offset: -1, LeaderEpoch: -1, LogEndOffset: -1, Lag: -1,
					Err: apierr.New(apierr.UnknownTopicOrPartition, "topic %q does not exist", t)})
				continue
			}
			for p := range counts[t] {
				o, ok := g.offsets[partKey{t, p}]
				add(t, p, o, ok)
			}
		}
	}
	g.mu.Unlock()
	c.fillLogEnd(ctx, out, memo)
	return out, nil
}

type logEnd struct {
	offset int64
	err    error
}

// fillLogEnd looks up the log end offset of each entry (no lock held) and
// computes the lag; memo, when not nil, keeps the answers for the next
// call.
func (c *Coordinator) fillLogEnd(ctx context.Context, out []PartitionLag, memo map[partKey]logEnd) {
	if c.o.ListOffsets == nil {
		return
	}
	for i := range out {
		pl := &out[i]
		if pl.Err != nil {
			continue
		}
		k := partKey{pl.Topic, pl.Partition}
		le, ok := memo[k]
		if !ok {
			le.offset, le.err = c.o.ListOffsets(ctx, pl.Topic, pl.Partition, OffsetLatest, 0)
			if memo != nil {
				memo[k] = le
			}
		}
		end, err := le.offset, le.err
		if err != nil {
			pl.Err = err
			continue
		}
		pl.LogEndOffset = end
		if pl.Offset >= 0 {
			pl.Lag = max(end-pl.Offset, 0)
		}
	}
}

// GroupOffsets is one group's committed offsets, for the metrics.
type GroupOffsets struct {
	Group   string
	Offsets []PartitionLag
}

// AllOffsetsWithLag is every group's committed offsets with their lag,
// sorted by group, topic and partition (the metrics' view, read at
// scrape).
func (c *Coordinator) AllOffsetsWithLag(ctx context.Context) []GroupOffsets {
	var out []GroupOffsets
	memo := map[partKey]logEnd{} // groups that read a partition share its look-up
	for _, g := range c.snapshotGroups() {
		ls, err := c.offsetsWithLag(ctx, g.id, nil, memo)
		if err != nil || len(ls) == 0 {
			continue // removed meanwhile, or nothing committed
		}
		out = append(out, GroupOffsets{Group: g.id, Offsets: ls})
	}
	return out
}
