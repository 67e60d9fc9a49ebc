package consumergroup

import (
	"context"
	"sort"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// partitionCounts looks up the partition counts of topics (no lock held):
// -1 for a topic that does not exist, err for any other failure.
func (c *Coordinator) partitionCounts(ctx context.Context, topics []string) (map[string]int32, error) {
	out := make(map[string]int32, len(topics))
	for _, t := range topics {
		if _, ok := out[t]; ok {
			continue
		}
		if c.o.Partitions == nil {
			out[t] = 1 << 30
			continue
		}
		n, err := c.o.Partitions(ctx, t)
		switch {
		case apierr.ReasonOf(err) == apierr.UnknownTopicOrPartition:
			out[t] = -1
		case err != nil:
			return nil, err
		default:
			out[t] = n
		}
	}
	return out, nil
}

func unknownPartition(topic string, p int32) error {
	return apierr.New(apierr.UnknownTopicOrPartition, "no partition %s-%d", topic, p)
}

// Commit is OffsetCommit. A request-level error (the member or generation
// check) fails every partition; otherwise each partition has its outcome,
// and the ones that pass are written to the store together, durable (as
// --fsync says) before Commit returns.
func (c *Coordinator) Commit(ctx context.Context, req CommitRequest) ([]TopicErrors, error) {
	if req.Group == "" {
		return nil, apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	topics := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		topics[i] = t.Topic
	}
	counts, err := c.partitionCounts(ctx, topics)
	if err != nil {
		return nil, err
	}
	simple := req.Generation < 0 && req.MemberID == "" && req.InstanceID == nil
	if !simple && c.o.Taken != nil && c.o.Taken(req.Group) {
		return nil, apierr.New(apierr.GroupIDNotFound, "group %q is a group of another type", req.Group)
	}
	g, created, err := c.lockGroup(ctx, req.Group, simple && (c.o.Taken == nil || !c.o.Taken(req.Group)))
	if err != nil {
		return nil, err
	}
	if g == nil {
		if req.UnknownGroupNotFound || simple {
			return nil, apierr.New(apierr.GroupIDNotFound, "group %q does not exist", req.Group)
		}
		return nil, apierr.New(apierr.IllegalGeneration, "group %q does not exist", req.Group)
	}
	out, err := c.commit(g, req, counts)
	g.mu.Unlock()
	if created {
		c.reap(g) // nothing was committed
	}
	return out, err
}

func (c *Coordinator) commit(g *group, req CommitRequest, counts map[string]int32) ([]TopicErrors, error) {
	if req.Generation < 0 && req.MemberID == "" && req.InstanceID == nil {
		if g.state != Empty {
			return nil, apierr.New(apierr.UnknownMemberID, "group %q has members: a commit needs the member id and generation", g.id)
		}
	} else if g.consumerMode() {
		if err := g.checkConsumerCommit(req.MemberID, req.Generation); err != nil {
			return nil, err
		}
	} else {
		if err := g.validateInstance(req.InstanceID, req.MemberID); err != nil {
			return nil, err
		}
		if g.state == CompletingRebalance {
			return nil, apierr.New(apierr.RebalanceInProgress, "group %q is rebalancing", g.id)
		}
		m := g.members[req.MemberID]
		if m == nil {
			return nil, apierr.New(apierr.UnknownMemberID, "member %s is not in group %q", req.MemberID, g.id)
		}
		if req.Generation != g.generation {
			return nil, apierr.New(apierr.IllegalGeneration, "generation %d is not group %q's %d", req.Generation, g.id, g.generation)
		}
		c.sessionTimer(g, m)
	}
	now := c.o.Now()
	out := make([]TopicErrors, len(req.Topics))
	var write []groupoffsets.Offset
	type slot struct{ t, p int }
	var written []slot
	for i, t := range req.Topics {
		out[i] = TopicErrors{Topic: t.Topic, Partitions: make([]PartitionError, len(t.Partitions))}
		for j, p := range t.Partitions {
			out[i].Partitions[j].Partition = p.Partition
			switch {
			case p.Partition < 0 || p.Partition >= counts[t.Topic]:
				out[i].Partitions[j].Err = unknownPartition(t.Topic, p.Partition)
			case len(p.Metadata) > c.o.MaxMetadataBytes:
				out[i].Partitions[j].Err = apierr.New(apierr.OffsetMetadataTooLarge, "metadata of %d bytes is above %d", len(p.Metadata), c.o.MaxMetadataBytes)
			default:
				write = append(write, groupoffsets.Offset{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset,
					LeaderEpoch: p.LeaderEpoch, Metadata: p.Metadata, CommitTime: now})
				written = append(written, slot{i, j})
			}
		}
	}
	if len(write) == 0 {
		return out, nil
	}
	if err := c.store.Commit(g.id, write); err != nil {
		serr := c.storageErr(g.id, err)
		for _, s := range written {
			out[s.t].Partitions[s.p].Err = serr
		}
		return out, nil
	}
	for _, o := range write {
		g.offsets[partKey{o.Topic, o.Partition}] = o
	}
	c.persistEmptySince(g) // the group's first offsets carry its retention start

	return out, nil
}

// Fetch is OffsetFetch: the committed offsets of the partitions named, or
// of every partition with one when topics is nil. A partition without a
// committed offset (or an unknown group) answers offset -1.
func (c *Coordinator) Fetch(ctx context.Context, group string, topics []TopicPartitions) ([]TopicOffsets, error) {
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil {
		return nil, err
	}
	var offsets map[partKey]groupoffsets.Offset
	if g != nil {
		offsets = g.offsets
		defer g.mu.Unlock()
	}
	none := func(p int32) CommittedOffset { return CommittedOffset{Partition: p, Offset: -1, LeaderEpoch: -1} }
	if topics == nil {
		byTopic := map[string][]CommittedOffset{}
		for k, o := range offsets {
			byTopic[k.topic] = append(byTopic[k.topic], CommittedOffset{Partition: k.partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata})
		}
		out := make([]TopicOffsets, 0, len(byTopic))
		for t, ps := range byTopic {
			sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
			out = append(out, TopicOffsets{Topic: t, Partitions: ps})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
		return out, nil
	}
	out := make([]TopicOffsets, len(topics))
	for i, t := range topics {
		out[i] = TopicOffsets{Topic: t.Topic, Partitions: make([]CommittedOffset, len(t.Partitions))}
		for j, p := range t.Partitions {
			if o, ok := offsets[partKey{t.Topic, p}]; ok {
				out[i].Partitions[j] = CommittedOffset{Partition: p, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
			} else {
				out[i].Partitions[j] = none(p)
			}
		}
	}
	return out, nil
}

// DeleteOffsets is OffsetDelete: an empty group's offsets go; a consumer
// group with members keeps those of topics it subscribes to
// (GROUP_SUBSCRIBED_TO_TOPIC); any other group with members refuses
// (NON_EMPTY_GROUP).
func (c *Coordinator) DeleteOffsets(ctx context.Context, group string, topics []TopicPartitions) ([]TopicErrors, error) {
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Topic
	}
	counts, err := c.partitionCounts(ctx, names)
	if err != nil {
		return nil, err
	}
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return nil, apierr.New(apierr.GroupIDNotFound, "group %q does not exist", group)
	}
	if g.state != Empty && g.protocolType != consumerProtocol {
		g.mu.Unlock()
		return nil, &apierr.Error{Reason: apierr.NonEmptyGroup, Message: "group " + group + " has members",
			Metadata: map[string]string{"members": itoaLen(g.members)}}
	}
	subscribed := map[string]bool{}
	if g.state != Empty {
		if subscribed = g.subscribedTopics(); subscribed == nil {
			g.mu.Unlock()
			return nil, &apierr.Error{Reason: apierr.NonEmptyGroup, Message: "group " + group + " has members whose subscriptions are unknown",
				Metadata: map[string]string{"members": itoaLen(g.members)}}
		}
	}
	out := make([]TopicErrors, len(topics))
	var del []groupoffsets.Partition
	for i, t := range topics {
		out[i] = TopicErrors{Topic: t.Topic, Partitions: make([]PartitionError, len(t.Partitions))}
		for j, p := range t.Partitions {
			out[i].Partitions[j].Partition = p
			switch {
			case p < 0 || p >= counts[t.Topic]:
				out[i].Partitions[j].Err = unknownPartition(t.Topic, p)
			case subscribed[t.Topic]:
				out[i].Partitions[j].Err = apierr.New(apierr.GroupSubscribedToTopic, "group %q consumes topic %q", group, t.Topic)
			default:
				if _, ok := g.offsets[partKey{t.Topic, p}]; ok {
					del = append(del, groupoffsets.Partition{Topic: t.Topic, Partition: p})
				}
			}
		}
	}
	if len(del) > 0 {
		if err := c.store.Delete(g.id, del); err != nil {
			g.mu.Unlock()
			return nil, c.storageErr(g.id, err)
		}
		for _, p := range del {
			delete(g.offsets, partKey{p.Topic, p.Partition})
		}
	}
	g.mu.Unlock()
	return out, nil
}
