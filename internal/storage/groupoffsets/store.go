package groupoffsets

import "time"

// Offset is one committed offset of a group.
type Offset struct {
	Topic       string    `json:"t"`
	Partition   int32     `json:"p"`
	Offset      int64     `json:"o"`
	LeaderEpoch int32     `json:"e"`
	Metadata    string    `json:"m,omitempty"`
	CommitTime  time.Time `json:"ts"`
}

// Partition names a partition of a topic.
type Partition struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
}

// Group is what a store holds of one group.
type Group struct {
	ID      string
	Offsets []Offset
	// EmptySince is when the group last became empty (zero: it had members
	// when last written, or never had any).
	EmptySince time.Time
}

// Store keeps committed offsets durably. Every method is safe for
// concurrent use; a write that returns an error changed nothing.
type Store interface {
	// Load returns every group the store holds, as last written.
	Load() ([]Group, error)
	// Commit sets the offsets of group (all or none).
	Commit(group string, offsets []Offset) error
	// Delete removes partitions of group; nil removes the whole group.
	Delete(group string, parts []Partition) error
	// SetEmptySince records when group became empty (zero: it has members).
	SetEmptySince(group string, t time.Time) error
	// Close flushes and releases the store.
	Close() error
}
