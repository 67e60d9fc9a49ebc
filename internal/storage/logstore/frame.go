package logstore

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
)

// Record frames. The layout is described byte by byte in doc.go; in short:
//
//	u32 body length | u32 CRC32C(body) | body
//	body = u8 attrs | i64 offset | i64 timestamp | i32 key len (-1 = nil) | key |
//	       i32 value len (-1 = nil) | value | u32 header count |
//	       { u32 key len | key | i32 value len (-1 = nil) | value } ... |
//	       [ i64 producer id | i16 producer epoch | i32 sequence ]  (attrs bit 1)
//	attrs bit 2: transactional, bit 3: a transaction marker (both need bit 1)
//
// All integers are big-endian (lexically comparable in hex dumps, as Kafka's).
const (
	frameHeaderSize = 8                     // body length + CRC
	bodyFixedSize   = 1 + 8 + 8 + 4 + 4 + 4 // attrs, offset, timestamp, key len, value len, header count
	minFrameSize    = frameHeaderSize + bodyFixedSize
	tsFieldOffset   = frameHeaderSize + 1 + 8                             // timestamp position inside a frame
	offFieldOffset  = frameHeaderSize + 1                                 // offset position inside a frame
	attrBatchEnd    = 1 << 0                                              // last record of its Append batch
	attrProducer    = 1 << 1                                              // the producer fields follow the headers
	attrTxn         = 1 << 2                                              // a transactional record (needs attrProducer)
	attrControl     = 1 << 3                                              // a transaction marker (needs attrTxn)
	attrKnown       = attrBatchEnd | attrProducer | attrTxn | attrControl // every other bit must be zero
	producerSize    = 8 + 2 + 4                                           // producer id, epoch, sequence
	nilLen          = math.MaxUint32                                      // i32 -1: the slice is nil
	headerFixedSize = 4 + 4                                               // key len + value len per header
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	// errShortFrame: the buffer ends inside the frame (a torn tail when it is
	// the end of the file).
	errShortFrame = errors.New("short frame")
	// errBadFrame: impossible length, checksum mismatch or malformed body.
	errBadFrame = errors.New("bad frame")
)

// frameSize returns the encoded size of r.
func frameSize(r *Record) int {
	n := minFrameSize + len(r.Key) + len(r.Value)
	for i := range r.Headers {
		n += headerFixedSize + len(r.Headers[i].Key) + len(r.Headers[i].Value)
	}
	if r.ProducerID != 0 {
		n += producerSize
	}
	return n
}

// appendFrame appends r's frame with the given offset to dst. Callers size dst
// for the whole batch first, so this never allocates.
func appendFrame(dst []byte, r *Record, offset int64, last bool) []byte {
	start := len(dst)
	var attrs byte
	if last {
		attrs = attrBatchEnd
	}
	if r.ProducerID != 0 {
		attrs |= attrProducer
		if r.Transactional || r.Control {
			attrs |= attrTxn
		}
		if r.Control {
			attrs |= attrControl
		}
	}
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, attrs)
	dst = binary.BigEndian.AppendUint64(dst, uint64(offset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Timestamp))
	dst = appendOptBytes(dst, r.Key)
	dst = appendOptBytes(dst, r.Value)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.Headers)))
	for i := range r.Headers {
		h := &r.Headers[i]
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendOptBytes(dst, h.Value)
	}
	if r.ProducerID != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(r.ProducerID))
		dst = binary.BigEndian.AppendUint16(dst, uint16(r.ProducerEpoch))
		dst = binary.BigEndian.AppendUint32(dst, uint32(r.Sequence))
	}
	body := dst[start+frameHeaderSize:]
	binary.BigEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(dst[start+4:], crc32.Checksum(body, castagnoli))
	return dst
}

func appendOptBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.BigEndian.AppendUint32(dst, nilLen)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// frameLen returns the total length of the frame whose header starts hdr
// (len(hdr) >= frameHeaderSize), checking it before anyone allocates for it.
func frameLen(hdr []byte) (int, error) {
	n := int64(binary.BigEndian.Uint32(hdr))
	if n < bodyFixedSize || n+frameHeaderSize > MaxRecordBytes {
		return 0, errBadFrame
	}
	return int(n) + frameHeaderSize, nil
}

// frameInfo is what recovery, indexing and timestamp search need from a frame.
type frameInfo struct {
	offset    int64
	timestamp int64
	batchEnd  bool
}

