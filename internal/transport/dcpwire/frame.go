package dcpwire

// The memcached binary framing (docs/dcp.md "Framing"). Every packet is a
// 24-byte header and a body of extras, key and value (in that order), with
// the alternative ("flexible") magics carrying framing extras before the
// extras. The opcodes, status codes and HELLO feature numbers are those of
// gocbcore's memd package; the reader and writer are this file's: memd's
// Conn.ReadPacket allocates whatever body length a peer claims and slices
// the body by the header's lengths without checking them, which a server
// cannot accept from untrusted peers, and its WritePacket makes one write
// call per packet, which a backfill of millions of mutations cannot afford.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/couchbase/gocbcore/v10/memd"
)

// Magics of the binary protocol.
const (
	magicReq    = 0x80 // a request (client -> server, and the producer's DCP messages)
	magicRes    = 0x81 // a response
	magicAltReq = 0x08 // a request with framing extras
	magicAltRes = 0x18 // a response with framing extras
)

// headerLen is the fixed header of every packet.
const headerLen = 24

// DefaultMaxFrameBytes caps the body of a request (--dcp-max-request-bytes
// is not a flag: a DCP consumer's requests are small, the largest being a
// stream request with a JSON filter or a SASL message).
const DefaultMaxFrameBytes = 1 << 20

// errFrame is a malformed or oversized packet: the connection is closed.
var errFrame = errors.New("malformed memcached packet")

// packet is one decoded request. Extras, Key, Value and Frames alias the
// reader's buffer and are valid until the next read.
type packet struct {
	magic    byte
	opcode   memd.CmdCode
	datatype byte
	vbucket  uint16 // requests: the vBucket; responses: the status
	opaque   uint32
	cas      uint64
	frames   []byte // framing extras (alternative magics only)
	extras   []byte
	key      []byte
	value    []byte
}

// isRequest reports whether p is a request (as opposed to a response to
// one of the server's own requests, such as a DCP NOOP).
func (p *packet) isRequest() bool { return p.magic == magicReq || p.magic == magicAltReq }

// readPacket reads one packet of at most max body bytes into buf (grown as
// needed, returned for reuse). A length that lies about what follows fails
// with errFrame before any allocation beyond max.
func readPacket(r *bufio.Reader, buf []byte, max uint32) (packet, []byte, error) {
	var p packet
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return p, buf, err
	}
	p, bodyLen, err := parseHeader(h[:], max)
	if err != nil {
		return p, buf, err
	}
	if cap(buf) < int(bodyLen) {
		buf = make([]byte, bodyLen)
	}
	body := buf[:bodyLen]
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return p, buf, fmt.Errorf("%w: body of %d bytes: %w", errFrame, bodyLen, err)
	}
	if err := p.split(h[:], body); err != nil {
		return p, buf, err
	}
	return p, buf, nil
}

// parseHeader checks the fixed header and returns the body length.
func parseHeader(h []byte, max uint32) (packet, uint32, error) {
	p := packet{
		magic:    h[0],
		opcode:   memd.CmdCode(h[1]),
		datatype: h[5],
		vbucket:  binary.BigEndian.Uint16(h[6:]),
		opaque:   binary.BigEndian.Uint32(h[12:]),
		cas:      binary.BigEndian.Uint64(h[16:]),
	}
	switch p.magic {
	case magicReq, magicRes, magicAltReq, magicAltRes:
	default:
		return p, 0, fmt.Errorf("%w: unknown magic 0x%02x", errFrame, p.magic)
	}
	bodyLen := binary.BigEndian.Uint32(h[8:])
	if bodyLen > max {
		return p, 0, fmt.Errorf("%w: body of %d bytes exceeds the limit of %d", errFrame, bodyLen, max)
	}
	return p, bodyLen, nil
}

// split cuts body into framing extras, extras, key and value by the
// header's lengths, which must add up to at most the body.
func (p *packet) split(h, body []byte) error {
	extLen := int(h[4])
	keyLen := int(binary.BigEndian.Uint16(h[2:]))
	framesLen := 0
	if p.magic == magicAltReq || p.magic == magicAltRes {
		framesLen, keyLen = int(h[2]), int(h[3])
	}
	if framesLen+extLen+keyLen > len(body) {
		return fmt.Errorf("%w: framing extras %d + extras %d + key %d exceed the body of %d bytes",
			errFrame, framesLen, extLen, keyLen, len(body))
	}
	p.frames = body[:framesLen]
	p.extras = body[framesLen : framesLen+extLen]
	p.key = body[framesLen+extLen : framesLen+extLen+keyLen]
	p.value = body[framesLen+extLen+keyLen:]
	return checkFrames(p.frames)
}

