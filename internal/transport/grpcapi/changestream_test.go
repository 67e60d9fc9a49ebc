package grpcapi

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// sentMessages collects what an eventBatcher sends: each message's size
// and its events' offsets (-1 for events without one).
type sentMessages struct {
	sizes   []int
	offsets [][]int64
}

func (m *sentMessages) send(resp *sharelogv1.StreamChangesResponse) error {
	m.sizes = append(m.sizes, proto.Size(resp))
	var offs []int64
	for _, ev := range resp.GetEvents() {
		switch {
		case ev.GetMutation() != nil:
			offs = append(offs, ev.GetMutation().GetOffset())
		case ev.GetDeletion() != nil:
			offs = append(offs, ev.GetDeletion().GetOffset())
		default:
			offs = append(offs, -1)
		}
	}
	m.offsets = append(m.offsets, offs)
	return nil
}

func mutation(off int64, value []byte, headers ...logstore.Header) *changestream.Event {
	return &changestream.Event{Kind: changestream.EventMutation,
		Record: &logstore.Record{Offset: off, Timestamp: 1 << 40, Key: []byte("key"), Value: value, Headers: headers}}
}

func TestEventBatcherBounds(t *testing.T) {
	kib := func(n int) []byte { return bytes.Repeat([]byte("x"), n<<10) }
	tests := []struct {
		name   string
		events []*changestream.Event
		counts []int // events per message
	}{
		{
			name: "at most 256 events a message",
			events: func() (evs []*changestream.Event) {
				evs = append(evs, &changestream.Event{Kind: changestream.EventMarker, Start: 0, End: 599, Source: changestream.SourceDisk})
				for i := range int64(600) {
					evs = append(evs, mutation(i, []byte("v")))
				}
				return append(evs, &changestream.Event{Kind: changestream.EventEnd, Reason: changestream.EndOK})
			}(),
			counts: []int{256, 256, 90},
		},
		{
			name: "at most 1 MiB a message",
			events: func() (evs []*changestream.Event) {
				for i := range int64(10) {
					evs = append(evs, mutation(i, kib(300), logstore.Header{Key: "h", Value: kib(1)}))
				}
				return evs
			}(),
			counts: []int{3, 3, 3, 1},
		},
		{
			name:   "a larger event alone",
			events: []*changestream.Event{mutation(0, kib(10)), mutation(1, kib(2048)), mutation(2, kib(10)), mutation(3, kib(10))},
			counts: []int{1, 1, 2},
		},
		{
			name: "events that just fit",
			events: func() (evs []*changestream.Event) {
				// Four events whose bounds sum to exactly 1 MiB.
				v := make([]byte, maxMessageBytes/4-eventOverhead-len("key"))
				for i := range int64(5) {
					evs = append(evs, mutation(i, v))
				}
				return evs
			}(),
			counts: []int{4, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent sentMessages
			b := &eventBatcher{send: sent.send}
			for _, ev := range tt.events {
				require.NoError(t, b.Send(ev))
			}
			require.NoError(t, b.Flush())
			require.NoError(t, b.Flush(), "a Flush with nothing held sends nothing")
			var counts []int
			var all []int64
			for i, offs := range sent.offsets {
				counts = append(counts, len(offs))
				all = append(all, offs...)
				if len(offs) > 1 {
					assert.LessOrEqual(t, sent.sizes[i], maxMessageBytes, "message %d", i)
				}
				assert.LessOrEqual(t, len(offs), maxEventsPerMessage, "message %d", i)
			}
			assert.Equal(t, tt.counts, counts)
			var want []int64
			for _, ev := range tt.events {
				if ev.Record != nil {
					want = append(want, ev.Record.Offset)
				} else {
					want = append(want, -1)
				}
			}
			assert.Equal(t, want, all, "every event once, in order")
		})
	}
}

// eventSize never underestimates: the bound of each kind of event, at the
// largest offsets and timestamps, covers its encoding inside a message.
func TestEventSizeBound(t *testing.T) {
	const big = int64(math.MaxInt64)
	rec := &logstore.Record{Offset: big, Timestamp: -1, Key: bytes.Repeat([]byte("k"), 300), Value: bytes.Repeat([]byte("v"), 70000),
		Headers: []logstore.Header{{Key: "a", Value: bytes.Repeat([]byte("h"), 200)}, {Key: "", Value: nil}}}
	for _, ev := range []*changestream.Event{
		{Kind: changestream.EventMarker, Start: big, End: big, Source: changestream.SourceMemory},
		{Kind: changestream.EventOSOStart},
		{Kind: changestream.EventOSOEnd},
		{Kind: changestream.EventMutation, Record: rec},
		{Kind: changestream.EventDeletion, Record: &logstore.Record{Offset: big, Timestamp: -1, Key: rec.Key}},
		{Kind: changestream.EventOffsetAdvanced, Offset: big},
		{Kind: changestream.EventEnd, Reason: changestream.EndShutdown},
	} {
		one := proto.Size(&sharelogv1.StreamChangesResponse{Events: []*sharelogv1.ChangeEvent{eventToProto(ev)}})
		assert.LessOrEqual(t, one, eventSize(ev), ev.String())
	}
}

