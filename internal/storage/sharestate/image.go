package sharestate

import (
	"cmp"
	"slices"
	"sort"
	"strings"
)

// Image is the durable state an entry stream describes: apply the entries
// in ticket order, then State. Implementations replay their stream into one
// at recovery (the memory store keeps one live). It is not safe for
// concurrent use.
type Image struct {
	groups map[string]*imageGroup
}

type imageGroup struct {
	id     string
	config GroupConfig
	epoch  int32
	parts  map[partID]*imagePart
}

type partID struct {
	topicID string
	part    int32
}

type imagePart struct {
	topic, topicID string
	part           int32
	live           bool
	spso           int64
	// ranges ascend without overlapping, all >= spso; a gap is AVAILABLE
	// with count 0.
	ranges  []Range
	offline string
}

// NewImage returns an empty image.
func NewImage() *Image { return &Image{groups: make(map[string]*imageGroup)} }

func (im *Image) group(id string) *imageGroup {
	g := im.groups[id]
	if g == nil {
		g = &imageGroup{id: id, parts: make(map[partID]*imagePart)}
		im.groups[id] = g
	}
	return g
}

// Apply applies one entry. Entries of unknown kinds are ignored.
func (im *Image) Apply(e *Entry) {
	switch e.Kind {
	case KindGroup:
		g := im.group(e.Group)
		g.config, g.epoch = cloneConfig(e.Config), e.GroupEpoch
	case KindGroupDelete:
		delete(im.groups, e.Group)
	case KindPartDelete:
		if g := im.groups[e.Group]; g != nil {
			delete(g.parts, partID{e.TopicID, e.Partition})
		}
	case KindPartOffline:
		g := im.group(e.Group)
		k := partID{e.TopicID, e.Partition}
		p := g.parts[k]
		if p == nil {
			p = &imagePart{topic: e.Topic, topicID: e.TopicID, part: e.Partition}
			g.parts[k] = p
		}
		p.offline = e.Reason
	case KindPartDelta, KindPartFull:
		g := im.group(e.Group)
		k := partID{e.TopicID, e.Partition}
		p := g.parts[k]
		// A full state replaces; a delta builds on a live state only (a
		// delta after an offline-only mark starts afresh, as a full one).
		if p == nil || e.Kind == KindPartFull || !p.live {
			p = &imagePart{topic: e.Topic, topicID: e.TopicID, part: e.Partition, live: true, spso: e.SPSO}
			g.parts[k] = p
		}
		if e.SPSO > p.spso {
			p.ranges = clip(p.ranges, e.SPSO)
			p.spso = e.SPSO
		}
		for _, r := range e.Ranges {
			if r.Last < p.spso {
				continue
			}
			r.First = max(r.First, p.spso)
			if r.State.Terminal() {
				r.Count = 0
			}
			p.set(r)
		}
	}
}

// clip drops the parts of rs below off.
func clip(rs []Range, off int64) []Range {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].Last >= off })
	rs = rs[i:]
	if len(rs) > 0 && rs[0].First < off {
		rs[0].First = off
	}
	return rs
}

// set gives [r.First, r.Last] the state of r.
func (p *imagePart) set(r Range) {
	rs := p.ranges
	i := sort.Search(len(rs), func(k int) bool { return rs[k].Last >= r.First })
	j := sort.Search(len(rs), func(k int) bool { return rs[k].First > r.Last })
	var repl [3]Range
	n := 0
	if i < j && rs[i].First < r.First {
		left := rs[i]
		left.Last = r.First - 1
		repl[n] = left
		n++
	}
	repl[n] = r
	n++
	if i < j && rs[j-1].Last > r.Last {
		right := rs[j-1]
		right.First = r.Last + 1
		repl[n] = right
		n++
	}
	p.ranges = slices.Replace(rs, i, j, repl[:n]...)
	p.merge(i-1, i+n)
}

// merge merges adjacent equal neighbours among ranges[lo..hi] (clamped).
func (p *imagePart) merge(lo, hi int) {
	lo, hi = max(lo, 0), min(hi, len(p.ranges)-1)
	if lo >= hi {
		return
	}
	rs := p.ranges
	w := lo
	for i := lo + 1; i <= hi; i++ {
		if rs[w].Last+1 == rs[i].First && rs[w].State == rs[i].State && rs[w].Count == rs[i].Count {
			rs[w].Last = rs[i].Last
		} else {
			w++
			rs[w] = rs[i]
		}
	}
	if w < hi {
		p.ranges = slices.Delete(rs, w+1, hi+1)
	}
}

// State returns the image as a State (a copy): SPSO moved past leading
// terminal ranges, AVAILABLE ranges with count 0 left implicit, groups and
// share-partitions sorted.
func (im *Image) State() *State {
	st := &State{}
	for _, g := range im.groups {
		gs := GroupState{ID: g.id, Config: cloneConfig(g.config), GroupEpoch: g.epoch}
		for _, p := range g.parts {
			ps := PartitionState{Topic: p.topic, TopicID: p.topicID, Partition: p.part, Offline: p.offline}
			if p.live {
				ps.Initialized, ps.SPSO = true, p.spso
				rs := p.ranges
				for len(rs) > 0 && rs[0].First == ps.SPSO && rs[0].State.Terminal() {
					ps.SPSO = rs[0].Last + 1
					rs = rs[1:]
				}
				for _, r := range rs {
					if r.State == Available && r.Count == 0 {
						continue
					}
					ps.Ranges = append(ps.Ranges, r)
				}
			}
			gs.Partitions = append(gs.Partitions, ps)
		}
		slices.SortFunc(gs.Partitions, func(a, b PartitionState) int {
			return cmp.Or(strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
		})
		st.Groups = append(st.Groups, gs)
	}
	slices.SortFunc(st.Groups, func(a, b GroupState) int { return strings.Compare(a.ID, b.ID) })
	return st
}

func cloneConfig(c GroupConfig) GroupConfig {
	cp := func(v *int32) *int32 {
		if v == nil {
			return nil
		}
		x := *v
		return &x
	}
	out := GroupConfig{RecordLockDurationMs: cp(c.RecordLockDurationMs), DeliveryCountLimit: cp(c.DeliveryCountLimit),
		PartitionMaxRecordLocks: cp(c.PartitionMaxRecordLocks), SessionTimeoutMs: cp(c.SessionTimeoutMs), HeartbeatIntervalMs: cp(c.HeartbeatIntervalMs)}
	if c.AutoOffsetReset != nil {
		s := *c.AutoOffsetReset
		out.AutoOffsetReset = &s
	}
	if c.DeadLetterTopic != nil {
		s := *c.DeadLetterTopic
		out.DeadLetterTopic = &s
	}
	if c.Ordering != nil {
		o := *c.Ordering
		out.Ordering = &o
	}
	if c.IsolationLevel != nil {
		s := *c.IsolationLevel
		out.IsolationLevel = &s
	}
	out.RedeliveryBackoffInitialMs, out.RedeliveryBackoffMaxMs = cp(c.RedeliveryBackoffInitialMs), cp(c.RedeliveryBackoffMaxMs)
	if c.RedeliveryBackoffMultiplier != nil {
		m := *c.RedeliveryBackoffMultiplier
		out.RedeliveryBackoffMultiplier = &m
	}
	return out
}
