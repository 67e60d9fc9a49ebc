package service

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The ChangeStreamService contract is complete in the protos; its behaviour
// lands with its own issue. Until then it answers UNIMPLEMENTED saying so.

// ChangeStreamService answers UNIMPLEMENTED until change streams land.
type ChangeStreamService struct {
	sharelogv1.UnimplementedChangeStreamServiceServer
}

func (ChangeStreamService) StreamChanges(*sharelogv1.StreamChangesRequest, sharelogv1.ChangeStreamService_StreamChangesServer) error {
	return status.Error(codes.Unimplemented, "change streams are not implemented in this version of sharelog yet")
}