// checkFrames checks that framing extras are a sequence of well-formed
// frame infos (an id and length nibble, each escaped by 15 plus one byte).
func checkFrames(b []byte) error {
	for len(b) > 0 {
		_, _, rest, err := nextFrame(b)
		if err != nil {
			return err
		}
		b = rest
	}
	return nil
}

// nextFrame decodes the first frame info of b.
func nextFrame(b []byte) (id int, data, rest []byte, err error) {
	hdr := b[0]
	b = b[1:]
	id, n := int(hdr>>4), int(hdr&0x0f)
	if id == 15 {
		if len(b) < 1 {
			return 0, nil, nil, fmt.Errorf("%w: truncated frame id", errFrame)
		}
		id, b = 15+int(b[0]), b[1:]
	}
	if n == 15 {
		if len(b) < 1 {
			return 0, nil, nil, fmt.Errorf("%w: truncated frame length", errFrame)
		}
		n, b = 15+int(b[0]), b[1:]
	}
	if n > len(b) {
		return 0, nil, nil, fmt.Errorf("%w: frame of %d bytes, %d left", errFrame, n, len(b))
	}
	return id, b[:n], b[n:], nil
}

// streamIDFrame is the request frame info that names a DCP stream
// (enable_stream_id).
const streamIDFrame = 2

// streamID returns the stream id a request's framing extras carry, if any.
func (p *packet) streamID() (uint16, bool) {
	for b := p.frames; len(b) > 0; {
		id, data, rest, err := nextFrame(b)
		if err != nil {
			return 0, false
		}
		if id == streamIDFrame && len(data) == 2 {
			return binary.BigEndian.Uint16(data), true
		}
		b = rest
	}
	return 0, false
}

// header is what appendHeader writes: the fields of the fixed header that
// are not lengths.
type header struct {
	magic    byte
	opcode   memd.CmdCode
	datatype byte
	vbucket  uint16 // or status
	opaque   uint32
	cas      uint64
	// sid, when hasSID, is sent as a stream-id frame info (the magic
	// becomes the alternative one).
	sid    uint16
	hasSID bool
}

// appendPacket appends a whole packet: header, then extras, key, value.
func appendPacket(out []byte, h header, extras, key, value []byte) []byte {
	out = appendHeader(out, h, len(extras), len(key), len(value))
	out = append(out, extras...)
	out = append(out, key...)
	return append(out, value...)
}

// appendHeader appends the 24-byte header (and the stream-id frame info
// when h has one) of a packet whose body sizes are given.
func appendHeader(out []byte, h header, extLen, keyLen, valLen int) []byte {
	magic := h.magic
	framesLen := 0
	if h.hasSID {
		framesLen = 3
		if magic == magicReq {
			magic = magicAltReq
		} else {
			magic = magicAltRes
		}
	}
	out = append(out, magic, byte(h.opcode))
	if framesLen > 0 {
		out = append(out, byte(framesLen), byte(keyLen))
	} else {
		out = binary.BigEndian.AppendUint16(out, uint16(keyLen))
	}
	out = append(out, byte(extLen), h.datatype)
	out = binary.BigEndian.AppendUint16(out, h.vbucket)
	out = binary.BigEndian.AppendUint32(out, uint32(framesLen+extLen+keyLen+valLen))
	out = binary.BigEndian.AppendUint32(out, h.opaque)
	out = binary.BigEndian.AppendUint64(out, h.cas)
	if framesLen > 0 {
		out = append(out, streamIDFrame<<4|2)
		out = binary.BigEndian.AppendUint16(out, h.sid)
	}
	return out
}

// response is the header of the response to req with status.
func response(req *packet, status memd.StatusCode) header {
	return header{magic: magicRes, opcode: req.opcode, vbucket: uint16(status), opaque: req.opaque}
}
