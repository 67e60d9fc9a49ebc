package edge

import (
	"sync"

	"github.com/sharelog/sharelog/apierr"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec wrapped below
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// requestCodec makes a request body that does not decode an INVALID_REQUEST
// (InvalidArgument with ErrorInfo), not INTERNAL. grpc-go turns any codec
// Unmarshal error into codes.Internal before an interceptor runs, so this
// codec (installed on the server only, with grpc.ForceServerCodecV2)
// reports success, resets the message and remembers the failure keyed by
// the message; the gate interceptors take it back right after decoding —
// the unary interceptor for the request it is handed, the stream wrapper
// after each RecvMsg — and fail the call with INVALID_REQUEST. Every
// message decoded by the server passes one of them, so nothing is left in
// the map.
type requestCodec struct {
	encoding.CodecV2
	failed sync.Map // proto.Message (a pointer) → decode error
}

func newRequestCodec() *requestCodec {
	return &requestCodec{CodecV2: encoding.GetCodecV2("proto")}
}

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	proto.Reset(m)
	c.failed.Store(m, err)
	return nil
}

// takeFailure returns (and forgets) the decode failure of m, as an
// INVALID_REQUEST error, or nil if m decoded.
func (c *requestCodec) takeFailure(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	v, ok := c.failed.LoadAndDelete(pm)
	if !ok {
		return nil
	}
	return apierr.Invalid("the request body does not decode as %s: %v", pm.ProtoReflect().Descriptor().FullName(), v)
}
