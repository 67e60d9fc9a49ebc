package sharegroup

import (
	"cmp"
	"slices"
	"strings"
	"sync/atomic"
)

// spCounters are a share-partition's event counters since it was loaded
// (or created), for metrics. They live on the share-partition, so a group
// or topic that goes takes its counters with it and its series disappear
// from the next scrape instead of staying forever. They count what was
// applied: an acknowledgement undone because its state write failed stays
// counted (sharelog_share_state_write_failures_total shows those).
type spCounters struct {
	expired   atomic.Int64               // records whose acquisition lock expired
	limitArch atomic.Int64               // records archived at the delivery-count limit
	acks      [AckRenew + 1]atomic.Int64 // records acknowledged, by AckType
}

// countAck counts n records acknowledged with t.
func (c *spCounters) countAck(t AckType, n int64) {
	if t > AckUnspecified && t <= AckRenew {
		c.acks[t].Add(n)
	}
}

// PartitionMetrics is one share-partition's live state and counters.
type PartitionMetrics struct {
	Group, Topic string
	Partition    int32
	// StartOffset is SPSO; Lag is as DescribeShareGroupOffsets reports it
	// (records at or above SPSO not yet acknowledged or archived, up to the
	// high watermark).
	StartOffset, Lag int64
	// Acquired is the records currently locked by a consumer (in flight).
	Acquired int64
	// Expired, LimitArchived: records whose lock expired, and records
	// archived because they reached the delivery-count limit.
	Expired, LimitArchived int64
	// Acks counts acknowledged records by type (index: AckType).
	Acks [AckRenew + 1]int64
}

// GroupMetrics is one group's live membership and counters.
type GroupMetrics struct {
	Group    string
	Members  int
	Sessions int
	// DeadLettered and DeadLetterSkipped count the group's records copied
	// to its dead-letter topic, and archived without a copy.
	DeadLettered, DeadLetterSkipped int64
}

// Metrics returns the live groups and their initialised share-partitions
// (sorted), read at scrape time: state that is gone is not reported. It
// reads state only: lock expiry and log-start moves not yet applied by an
// operation are not applied here (the lag then counts from the log start).
func (m *Manager) Metrics() ([]GroupMetrics, []PartitionMetrics) {
	m.mu.Lock()
	groups := make([]*group, 0, len(m.groups))
	for _, g := range m.groups {
		groups = append(groups, g)
	}
	m.mu.Unlock()
	sessions := m.sessions.CountByGroup()
	var gms []GroupMetrics
	var pms []PartitionMetrics
	for _, g := range groups {
		gms = append(gms, GroupMetrics{Group: g.id, Members: int(g.nMembers.Load()), Sessions: sessions[g.id],
			DeadLettered: int64(g.dlqCopied.Load()), DeadLetterSkipped: int64(g.dlqSkipped.Load())})
		for _, p := range g.partitions() {
			if pm, ok := p.metrics(m); ok {
				pms = append(pms, pm)
			}
		}
	}
	slices.SortFunc(gms, func(a, b GroupMetrics) int { return strings.Compare(a.Group, b.Group) })
	slices.SortFunc(pms, func(a, b PartitionMetrics) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return gms, pms
}

// metrics reads a live share-partition's metrics; ok is false if it is not
// initialised, offline, or its topic is gone.
func (p *sharePartition) metrics(m *Manager) (pm PartitionMetrics, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != spLive || p.offline != "" {
		return pm, false
	}
	ls, hw, err := m.store.Bounds(p.topic, p.part)
	if err != nil {
		return pm, false
	}
	start := max(p.spso, ls)
	var terminal, acquired int64
	for i := range p.runs {
		r := &p.runs[i]
		if r.last < start {
			continue
		}
		n := r.last - max(r.first, start) + 1
		switch {
		case r.state.terminal():
			terminal += n
		case r.state == stAcquired:
			acquired += n
		}
	}
	for _, r := range p.below {
		acquired += r.last - r.first + 1
	}
	pm = PartitionMetrics{Group: p.g.id, Topic: p.topic, Partition: p.part, StartOffset: p.spso,
		Lag: max(hw-start-terminal, 0), Acquired: acquired,
		Expired: p.counters.expired.Load(), LimitArchived: p.counters.limitArch.Load()}
	for t := range pm.Acks {
		pm.Acks[t] = p.counters.acks[t].Load()
	}
	return pm, true
}
