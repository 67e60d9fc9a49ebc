package changestream

import (
	"fmt"
	"strconv"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// OSOMode is the request's oso_mode; the values are those of the proto enum.
type OSOMode int32

const (
	OSOUnspecified        OSOMode = 0 // same as OSOOff
	OSOOff                OSOMode = 1
	OSOOn                 OSOMode = 2
	OSOWithOffsetAdvanced OSOMode = 3
)

func (m OSOMode) known() bool { return m >= OSOUnspecified && m <= OSOWithOffsetAdvanced }
func (m OSOMode) wantsOSO() bool {
	return m == OSOOn || m == OSOWithOffsetAdvanced
}

// Backfill is the --oso-backfill policy.
type Backfill string

const (
	BackfillAuto     Backfill = "auto"
	BackfillEnabled  Backfill = "enabled"
	BackfillDisabled Backfill = "disabled"
)

// Source says where an ordered snapshot was read from (informational).
type Source int32

const (
	SourceDisk   Source = 1
	SourceMemory Source = 2
)

// EndReason is a stream_end reason; the values are those of the proto enum.
type EndReason int32

const (
	EndOK           EndReason = 1
	EndRollback     EndReason = 2
	EndTopicDeleted EndReason = 3
	EndShutdown     EndReason = 4
)

func (r EndReason) String() string {
	switch r {
	case EndOK:
		return "OK"
	case EndRollback:
		return "ROLLBACK"
	case EndTopicDeleted:
		return "TOPIC_DELETED"
	case EndShutdown:
		return "SHUTDOWN"
	}
	return "EndReason(" + strconv.Itoa(int(r)) + ")"
}

// EventKind says which field of an Event is set.
type EventKind int

const (
	EventMarker         EventKind = iota + 1 // Start, End, Source
	EventOSOStart                            // no fields
	EventOSOEnd                              // no fields
	EventMutation                            // Record (with a value)
	EventDeletion                            // Record (a tombstone: no value; headers are not sent)
	EventOffsetAdvanced                      // Offset
	EventEnd                                 // Reason
)

// Event is one event of a stream. The Record of a mutation or deletion
// stays valid until the Sender's next Flush returns; the Event itself only
// during the Send call (the stream reuses it).
type Event struct {
	Kind       EventKind
	Start, End int64 // marker range, inclusive
	Source     Source
	Record     *logstore.Record
	Offset     int64
	Reason     EndReason
}

func (e *Event) String() string {
	switch e.Kind {
	case EventMarker:
		src := "DISK"
		if e.Source == SourceMemory {
			src = "MEMORY"
		}
		return fmt.Sprintf("marker(%d..%d, %s)", e.Start, e.End, src)
	case EventOSOStart:
		return "oso(START)"
	case EventOSOEnd:
		return "oso(END)"
	case EventMutation:
		return fmt.Sprintf("mut(%s@%d)", e.Record.Key, e.Record.Offset)
	case EventDeletion:
		return fmt.Sprintf("del(%s@%d)", e.Record.Key, e.Record.Offset)
	case EventOffsetAdvanced:
		return fmt.Sprintf("adv(%d)", e.Offset)
	case EventEnd:
		return fmt.Sprintf("end(%s)", e.Reason)
	}
	return fmt.Sprintf("Event(%d)", e.Kind)
}

// Sender receives a call's events in order. Send may hold events back to
// hand several to the transport at once (a message of events); Flush hands
// over every event held and blocks as a send does (flow control is the
// back-pressure). The stream calls Flush before anything that may take long
// or block without sending: before it waits for the partition to change,
// before it scans for the first match of the next snapshot, and after
// stream_end; so a held event is never delayed by a wait, only by the
// events that fill its message.
type Sender interface {
	Send(*Event) error
	Flush() error
}

// SendFunc is a Sender that hands over every event at once: Flush does
// nothing.
type SendFunc func(*Event) error

// Send implements Sender.
func (f SendFunc) Send(ev *Event) error { return f(ev) }

// Flush implements Sender.
func (SendFunc) Flush() error { return nil }

// Request is one StreamChanges call.
type Request struct {
	Topic       string
	Partition   int32
	StartOffset int64
	EndOffset   *int64 // exclusive; nil = never ends
	TopicID     *string
	KeyPrefix   []byte
	OSO         OSOMode
	// Started, if set, is called once the request passed validation, before
	// the first event (the service sends the response headers then).
	Started func()
}

// Rollback causes (metadata "cause" of ROLLBACK_REQUIRED).
const (
	CauseTopicRecreated   = "topic_recreated"
	CauseHistoryPurged    = "history_purged"
	CauseTombstonesPurged = "tombstones_purged"
)

func invalid(format string, args ...any) *apierr.Error {
	return apierr.Invalid(format, args...)
}
