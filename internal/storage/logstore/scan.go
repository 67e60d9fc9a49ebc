package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// scratchSize is the size of pooled read buffers: large enough that a
// typical fetch is one pread, small enough to keep many in flight.
const scratchSize = 256 << 10

var scratchPool = sync.Pool{New: func() any { b := make([]byte, scratchSize); return &b }}

// frameScanner reads consecutive frames of a segment file with few preads.
// Frames it returns alias its buffer and are valid only until the next call
// to next (or until onRefill runs, which is called first so a consumer can
// copy what it kept).
type frameScanner struct {
	f        *os.File
	pos      int64   // file position of the next frame
	limit    int64   // never read at or past this position
	buf      *[]byte // pooled scratch
	data     []byte  // unread bytes of *buf, starting at pos
	hint     int     // size of the first read (0: a full buffer)
	onRefill func()
}

func newScanner(f *os.File, pos, limit int64, hint int) *frameScanner {
	return &frameScanner{f: f, pos: pos, limit: limit, buf: scratchPool.Get().(*[]byte), hint: hint}
}

// close returns the scratch buffer; frames returned earlier become invalid.
func (s *frameScanner) close() {
	if s.buf != nil && cap(*s.buf) == scratchSize {
		scratchPool.Put(s.buf)
	}
	s.buf, s.data = nil, nil
}

// next returns the next whole frame and its file position. io.EOF means the
// limit was reached exactly at a frame boundary; errShortFrame that the data
// ends inside a frame; errBadFrame that a frame length is impossible. The
// CRC is not checked here (decodeFrame does).
func (s *frameScanner) next() ([]byte, int64, error) {
	if s.pos >= s.limit {
		return nil, s.pos, io.EOF
	}
	if len(s.data) < frameHeaderSize {
		if err := s.fill(frameHeaderSize); err != nil {
			return nil, s.pos, err
		}
	}
	n, err := frameLen(s.data)
	if err != nil {
		return nil, s.pos, err
	}
	if len(s.data) < n {
		if err := s.fill(n); err != nil {
			return nil, s.pos, err
		}
	}
	fr := s.data[:n:n]
	s.data = s.data[n:]
	pos := s.pos
	s.pos += int64(n)
	return fr, pos, nil
}

// fill makes data hold at least need bytes starting at pos.
func (s *frameScanner) fill(need int) error {
	if s.limit-s.pos < int64(need) {
		return errShortFrame
	}
	if s.onRefill != nil {
		s.onRefill()
	}
	buf := *s.buf
	if need > len(buf) {
		// One frame larger than the scratch buffer: a dedicated buffer
		// (need was checked against MaxRecordBytes by frameLen).
		nb := make([]byte, need)
		s.buf = &nb
		buf = nb
	}
	have := copy(buf, s.data)
	want := len(buf)
	if s.hint > 0 {
		want = min(max(s.hint, need), len(buf))
		s.hint = 0
	}
	want = int(min(int64(want), s.limit-s.pos))
	n, err := s.f.ReadAt(buf[have:want], s.pos+int64(have))
	s.data = buf[:have+n]
	if have+n < need {
		if err == nil || errors.Is(err, io.EOF) {
			return errShortFrame // the file is shorter than the limit
		}
		return err
	}
	return nil
}

// resyncWindow is how much of a segment resync reads at a time.
const resyncWindow = 256 << 10

// resync looks for the first frame that starts after byte from (exclusive)
// and before limit, is whole below limit, passes its CRC and carries an
// offset in [minOff, maxOff): the point where reading can resume after a
// damaged frame. The offset range and the CRC make a false match
// practically impossible (a random 8-byte offset in range and a 32-bit
// checksum). ok is false if there is none.
func resync(f *os.File, from, limit, minOff, maxOff int64) (pos, off int64, ok bool, err error) {
	buf := make([]byte, resyncWindow)
	for wstart := from + 1; limit-wstart >= minFrameSize; {
		n, rerr := f.ReadAt(buf[:min(int64(len(buf)), limit-wstart)], wstart)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return 0, 0, false, rerr
		}
		data := buf[:n]
		for i := 0; i+minFrameSize <= len(data); i++ {
			q := wstart + int64(i)
			l := int64(beUint32(data[i:]))
			if l < bodyFixedSize || l+frameHeaderSize > MaxRecordBytes || q+frameHeaderSize+l > limit {
				continue
			}
			if data[i+frameHeaderSize]&^attrKnown != 0 {
				continue
			}
			o := int64(beUint64(data[i+offFieldOffset:]))
			if o < minOff || o >= maxOff {
				continue
			}
			fr := data[i:min(len(data), i+frameHeaderSize+int(l))]
			if len(fr) < frameHeaderSize+int(l) {
				fr = make([]byte, frameHeaderSize+l)
				if _, err := f.ReadAt(fr, q); err != nil {
					continue
				}
			}
			if _, fi, err := decodeFrame(fr, nil); err == nil && fi.offset == o {
				return q, o, true, nil
			}
		}
		if n < minFrameSize || wstart+int64(n) >= limit {
			break
		}
		wstart += int64(n - minFrameSize + 1)
	}
	return 0, 0, false, nil
}

// damage is one damaged stretch of a segment: frames from byte pos up to
// byte next are unreadable, and they held offsets [from, to]. next is -1
// when no valid frame follows (the damage runs to the end of the segment).
type damage struct {
	pos, next int64
	from, to  int64
	err       error
}

// walkResult is what walkFrames found.
type walkResult struct {
	end     int64    // the offset after the last valid frame
	endPos  int64    // the byte after the last valid frame
	damages []damage // in file order
}

// walkFrames checks every frame of a sealed segment in [0, limit): length,
// CRC, and offsets contiguous from base (with sparse, a compacted segment's,
// increasing and below endOff). Past a damaged frame it resyncs on
// the next valid frame with an offset below endOff, and records the
// unreadable range. fn, if set, sees every valid frame (aliasing a scratch
// buffer, valid during the call).
func walkFrames(f *os.File, limit, base, endOff int64, sparse bool, fn func(fr []byte, pos int64, fi frameInfo)) (walkResult, error) {
	res := walkResult{end: base}
	expect := base
	sc := newScanner(f, 0, limit, 0)
	defer func() { sc.close() }()
	for {
		fr, pos, err := sc.next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		var fi frameInfo
		if err == nil {
			_, fi, err = decodeFrame(fr, nil)
		}
		if err == nil && fi.offset != expect && !(sparse && fi.offset > expect && fi.offset < endOff) {
			err = fmt.Errorf("%w: offset %d where %d was expected", errBadFrame, fi.offset, expect)
		}
		if err != nil {
			if !errors.Is(err, errBadFrame) && !errors.Is(err, errShortFrame) {
				return res, err
			}
			npos, noff, ok, rerr := resync(f, pos, limit, expect, endOff)
			if rerr != nil {
				return res, rerr
			}
			if !ok {
				res.damages = append(res.damages, damage{pos: pos, next: -1, from: expect, to: endOff - 1, err: err})
				return res, nil
			}
			res.damages = append(res.damages, damage{pos: pos, next: npos, from: expect, to: noff - 1, err: err})
			sc.close()
			sc = newScanner(f, npos, limit, 0)
			expect = noff
			continue
		}
		if fn != nil {
			fn(fr, pos, fi)
		}
		expect = fi.offset + 1
		res.end, res.endPos = expect, pos+int64(len(fr))
	}
}

func beUint32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
