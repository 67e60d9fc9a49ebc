package sharestate

import (
	"errors"
	"fmt"
)

// Store is the durable share state of one share-group manager: an ordered
// stream of entries (Entry) with group commit, read back as a State when
// the store is opened. Implementations: statelog (the file state log, the
// server's), Mem (in memory, for tests and as the reference). Every
// implementation passes sharestatetest.Run.
//
// Lifecycle: the implementation's constructor opens the store and
// recovers it (Recovered); writes are accepted at once, so the owner can
// settle recovered state (clamps, drops) before Start; Start runs the
// startup snapshot and starts the background work (compaction); Close
// flushes, makes everything durable and stops it. The owner (the share-group
// Manager) closes the store, also when its own Open fails.
//
// Tickets: Write returns a ticket, a position in the stream that grows
// with every entry; 0 is never a ticket. Entries take effect in ticket
// order. Once Wait(t) returned, every ticket up to t is settled: each is
// either as durable as an acknowledgement needs or lost, and Lost tells
// which without blocking.
type Store interface {
	// Recovered returns the state found when the store was opened, with
	// the share-partitions whose durable state was found lost marked
	// Offline. The caller owns it; it is not updated by later writes.
	Recovered() *State
	// Write enqueues e and returns its ticket. e (passed by value: the
	// acknowledgement path makes no allocation for it) and its slices are
	// not retained. It fails
	// only after Close (ErrClosed); a failure of the write itself shows at
	// Wait and Lost.
	Write(e Entry) (uint64, error)
	// Wait blocks until ticket's entry is as durable as an acknowledgement
	// needs — on stable storage when the store promises "acknowledged only
	// after durable" (the file store with fsync always), written otherwise
	// — and returns the failure if that entry was lost.
	Wait(ticket uint64) error
	// Lost reports whether ticket's entry failed (without blocking; false
	// for a ticket not settled yet and for 0). A failure is not sticky:
	// entries after it succeed again once the cause is gone.
	Lost(ticket uint64) bool
	// Failures returns the number of write failures since the store was
	// opened.
	Failures() uint64
	// Start writes the startup snapshot with snap and starts the background
	// work. The store calls snap again, from its own goroutine, whenever it
	// compacts: snap must write the full state of every group and
	// share-partition (KindGroup, KindPartFull, KindPartOffline entries)
	// through Write and return the first error; the store then discards
	// every entry older than the snapshot. So snap must reflect every entry
	// written before it reads the state: the owner applies a change to its
	// live state no later than it writes it, under a lock snap also takes.
	// Nor may snap reflect a change whose write has failed: a snapshot
	// written after the failure is durable, so the change would come back
	// at recovery although its writer was told it was not stored. An owner
	// that rolls back a failed change does so before snap can read the
	// state again (docs/on-disk-layout.md, recovery).
	Start(snap func() error) error
	// Close stops the background work, flushes what is enqueued, makes it
	// durable and releases the store. Writes after it fail with ErrClosed;
	// closing twice is harmless.
	Close() error
}

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("share state store closed")

// Kind is an entry's type. The values are those of the file format.
type Kind uint8

// Entry kinds.
const (
	KindGroup       Kind = 1 // a group exists with GroupEpoch and Config
	KindGroupDelete Kind = 2 // the group and all its share-partitions are gone
	KindPartDelta   Kind = 3 // set SPSO and the durable state of Ranges
	KindPartFull    Kind = 4 // the share-partition's whole state: SPSO and Ranges
	KindPartDelete  Kind = 5 // the share-partition is uninitialised again
	KindPartOffline Kind = 7 // the share-partition's durable state was found lost (Reason)
)

func (k Kind) String() string {
	switch k {
	case KindGroup:
		return "group"
	case KindGroupDelete:
		return "group delete"
	case KindPartDelta:
		return "share-partition delta"
	case KindPartFull:
		return "share-partition full state"
	case KindPartDelete:
		return "share-partition delete"
	case KindPartOffline:
		return "share-partition offline"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// RecState is a durable record state. ACQUIRED is never stored: an acquired
// record is durably AVAILABLE with the delivery count before the
// acquisition.
type RecState uint8

// Durable record states (the values of the share-group state machine's
// states, and of the file format).
const (
	Available    RecState = 0
	Acknowledged RecState = 2
	Archived     RecState = 3
	// Archiving: archived, with its copy to the group's dead-letter topic
	// still to be made (Count is the delivery count the copy reports). Not
	// terminal: SPSO stays at or below it until the copy is made and the
	// record becomes Archived.
	Archiving RecState = 4
)

// Terminal reports whether s is ACKNOWLEDGED or ARCHIVED.
func (s RecState) Terminal() bool { return s == Acknowledged || s == Archived }

func (s RecState) String() string {
	switch s {
	case Available:
		return "AVAILABLE"
	case Acknowledged:
		return "ACKNOWLEDGED"
	case Archived:
		return "ARCHIVED"
	case Archiving:
		return "ARCHIVING"
	}
	return fmt.Sprintf("state %d", uint8(s))
}

// Range is the durable state of the offsets [First, Last]: AVAILABLE or
// ARCHIVING with a delivery count, ACKNOWLEDGED or ARCHIVED (Count 0:
// counts of terminal records are not kept).
type Range struct {
	First, Last int64
	State       RecState
	Count       int16
}

// GroupConfig is a group's explicitly set configuration fields (nil: not
// set). It has the fields of sharegroup.GroupConfig, so either converts to
// the other.
type GroupConfig struct {
	RecordLockDurationMs    *int32
	DeliveryCountLimit      *int32
	PartitionMaxRecordLocks *int32
	AutoOffsetReset         *string
	SessionTimeoutMs        *int32
	HeartbeatIntervalMs     *int32
	DeadLetterTopic         *string // "" = none
	// Ordering is "none" or "key" (docs/queues.md).
	Ordering *string
	// The redelivery backoff (docs/queues.md).
	RedeliveryBackoffInitialMs  *int32
	RedeliveryBackoffMaxMs      *int32
	RedeliveryBackoffMultiplier *float64
	// IsolationLevel is "read_uncommitted" or "read_committed"
	// (docs/kafka.md "Transactions").
	IsolationLevel *string
}

// PartitionKey names a share-partition: its group and its topic partition,
// bound to the topic's ID.
type PartitionKey struct {
	Group     string
	Topic     string
	TopicID   string
	Partition int32
}

func (k PartitionKey) String() string {
	return fmt.Sprintf("group %q share-partition %s/%d (topic id %s)", k.Group, k.Topic, k.Partition, k.TopicID)
}

// Entry is one change of the durable state. Which fields count depends on
// Kind: Group always; Topic, TopicID and Partition for share-partition
// kinds; GroupEpoch and Config for KindGroup; SPSO and Ranges (ascending,
// not overlapping) for KindPartDelta and KindPartFull; Reason for
// KindPartOffline.
type Entry struct {
	Kind       Kind
	Group      string
	Topic      string
	TopicID    string
	Partition  int32
	GroupEpoch int32
	Config     GroupConfig
	SPSO       int64
	Ranges     []Range
	Reason     string
}

// Key returns the share-partition an entry is about.
func (e *Entry) Key() PartitionKey {
	return PartitionKey{Group: e.Group, Topic: e.Topic, TopicID: e.TopicID, Partition: e.Partition}
}

// State is the durable share state, as recovered.
type State struct {
	Groups []GroupState // sorted by ID
}

// GroupState is one group's durable state.
type GroupState struct {
	ID         string
	Config     GroupConfig
	GroupEpoch int32
	Partitions []PartitionState // sorted by topic ID, then partition
}

// PartitionState is one share-partition's durable state. Initialized is
// false for a share-partition known only to be offline (every entry of it
// was lost).
type PartitionState struct {
	Topic       string
	TopicID     string
	Partition   int32
	Initialized bool
	// SPSO is the share-partition start offset: the first offset not in a
	// terminal state.
	SPSO int64
	// Ranges are the offsets from SPSO on whose state is not the default
	// (AVAILABLE, count 0), ascending; the first does not start at SPSO in
	// a terminal state.
	Ranges []Range
	// Offline is why the durable state is known to be lost ("" if it is
	// not): the share-partition must not serve until a repair.
	Offline string
}

// Key returns the share-partition's key in group.
func (p *PartitionState) Key(group string) PartitionKey {
	return PartitionKey{Group: group, Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition}
}
