package service

// ChangeStreamService behaviour (docs/change-streams.md):
//   - StreamChanges needs READ on the topic (TOPIC_AUTHORIZATION_FAILED
//     before anything else, whether the topic exists or not).
//   - StreamChanges validates in this order (INVALID_REQUEST,
//     UNKNOWN_TOPIC_OR_PARTITION, ROLLBACK_REQUIRED for a re-created topic,
//     OFFSET_OUT_OF_RANGE, ROLLBACK_REQUIRED for purged history) before any
//     event; more calls than --max-change-streams get
//     THROTTLING_QUOTA_EXCEEDED and calls after shutdown UNAVAILABLE.
//   - Then it sends the events of internal/changestream one by one: each
//     Send blocks on gRPC flow control, which is the back-pressure.
//   - The call completes with status OK after stream_end; DATA_LOSS on a
//     checksum failure, CANCELLED when the client cancels, INTERNAL otherwise.

import (
	"google.golang.org/grpc/metadata"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/changestream"
)

// ChangeStreamService implements sharelogv1.ChangeStreamServiceServer over a
// changestream.Manager.
type ChangeStreamService struct {
	sharelogv1.UnsafeChangeStreamServiceServer // compile error when an RPC is added

	streams *changestream.Manager
	guard   *Guard
}

// NewChangeStreamService returns the ChangeStreamService handlers, checking
// permissions with guard (nil = none).
func NewChangeStreamService(streams *changestream.Manager, guard *Guard) *ChangeStreamService {
	return &ChangeStreamService{streams: streams, guard: guard}
}

func (s *ChangeStreamService) StreamChanges(req *sharelogv1.StreamChangesRequest, stream sharelogv1.ChangeStreamService_StreamChangesServer) error {
	ctx := stream.Context()
	if err := s.guard.require(ctx, authz.Read, authz.Topic, req.GetTopic()); err != nil {
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
	var resp sharelogv1.StreamChangesResponse
	err := s.streams.Stream(ctx, dreq, func(ev *changestream.Event) error {
		eventToProto(ev, &resp)
		return stream.Send(&resp)
	})
	return err
}

// eventToProto fills resp with ev (resp is reused: Send marshals at once).
func eventToProto(ev *changestream.Event, resp *sharelogv1.StreamChangesResponse) {
	switch ev.Kind {
	case changestream.EventMarker:
		resp.Event = &sharelogv1.StreamChangesResponse_SnapshotMarker{SnapshotMarker: &sharelogv1.SnapshotMarker{
			StartOffset: ev.Start, EndOffset: ev.End, Source: sharelogv1.SnapshotSource(ev.Source),
		}}
	case changestream.EventOSOStart, changestream.EventOSOEnd:
		phase := sharelogv1.OsoPhase_OSO_PHASE_START
		if ev.Kind == changestream.EventOSOEnd {
			phase = sharelogv1.OsoPhase_OSO_PHASE_END
		}
		resp.Event = &sharelogv1.StreamChangesResponse_OsoSnapshot{OsoSnapshot: &sharelogv1.OsoSnapshot{Phase: phase}}
	case changestream.EventMutation:
		r := ev.Record
		resp.Event = &sharelogv1.StreamChangesResponse_Mutation{Mutation: &sharelogv1.Mutation{
			Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Headers: headersToProto(r.Headers),
		}}
	case changestream.EventDeletion:
		r := ev.Record
		resp.Event = &sharelogv1.StreamChangesResponse_Deletion{Deletion: &sharelogv1.Deletion{
			Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key,
		}}
	case changestream.EventOffsetAdvanced:
		resp.Event = &sharelogv1.StreamChangesResponse_OffsetAdvanced{OffsetAdvanced: &sharelogv1.OffsetAdvanced{Offset: ev.Offset}}
	case changestream.EventEnd:
		resp.Event = &sharelogv1.StreamChangesResponse_StreamEnd{StreamEnd: &sharelogv1.StreamEnd{Reason: sharelogv1.StreamEndReason(ev.Reason)}}
	}
}
