package groupoffsets

import (
	"errors"
	"time"
)

// ErrFenced is a write refused because another coordinator of the group
// wrote it since (cluster mode: this instance lost the group); it changed
// nothing, and the caller is no longer the group's coordinator.
var ErrFenced = errors.New("the group's committed offsets were written by a newer coordinator")

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

// Meta is what a store keeps of a group besides its offsets.
type Meta struct {
	// ProtocolType is the group's ("consumer" for Kafka consumers; empty
	// for a group of simple commits only).
	ProtocolType string `json:"pt,omitempty"`
	// EmptySince is when the group last became empty (zero: it had members
	// when last written, or never had any).
	EmptySince time.Time `json:"s,omitzero"`
}

// Group is what a store holds of one group.
type Group struct {
	ID      string
	Offsets []Offset
	Meta
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
	// SetMeta records the group's Meta (kept until the group is deleted).
	SetMeta(group string, m Meta) error
	// Close flushes and releases the store.
	Close() error
}
