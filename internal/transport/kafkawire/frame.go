package kafkawire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// errFrame is a malformed or oversized frame: the connection is closed.
var errFrame = errors.New("malformed kafka frame")

// readFrame reads one size-prefixed frame of at most max bytes. The body is
// read incrementally into a buffer that grows with what actually arrives,
// so a lying length allocates at most about twice the bytes received, never
// the length claimed.
func readFrame(r io.Reader, buf *bytes.Buffer, max int32) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 8 { // key, version, correlation id at least
		return nil, fmt.Errorf("%w: frame size %d", errFrame, n)
	}
	if n > max {
		return nil, fmt.Errorf("%w: frame size %d exceeds --kafka-max-request-bytes %d", errFrame, n, max)
	}
	buf.Reset()
	got, err := io.CopyN(buf, r, int64(n))
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: %d of %d bytes: %w", errFrame, got, n, err)
	}
	return buf.Bytes(), nil
}

// header is a request header (v1, or v2 for flexible requests).
type header struct {
	key, version  int16
	correlationID int32
	clientID      *string
}

// parseHeader reads the request header. It returns the request, typed for
// key and version, and the body that follows the header. An unknown key is
// an error; the version is checked by the caller against the handler table.
func parseHeader(frame []byte) (header, kmsg.Request, []byte, error) {
	var h header
	b := kbin.Reader{Src: frame}
	h.key = b.Int16()
	h.version = b.Int16()
	h.correlationID = b.Int32()
	h.clientID = b.NullableString()
	if err := b.Complete(); err != nil {
		return h, nil, nil, fmt.Errorf("%w: header: %w", errFrame, err)
	}
	req := kmsg.RequestForKey(h.key)
	if req == nil {
		return h, nil, nil, fmt.Errorf("%w: unknown api key %d", errFrame, h.key)
	}
	req.SetVersion(h.version)
	if req.IsFlexible() {
		kmsg.SkipTags(&b)
		if err := b.Complete(); err != nil {
			return h, nil, nil, fmt.Errorf("%w: header tags: %w", errFrame, err)
		}
	}
	return h, req, b.Src, nil
}

// appendResponse encodes a response frame: size, correlation id, the
// response header's empty tag section when the response is flexible (never
// for ApiVersions, whose response header is always v0), and the body.
func appendResponse(dst []byte, correlationID int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(correlationID))
	if resp.IsFlexible() && resp.Key() != 18 {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}