// decodeFrame checks and decodes the frame at the start of b and returns its
// length. If rec is non-nil it is filled in; its Key, Value and header values
// alias b (capacity-limited so appends cannot clobber neighbours), header keys
// are copied. errShortFrame means b ends inside the frame, errBadFrame that
// the frame is damaged.
func decodeFrame(b []byte, rec *Record) (int, frameInfo, error) {
	if len(b) < frameHeaderSize {
		return 0, frameInfo{}, errShortFrame
	}
	n, err := frameLen(b)
	if err != nil {
		return 0, frameInfo{}, err
	}
	if len(b) < n {
		return 0, frameInfo{}, errShortFrame
	}
	body := b[frameHeaderSize:n]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return 0, frameInfo{}, errBadFrame
	}
	attrs := body[0]
	if attrs&^attrKnown != 0 || (attrs&attrTxn != 0 && attrs&attrProducer == 0) ||
		(attrs&attrControl != 0 && attrs&attrTxn == 0) {
		return 0, frameInfo{}, errBadFrame
	}
	info := frameInfo{
		offset:    int64(binary.BigEndian.Uint64(body[1:])),
		timestamp: int64(binary.BigEndian.Uint64(body[9:])),
		batchEnd:  attrs&attrBatchEnd != 0,
	}
	d := decoder{b: body, pos: 17}
	key := d.optBytes()
	value := d.optBytes()
	count := d.u32()
	// Each header needs at least headerFixedSize bytes: refuse counts the
	// body cannot hold before allocating the slice.
	if d.bad || uint64(count) > uint64(len(body)-d.pos)/headerFixedSize {
		return 0, frameInfo{}, errBadFrame
	}
	var headers []Header
	if rec != nil && count > 0 {
		headers = make([]Header, count)
	}
	for i := 0; i < int(count); i++ {
		kl := d.u32()
		k := d.bytes(int(kl))
		v := d.optBytes()
		if d.bad {
			return 0, frameInfo{}, errBadFrame
		}
		if headers != nil {
			headers[i] = Header{Key: string(k), Value: v}
		}
	}
	var pid int64
	var epoch int16
	var seq int32
	if attrs&attrProducer != 0 {
		pid, epoch, seq = int64(d.u64()), int16(d.u16()), int32(d.u32())
		if pid == 0 {
			d.bad = true // 0 means "no producer" and is never written
		}
	}
	if d.bad || d.pos != len(body) {
		return 0, frameInfo{}, errBadFrame
	}
	if rec != nil {
		*rec = Record{Offset: info.offset, Timestamp: info.timestamp, Key: key, Value: value, Headers: headers,
			ProducerID: pid, ProducerEpoch: epoch, Sequence: seq,
			Transactional: attrs&attrTxn != 0, Control: attrs&attrControl != 0}
	}
	return n, info, nil
}

// decoder reads fields from a frame body; any overrun sets bad and makes
// every later read return zero values, so callers check once at the end.
type decoder struct {
	b   []byte
	pos int
	bad bool
}

func (d *decoder) u32() uint32 {
	if d.bad || len(d.b)-d.pos < 4 {
		d.bad = true
		return 0
	}
	v := binary.BigEndian.Uint32(d.b[d.pos:])
	d.pos += 4
	return v
}

func (d *decoder) u64() uint64 {
	if d.bad || len(d.b)-d.pos < 8 {
		d.bad = true
		return 0
	}
	v := binary.BigEndian.Uint64(d.b[d.pos:])
	d.pos += 8
	return v
}

func (d *decoder) u16() uint16 {
	if d.bad || len(d.b)-d.pos < 2 {
		d.bad = true
		return 0
	}
	v := binary.BigEndian.Uint16(d.b[d.pos:])
	d.pos += 2
	return v
}

func (d *decoder) bytes(n int) []byte {
	if d.bad || n < 0 || len(d.b)-d.pos < n {
		d.bad = true
		return nil
	}
	v := d.b[d.pos : d.pos+n : d.pos+n]
	d.pos += n
	return v
}

func (d *decoder) optBytes() []byte {
	n := d.u32()
	if d.bad || n == nilLen {
		return nil
	}
	if uint64(n) > uint64(len(d.b)-d.pos) {
		d.bad = true
		return nil
	}
	return d.bytes(int(n))
}

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }
