package grpcapi

// ChangeStreamService behaviour (docs/change-streams.md):
//   - StreamChanges needs READ on the topic (TOPIC_AUTHORIZATION_FAILED
//     before anything else, whether the topic exists or not), and keeps
//     needing it: with --authorizer acl it is checked again before every
//     message, and a stream whose READ was revoked ends with
//     TOPIC_AUTHORIZATION_FAILED without sending the events it held.
//   - StreamChanges validates in this order (INVALID_REQUEST,
//     UNKNOWN_TOPIC_OR_PARTITION, ROLLBACK_REQUIRED for a re-created topic,
//     OFFSET_OUT_OF_RANGE, ROLLBACK_REQUIRED for purged history) before any
//     event; more calls than --max-change-streams get
//     THROTTLING_QUOTA_EXCEEDED and calls after shutdown UNAVAILABLE.
//   - Then it sends the events of internal/changestream in order, several
//     per StreamChangesResponse: a message holds at most maxEventsPerMessage
//     events and maxMessageBytes encoded (one larger event alone), and goes
//     out when full or when the stream flushes (before it waits for the
//     partition, before it scans for a snapshot's first match, after
//     stream_end). Each Send blocks on gRPC flow control, which is the
//     back-pressure.
//   - The call completes with status OK after stream_end; DATA_LOSS on a
//     checksum failure, CANCELLED when the client cancels, INTERNAL otherwise.

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/changestream"
)

// ChangeStreamService implements sharelogv1.ChangeStreamServiceServer over a
// changestream.Manager.
type ChangeStreamService struct {
	sharelogv1.UnsafeChangeStreamServiceServer // compile error when an RPC is added

	streams *changestream.Manager
	guard   *authz.Guard
}

// NewChangeStreamService returns the ChangeStreamService handlers, checking
// permissions with guard (nil = none).
func NewChangeStreamService(streams *changestream.Manager, guard *authz.Guard) *ChangeStreamService {
	return &ChangeStreamService{streams: streams, guard: guard}
}

func (s *ChangeStreamService) StreamChanges(req *sharelogv1.StreamChangesRequest, stream sharelogv1.ChangeStreamService_StreamChangesServer) error {
	ctx := stream.Context()
	if err := s.guard.Require(ctx, authz.Read, authz.Topic, req.GetTopic()); err != nil {
		return err
	}
	dreq := changestream.Request{
		Topic:       req.GetTopic(),
		Partition:   req.GetPartition(),
		StartOffset: req.GetStartOffset(),
		EndOffset:   req.EndOffset,
		TopicID:     req.TopicId,
		KeyPrefix:   req.GetKeyPrefix(),
		OSO:         changestream.OSOMode(req.GetOsoMode()), // the domain rejects values it does not know
		// Headers go out once the request is valid, so a client (and the
		// gateway, which waits for them) knows the stream is positioned.
		Started: func() { _ = stream.SendHeader(metadata.MD{}) },
	}
	text, err := textEncoding(req.GetEncoding())
	if err != nil {
		return err
	}
	b := &eventBatcher{send: stream.Send, text: text}
	if s.guard.Enforcing() {
		// A stream may stay open for days: a READ revoked meanwhile ends
		// it before its next message, as it would refuse the next call.
		topic := req.GetTopic()
		b.mayRead = func() error { return s.guard.Require(ctx, authz.Read, authz.Topic, topic) }
	}
	return s.streams.Stream(ctx, dreq, b)
}

// Bounds of one StreamChangesResponse (documented in change_stream.proto):
// a read batch's worth of events.
const (
	maxEventsPerMessage = 256
	maxMessageBytes     = 1 << 20
)

// eventOverhead bounds the encoded bytes of an event beside its key, value
// and headers: the repeated field's tag and length (6), the oneof field's
// tag and length (6), offset and timestamp (11 each), key and value tags
// and lengths (6 each) = 46; a marker, OSO phase, offset_advanced or
// stream_end is smaller. headerOverhead bounds a header's beside its key
// and value: its tag and length and those of its two fields (18).
const (
	eventOverhead  = 64
	headerOverhead = 24
)

// eventBatcher is the changestream.Sender of a call: it converts each
// event at once (the record it refers to stays valid until the next Flush)
// and sends a message when the next event would not fit or at Flush.
type eventBatcher struct {
	send func(*sharelogv1.StreamChangesResponse) error
	// text: keys and values that are valid UTF-8 go out in key_text and
	// value_text (encoding "text").
	text bool
	// mayRead, if set, is asked before each message goes out; its error
	// (the caller may no longer READ the topic) ends the stream instead.
	mayRead func() error
	resp    sharelogv1.StreamChangesResponse // reused: Send marshals at once
	bytes   int                              // bound of resp's encoded size
}

func (b *eventBatcher) Send(ev *changestream.Event) error {
	n := eventSize(ev)
	if k := len(b.resp.Events); k > 0 && (k >= maxEventsPerMessage || b.bytes+n > maxMessageBytes) {
		if err := b.Flush(); err != nil {
			return err
		}
	}
	pe := eventToProto(ev)
	if b.text {
		eventAsText(pe)
	}
	b.resp.Events = append(b.resp.Events, pe)
	b.bytes += n
	return nil
}

func (b *eventBatcher) Flush() error {
	if len(b.resp.Events) == 0 {
		return nil
	}
	var err error
	if b.mayRead != nil {
		err = b.mayRead()
	}
	if err == nil {
		err = b.send(&b.resp)
	}
	clear(b.resp.Events) // drop the references to the records sent
	b.resp.Events, b.bytes = b.resp.Events[:0], 0
	return err
}

