package sharegroup

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// OfflineSharePartition is a share-partition that cannot serve: its durable
// state was found lost when the share-state store was opened (until a
// repair, --repair-share-state for the file store), or its last
// state write failed (until its state is rewritten, which the next request
// on it tries). Requests on it answer KAFKA_STORAGE_ERROR.
type OfflineSharePartition struct {
	Group     string
	Topic     string
	Partition int32
	Err       string
}

// Offline lists the offline share-partitions, sorted by group, topic and
// partition (for readiness reporting).
func (m *Manager) Offline() []OfflineSharePartition {
	var out []OfflineSharePartition
	for _, g := range m.groupList() {
		for _, sp := range g.partitions() {
			sp.mu.Lock()
			reason := sp.offline
			live := sp.status == spLive
			sp.mu.Unlock()
			if reason == "" && live && sp.lost() {
				reason = "the last share state write failed; rewritten on the next request"
			}
			if reason != "" {
				out = append(out, OfflineSharePartition{Group: g.id, Topic: sp.topic, Partition: sp.part, Err: reason})
			}
		}
	}
	slices.SortFunc(out, func(a, b OfflineSharePartition) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// Stats are counters for metrics.
type Stats struct {
	// UnreadableArchived counts offsets archived because the log could not
	// read them (corrupt records), over all groups since Open.
	UnreadableArchived uint64
	// StateWriteFailures counts failed share-state writes (or fsyncs).
	StateWriteFailures uint64
	// DeadLettered counts records copied to dead-letter topics, and
	// DeadLetterSkipped records archived without their copy, over all
	// groups since Open.
	DeadLettered, DeadLetterSkipped uint64
	// OfflineSharePartitions is len(Offline()).
	OfflineSharePartitions int
	// BadDeliverAt counts acquisitions of records whose sharelog-deliver-at
	// header is not a decimal number of ms (delivered at once).
	BadDeliverAt uint64
}

// Stats returns the manager's counters.
func (m *Manager) Stats() Stats {
	return Stats{
		UnreadableArchived:     m.unreadable.Load(),
		StateWriteFailures:     m.state.Failures(),
		DeadLettered:           m.dlqCopied.Load(),
		DeadLetterSkipped:      m.dlqSkipped.Load(),
		OfflineSharePartitions: len(m.Offline()),
		BadDeliverAt:           m.badDeliverAt.Load(),
	}
}

// corruptRange returns the unreadable offsets a log-store read error
// names: the log store's corruption error has a method
// CorruptRange() (first, last int64) giving the first and last unreadable
// offset. ok is false if err carries no such range.
func corruptRange(err error) (from, to int64, ok bool) {
	var cr interface{ CorruptRange() (int64, int64) }
	if !errors.As(err, &cr) {
		return 0, 0, false
	}
	from, to = cr.CorruptRange()
	if from < 0 || to < from {
		return 0, 0, false
	}
	return from, to, true
}

// unreadableMsg describes archived unreadable offsets.
func unreadableMsg(first, last int64) string {
	if first == last {
		return fmt.Sprintf("offset %d", first)
	}
	return fmt.Sprintf("offsets %d-%d", first, last)
}
