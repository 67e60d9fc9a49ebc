package consumergroup

// AlterOffsets: kafka-consumer-groups.sh --reset-offsets on the server
// (ConsumerGroupService.AlterOffsets, docs/consumer-groups.md "Resetting
// offsets"). As that tool, it works on an inactive group only (Empty, or
// one that does not exist yet, which the reset creates), plans the new
// offsets from the log (earliest, latest, a timestamp, an explicit offset
// or a shift of the committed one), clamps them into [log start, log end],
// and writes them unless the request is a dry run.

import (
	"context"
	"sort"
	"strconv"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
)

// ResetKind is how AlterOffsets picks a partition's new offset.
type ResetKind uint8

const (
	ResetToEarliest  ResetKind = iota + 1 // the log start offset
	ResetToLatest                         // the log end offset (high watermark)
	ResetToTimestamp                      // the first offset at or after Value (Unix ms); the log end when none
	ResetToOffset                         // Value
	ResetShiftBy                          // the committed offset + Value (needs a committed offset)
)

// ResetTopic is one topic's reset: of the partitions named, or of every
// partition when Partitions is nil.
type ResetTopic struct {
	Topic      string
	Partitions []int32
	Kind       ResetKind
	Value      int64
}

// AlterRequest is AlterOffsets.
type AlterRequest struct {
	Group  string
	Topics []ResetTopic
	// DryRun plans the offsets without writing them (the tool's
	// --dry-run; its --execute is DryRun false).
	DryRun bool
}

// PlannedOffset is one partition's outcome.
type PlannedOffset struct {
	Topic     string
	Partition int32
	// Previous is the committed offset before the reset; -1: none.
	Previous int64
	// Offset is the new offset (written unless a dry run); -1 with Err.
	Offset int64
	Err    error
}

// resolved is a partition's log bounds and, for a timestamp reset, the
// offset found.
type resolved struct {
	start, end, at int64
	err            error
}

// AlterOffsets plans, and unless req.DryRun writes, new committed offsets
// for an inactive group. Request-level errors: INVALID_GROUP_ID,
// INVALID_REQUEST (no topics, a bad kind, a negative timestamp, a
// partition named twice), GROUP_ID_NOT_FOUND (the id is a share group's),
// NON_EMPTY_GROUP (the group has members). The results are per partition,
// in request order (every partition ascending for a topic without
// partitions); an unknown topic or partition, a failed look-up and a shift
// without a committed offset fail that partition only.
func (c *Coordinator) AlterOffsets(ctx context.Context, req AlterRequest) ([]PlannedOffset, error) {
	if req.Group == "" {
		return nil, apierr.New(apierr.InvalidGroupID, "the group id is empty")
	}
	if len(req.Topics) == 0 {
		return nil, apierr.Invalid("no topics to reset")
	}
	names := make([]string, len(req.Topics))
	for i, t := range req.Topics {
		if t.Topic == "" {
			return nil, apierr.Invalid("topic %d has no name", i)
		}
		if t.Kind < ResetToEarliest || t.Kind > ResetShiftBy {
			return nil, apierr.Invalid("topic %q: unknown reset kind %d", t.Topic, t.Kind)
		}
		if t.Kind == ResetToTimestamp && t.Value < 0 {
			return nil, apierr.Invalid("topic %q: timestamp %d is negative", t.Topic, t.Value)
		}
		names[i] = t.Topic
	}
	if c.o.Taken != nil && c.o.Taken(req.Group) {
		return nil, apierr.New(apierr.GroupIDNotFound, "group %q is a group of another type", req.Group)
	}
	if c.o.ListOffsets == nil {
		return nil, apierr.New(apierr.Unavailable, "offsets cannot be looked up here")
	}
	counts, err := c.partitionCounts(ctx, names)
	if err != nil {
		return nil, err
	}
	// The partitions in request order, each named once.
	out := []PlannedOffset{}
	kinds := []ResetTopic{}
	seen := map[partKey]bool{}
	for _, t := range req.Topics {
		n := counts[t.Topic]
		parts := t.Partitions
		if parts == nil {
			if n < 0 {
				out = append(out, PlannedOffset{Topic: t.Topic, Partition: -1, Previous: -1, Offset: -1,
					Err: apierr.New(apierr.UnknownTopicOrPartition, "topic %q does not exist", t.Topic)})
				kinds = append(kinds, t)
				continue
			}
			for p := range n {
				parts = append(parts, p)
			}
		} else {
			parts = append([]int32(nil), parts...)
			sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
		}
		for _, p := range parts {
			k := partKey{t.Topic, p}
			if seen[k] {
				return nil, apierr.Invalid("partition %s-%d is named twice", t.Topic, p)
			}
			seen[k] = true
			po := PlannedOffset{Topic: t.Topic, Partition: p, Previous: -1, Offset: -1}
			if p < 0 || p >= n {
				po.Err = unknownPartition(t.Topic, p)
			}
			out = append(out, po)
			kinds = append(kinds, t)
		}
	}
	// Refuse an active group before looking anything up; checked again
	// under the lock below, as members may join meanwhile.
	if err := c.checkInactive(ctx, req.Group); err != nil {
		return nil, err
	}
	res := make([]resolved, len(out))
	for i := range out {
		if out[i].Err != nil {
			continue
		}
		res[i] = c.resolve(ctx, out[i].Topic, out[i].Partition, kinds[i])
		if res[i].err != nil {
			out[i].Err = res[i].err
		}
	}
	g, created, err := c.lockGroup(ctx, req.Group, !req.DryRun)
	if err != nil {
		return nil, err
	}
	if g != nil && !g.inactive() {
		err := errActive(g)
		g.mu.Unlock()
		if created {
			c.reap(g)
		}
		return nil, err
	}
	var write []groupoffsets.Offset
	var written []int
	now := c.o.Now()
	for i := range out {
		po := &out[i]
		if po.Err != nil {
			continue
		}
		var prev groupoffsets.Offset
		var had bool
		if g != nil {
			prev, had = g.offsets[partKey{po.Topic, po.Partition}]
		}
		if had {
			po.Previous = prev.Offset
		}
		r, k := res[i], kinds[i]
		var target int64
		switch k.Kind {
		case ResetToEarliest:
			target = r.start
		case ResetToLatest:
			target = r.end
		case ResetToTimestamp:
			target = r.at
			if target < 0 {
				target = r.end // no record at or after it
			}
		case ResetToOffset:
			target = k.Value
		case ResetShiftBy:
			if !had {
				po.Err = apierr.Invalid("partition %s-%d has no committed offset to shift", po.Topic, po.Partition)
				continue
			}
			target = prev.Offset + k.Value
		}
		po.Offset = min(max(target, r.start), r.end)
		write = append(write, groupoffsets.Offset{Topic: po.Topic, Partition: po.Partition, Offset: po.Offset,
			LeaderEpoch: -1, CommitTime: now})
		written = append(written, i)
	}
	if g == nil { // a dry run for a group that does not exist
		return out, nil
	}
	defer func() {
		if created {
			c.reap(g)
		}
	}()
	defer g.mu.Unlock()
	if req.DryRun || len(write) == 0 {
		return out, nil
	}
	if err := c.store.Commit(g.id, write); err != nil {
		serr := c.storageErr(g.id, err)
		for _, i := range written {
			out[i].Offset, out[i].Err = -1, serr
		}
		return out, nil
	}
	for _, o := range write {
		g.offsets[partKey{o.Topic, o.Partition}] = o
	}
	c.persistEmptySince(g)
	return out, nil
}