// eventSize is an upper bound of ev's encoded size in a message.
func eventSize(ev *changestream.Event) int {
	n := eventOverhead
	if r := ev.Record; r != nil && (ev.Kind == changestream.EventMutation || ev.Kind == changestream.EventDeletion) {
		n += len(r.Key)
		if ev.Kind == changestream.EventMutation {
			n += len(r.Value)
			for _, h := range r.Headers {
				n += len(h.Key) + len(h.Value) + headerOverhead
			}
		}
	}
	return n
}

// eventToProto converts ev (a mutation's key, value and headers are
// shared with its record, not copied).
func eventToProto(ev *changestream.Event) *sharelogv1.ChangeEvent {
	switch ev.Kind {
	case changestream.EventMarker:
		return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_SnapshotMarker{SnapshotMarker: &sharelogv1.SnapshotMarker{
			StartOffset: ev.Start, EndOffset: ev.End, Source: sharelogv1.SnapshotSource(ev.Source),
		}}}
	case changestream.EventOSOStart, changestream.EventOSOEnd:
		phase := sharelogv1.OsoPhase_OSO_PHASE_START
		if ev.Kind == changestream.EventOSOEnd {
			phase = sharelogv1.OsoPhase_OSO_PHASE_END
		}
		return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_OsoSnapshot{OsoSnapshot: &sharelogv1.OsoSnapshot{Phase: phase}}}
	case changestream.EventMutation:
		r := ev.Record
		return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_Mutation{Mutation: &sharelogv1.Mutation{
			Offset: r.Offset, Timestamp: r.Timestamp, Key: present(r.Key), Value: present(r.Value), Headers: headersToProto(r.Headers),
		}}}
	case changestream.EventDeletion:
		r := ev.Record
		return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_Deletion{Deletion: &sharelogv1.Deletion{
			Offset: r.Offset, Timestamp: r.Timestamp, Key: present(r.Key),
		}}}
	case changestream.EventOffsetAdvanced:
		return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_OffsetAdvanced{OffsetAdvanced: &sharelogv1.OffsetAdvanced{Offset: ev.Offset}}}
	case changestream.EventEnd:
		return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_StreamEnd{StreamEnd: &sharelogv1.StreamEnd{Reason: sharelogv1.StreamEndReason(ev.Reason)}}}
	}
	panic(fmt.Sprintf("changestream event of unknown kind %d", ev.Kind))
}

// present is b, or an empty slice for nil: a mutation's key and value and a
// deletion's key are always there (the fields are optional only so that
// encoding "text" can leave them unset).
func present(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// eventAsText moves a mutation's or deletion's key and value that are valid
// UTF-8 to key_text and value_text (encoding "text").
func eventAsText(pe *sharelogv1.ChangeEvent) {
	switch e := pe.GetEvent().(type) {
	case *sharelogv1.ChangeEvent_Mutation:
		m := e.Mutation
		if utf8.Valid(m.Key) {
			t := string(m.Key)
			m.KeyText, m.Key = &t, nil
		}
		if utf8.Valid(m.Value) {
			t := string(m.Value)
			m.ValueText, m.Value = &t, nil
		}
	case *sharelogv1.ChangeEvent_Deletion:
		d := e.Deletion
		if utf8.Valid(d.Key) {
			t := string(d.Key)
			d.KeyText, d.Key = &t, nil
		}
	}
}

// ChangeEventFromProto is eventToProto reversed: a change stream's event
// as another instance sent it, for the stream relayed from the owner of
// its partition (changestream.Peers). Converting it back gives the same
// message.
func ChangeEventFromProto(pe *sharelogv1.ChangeEvent) (*changestream.Event, error) {
	switch e := pe.GetEvent().(type) {
	case *sharelogv1.ChangeEvent_SnapshotMarker:
		m := e.SnapshotMarker
		return &changestream.Event{Kind: changestream.EventMarker, Start: m.GetStartOffset(), End: m.GetEndOffset(),
			Source: changestream.Source(m.GetSource())}, nil
	case *sharelogv1.ChangeEvent_OsoSnapshot:
		if e.OsoSnapshot.GetPhase() == sharelogv1.OsoPhase_OSO_PHASE_END {
			return &changestream.Event{Kind: changestream.EventOSOEnd}, nil
		}
		return &changestream.Event{Kind: changestream.EventOSOStart}, nil
	case *sharelogv1.ChangeEvent_Mutation:
		m := e.Mutation
		return &changestream.Event{Kind: changestream.EventMutation, Record: &broker.Record{Offset: m.GetOffset(),
			Timestamp: m.GetTimestamp(), Key: m.GetKey(), Value: m.GetValue(), Headers: headersFromProto(m.GetHeaders())}}, nil
	case *sharelogv1.ChangeEvent_Deletion:
		d := e.Deletion
		return &changestream.Event{Kind: changestream.EventDeletion, Record: &broker.Record{Offset: d.GetOffset(),
			Timestamp: d.GetTimestamp(), Key: d.GetKey()}}, nil
	case *sharelogv1.ChangeEvent_OffsetAdvanced:
		return &changestream.Event{Kind: changestream.EventOffsetAdvanced, Offset: e.OffsetAdvanced.GetOffset()}, nil
	case *sharelogv1.ChangeEvent_StreamEnd:
		return &changestream.Event{Kind: changestream.EventEnd, Reason: changestream.EndReason(e.StreamEnd.GetReason())}, nil
	}
	return nil, apierr.New(apierr.Internal, "the owner sent a change event of a kind this instance does not know")
}
