package changestream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sharelog/sharelog/client/backoff"
)

// Checkpoint is the committed resume point C of a partition's stream:
// every change below NextOffset is in the state it
// was delivered with. Persist it together with that state.
type Checkpoint struct { // JSON; NextOffset as a string
	TopicID    string `json:"topic_id"`
	Partition  int32  `json:"partition"`
	NextOffset int64  `json:"next_offset,string"`
}

// MarshalBinary encodes c as JSON.
func (c Checkpoint) MarshalBinary() ([]byte, error) { return json.Marshal(c) }

// UnmarshalBinary decodes a checkpoint written by MarshalBinary. It rejects
// unknown fields, trailing data and a negative NextOffset.
func (c *Checkpoint) UnmarshalBinary(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v Checkpoint
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("changestream: checkpoint: %w", err)
	}
	if dec.More() {
		return errors.New("changestream: checkpoint: trailing data")
	}
	if v.NextOffset < 0 {
		return fmt.Errorf("changestream: checkpoint: negative next_offset %d", v.NextOffset)
	}
	if v.Partition < 0 {
		return fmt.Errorf("changestream: checkpoint: negative partition %d", v.Partition)
	}
	*c = v
	return nil
}

// SnapshotKind says what a Snapshot event is.
type SnapshotKind int

const (
	// Ordered opens an ordered snapshot covering [Start, End] (inclusive):
	// its items come in increasing offset order, every version of a key.
	Ordered SnapshotKind = iota + 1
	// OSOStart opens an out-of-sequence-order snapshot: one item per key, in
	// no particular order; no point inside it is consistent.
	OSOStart
	// OSOEnd closes the OSO snapshot: the state is consistent again.
	OSOEnd
)

func (k SnapshotKind) String() string {
	switch k {
	case Ordered:
		return "Ordered"
	case OSOStart:
		return "OSOStart"
	case OSOEnd:
		return "OSOEnd"
	}
	return fmt.Sprintf("SnapshotKind(%d)", int(k))
}

// Source says where the server read an ordered snapshot from (informational).
type Source int

const (
	SourceUnspecified Source = iota
	SourceDisk
	SourceMemory
)

// Snapshot is a snapshot boundary.
type Snapshot struct {
	Kind       SnapshotKind
	Start, End int64  // Ordered only
	Source     Source // Ordered only
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Mutation is the new value of a key.
type Mutation struct {
	Offset    int64
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []Header
	InOSO     bool // inside an OSO snapshot: not yet a consistent point
}

// Deletion is the deletion (tombstone) of a key.
type Deletion struct {
	Offset    int64
	Timestamp int64
	Key       []byte
	InOSO     bool
}

// ResetCause says why the state derived from the partition must be dropped.
type ResetCause int

const (
	// TopicRecreated: the topic was deleted and created again.
	TopicRecreated ResetCause = iota + 1
	// HistoryPurged: the records after the checkpoint were purged.
	HistoryPurged
	// TombstonesPurged: compaction removed a tombstone the state has not seen.
	TombstonesPurged
	// Overtaken: a purge overtook the stream (stream_end{ROLLBACK}).
	Overtaken
	// OSOAborted: an OSO snapshot that started from nothing failed after
	// delivering items; a re-sent snapshot could not retract them.
	OSOAborted
)

func (c ResetCause) String() string {
	switch c {
	case TopicRecreated:
		return "TopicRecreated"
	case HistoryPurged:
		return "HistoryPurged"
	case TombstonesPurged:
		return "TombstonesPurged"
	case Overtaken:
		return "Overtaken"
	case OSOAborted:
		return "OSOAborted"
	}
	return fmt.Sprintf("ResetCause(%d)", int(c))
}

// Reset asks the application to drop all state derived from the partition;
// the stream then restarts from offset 0.
type Reset struct {
	Cause      ResetCause
	OldTopicID string
}

// Handler receives a stream's events, one at a time, on Run's goroutine.
// An error stops Run, which returns it; the checkpoint does not move past
// the event.
type Handler interface {
	OnSnapshot(ctx context.Context, s Snapshot) error
	OnMutation(ctx context.Context, m Mutation) error
	OnDeletion(ctx context.Context, d Deletion) error
	// OnReset: drop ALL state derived from this partition.
	OnReset(ctx context.Context, r Reset) error
	// OnCheckpoint is called at consistent points worth persisting: when an
	// ordered snapshot closes, at OSO END, at stream_end{OK} and after a
	// reset. Persist the state and c together.
	OnCheckpoint(ctx context.Context, c Checkpoint) error
}

// OSOMode is the oso_mode the library asks for.
type OSOMode int

const (
	// OSOWithOffsetAdvanced (the zero value): OSO snapshots end with
	// offset_advanced{E-1}, so the resume point after them is exact.
	OSOWithOffsetAdvanced OSOMode = iota
	// OSOOn: OSO snapshots without offset_advanced.
	OSOOn
	// OSOOff: ordered snapshots only.
	OSOOff
)

// Backoff is the reconnection schedule; zero fields take the defaults of
// package backoff (100 ms, ×2, ± 20 %), except Max, which is 10 s here.
type Backoff = backoff.Backoff

// defaultMaxBackoff caps reconnection delays when Backoff.Max is 0.
const defaultMaxBackoff = 10 * time.Second

// Config configures a Stream.
type Config struct {
	Topic     string
	Partition int32
	KeyPrefix []byte
	OSO       OSOMode     // zero value = OSOWithOffsetAdvanced
	EndOffset *int64      // nil = never ends
	From      *Checkpoint // nil = fresh start from offset 0
	Backoff   Backoff     // zero = 100 ms, ×2, max 10 s, ± 20 % jitter
}

// ErrTopicDeleted is returned by Run when the server ends the stream with
// stream_end{TOPIC_DELETED}.
var ErrTopicDeleted = errors.New("changestream: topic deleted")

// ProtocolError is returned by Run when the server broke the stream's
// grammar; the checkpoint did not move.
type ProtocolError struct {
	Event string // the offending event
	Rule  string // what it broke
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("changestream: protocol violation: %s: %s", e.Event, e.Rule)
}