// A failed send is returned, by Send when it had to flush, and by Flush.
func TestEventBatcherSendError(t *testing.T) {
	boom := errors.New("broken transport")
	b := &eventBatcher{send: func(*sharelogv1.StreamChangesResponse) error { return boom }}
	for i := range int64(maxEventsPerMessage) {
		require.NoError(t, b.Send(mutation(i, nil)), "held, not sent yet")
	}
	assert.ErrorIs(t, b.Send(mutation(256, nil)), boom)

	b = &eventBatcher{send: func(*sharelogv1.StreamChangesResponse) error { return boom }}
	require.NoError(t, b.Send(mutation(0, nil)))
	assert.ErrorIs(t, b.Flush(), boom)
}

// TestChangeEventRoundTrip: an event relayed from a partition's owner
// (ChangeEventFromProto, then eventToProto) is the message the owner sent.
func TestChangeEventRoundTrip(t *testing.T) {
	one := int64(1)
	events := []*sharelogv1.ChangeEvent{
		{Event: &sharelogv1.ChangeEvent_SnapshotMarker{SnapshotMarker: &sharelogv1.SnapshotMarker{StartOffset: one, EndOffset: 9,
			Source: sharelogv1.SnapshotSource_SNAPSHOT_SOURCE_MEMORY}}},
		{Event: &sharelogv1.ChangeEvent_OsoSnapshot{OsoSnapshot: &sharelogv1.OsoSnapshot{Phase: sharelogv1.OsoPhase_OSO_PHASE_START}}},
		{Event: &sharelogv1.ChangeEvent_OsoSnapshot{OsoSnapshot: &sharelogv1.OsoSnapshot{Phase: sharelogv1.OsoPhase_OSO_PHASE_END}}},
		{Event: &sharelogv1.ChangeEvent_Mutation{Mutation: &sharelogv1.Mutation{Offset: 3, Timestamp: 77, Key: []byte("k"), Value: []byte("v"),
			Headers: []*sharelogv1.RecordHeader{{Key: "h", Value: []byte("x")}}}}},
		// A mutation's key and value are optional fields (so that encoding "text" can leave
		// them unset) that the server always sets, even empty.
		{Event: &sharelogv1.ChangeEvent_Mutation{Mutation: &sharelogv1.Mutation{Offset: 4, Key: []byte("empty value"), Value: []byte{}}}},
		{Event: &sharelogv1.ChangeEvent_Deletion{Deletion: &sharelogv1.Deletion{Offset: 5, Timestamp: 78, Key: []byte("k")}}},
		{Event: &sharelogv1.ChangeEvent_OffsetAdvanced{OffsetAdvanced: &sharelogv1.OffsetAdvanced{Offset: 6}}},
	}
	for r := range sharelogv1.StreamEndReason_name {
		events = append(events, &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_StreamEnd{StreamEnd: &sharelogv1.StreamEnd{
			Reason: sharelogv1.StreamEndReason(r)}}})
	}
	for _, pe := range events {
		ev, err := ChangeEventFromProto(pe)
		require.NoError(t, err, "%v", pe)
		back := eventToProto(ev)
		want, err := proto.Marshal(pe)
		require.NoError(t, err)
		got, err := proto.Marshal(back)
		require.NoError(t, err)
		assert.Equal(t, want, got, "%v", pe)
	}
	_, err := ChangeEventFromProto(&sharelogv1.ChangeEvent{})
	assert.Error(t, err, "an event of no kind")

	// A peer of the version before sent an empty value as no field at all (the fields had
	// no presence then): relayed, it is the same empty value.
	ev, err := ChangeEventFromProto(&sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_Mutation{Mutation: &sharelogv1.Mutation{Offset: 4, Key: []byte("k")}}})
	require.NoError(t, err)
	back := eventToProto(ev).GetMutation()
	assert.NotNil(t, back.Value, "present")
	assert.Empty(t, back.Value)
}
