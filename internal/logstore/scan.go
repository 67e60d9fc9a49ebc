package logstore

import (
	"errors"
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