// resolve looks up a partition's bounds and, for a timestamp reset, the
// offset at the timestamp (no lock held).
func (c *Coordinator) resolve(ctx context.Context, topic string, p int32, t ResetTopic) resolved {
	var r resolved
	if r.start, r.err = c.o.ListOffsets(ctx, topic, p, OffsetEarliest, 0); r.err != nil {
		return r
	}
	if r.end, r.err = c.o.ListOffsets(ctx, topic, p, OffsetLatest, 0); r.err != nil {
		return r
	}
	if t.Kind == ResetToTimestamp {
		r.at, r.err = c.o.ListOffsets(ctx, topic, p, OffsetByTimestamp, t.Value)
	}
	return r
}

// inactive reports whether the group has no members, pending or joined,
// of either protocol (g.mu held): the state kafka-consumer-groups.sh
// --reset-offsets needs.
func (g *group) inactive() bool {
	return g.state == Empty && len(g.members) == 0 && len(g.pending) == 0 && (g.cs == nil || len(g.cs.members) == 0)
}

// errActive is NON_EMPTY_GROUP with the tool's wording (g.mu held).
func errActive(g *group) error {
	n := len(g.members)
	state := g.state.String()
	if g.cs != nil && len(g.cs.members) > 0 {
		n, state = len(g.cs.members), g.consumerStateName()
	}
	return &apierr.Error{Reason: apierr.NonEmptyGroup,
		Message:  "offsets can only be reset if group " + g.id + " is inactive, but the current state is " + state,
		Metadata: map[string]string{"members": strconv.Itoa(n), "state": state}}
}

// checkInactive is NON_EMPTY_GROUP unless the group is inactive or does not
// exist.
func (c *Coordinator) checkInactive(ctx context.Context, group string) error {
	g, _, err := c.lockGroup(ctx, group, false)
	if err != nil || g == nil {
		return err
	}
	defer g.mu.Unlock()
	if !g.inactive() {
		return errActive(g)
	}
	return nil
}
