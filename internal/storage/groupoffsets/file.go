package groupoffsets

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// FileName is the offsets log's name in its directory.
const FileName = "offsets.log"

// maxFrame bounds one frame's payload (a commit of many partitions).
const maxFrame = 64 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Options configures a File store.
type Options struct {
	Dir           string
	Fsync         logstore.FsyncMode
	FsyncInterval time.Duration // for FsyncInterval; default 1s
	// CompactBytes is the least file size that is compacted; default 1 MiB.
	CompactBytes int64
	Logger       *slog.Logger
}

// File is the Store in a data directory's file (doc.go).
type File struct {
	opts Options
	path string

	mu     sync.Mutex // a leaf
	f      *os.File
	size   int64 // bytes of whole frames in f
	im     *image
	dirty  bool // written since the last fsync (interval mode)
	closed bool
	broken error // a failed write left the file unknown; the next write repairs

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Open opens (creating) the store in opts.Dir and replays it.
func Open(opts Options) (*File, error) {
	if opts.FsyncInterval <= 0 {
		opts.FsyncInterval = time.Second
	}
	if opts.CompactBytes <= 0 {
		opts.CompactBytes = 1 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("consumer-group offsets: %w", err)
	}
	s := &File{opts: opts, path: filepath.Join(opts.Dir, FileName), im: newImage()}
	_ = os.Remove(s.path + fsutil.TmpSuffix) // a compaction cut short
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("consumer-group offsets: %w", err)
	}
	s.f = f
	if err := s.replay(); err != nil {
		f.Close()
		return nil, fmt.Errorf("consumer-group offsets %s: %w", s.path, err)
	}
	if opts.Fsync == logstore.FsyncInterval {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.syncLoop()
	}
	return s, nil
}

// replay rebuilds the image and cuts a torn or damaged tail.
func (s *File) replay() error {
	st, err := s.f.Stat()
	if err != nil {
		return err
	}
	r := bufio.NewReaderSize(s.f, 64<<10)
	var pos int64
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			break // end, or a torn header
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		if n > maxFrame {
			break
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			break
		}
		if crc32.Checksum(payload, crcTable) != binary.BigEndian.Uint32(hdr[4:]) {
			break
		}
		var e entry
		if err := json.Unmarshal(payload, &e); err != nil {
			break
		}
		s.im.apply(e)
		pos += 8 + int64(n)
	}
	if pos < st.Size() {
		s.opts.Logger.Warn("consumer-group offsets: cutting a torn or damaged tail", "file", s.path, "at", pos, "size", st.Size())
		if err := s.f.Truncate(pos); err != nil {
			return err
		}
		if err := s.f.Sync(); err != nil {
			return err
		}
	}
	s.size = pos
	_, err = s.f.Seek(pos, io.SeekStart)
	return err
}

func frame(e entry) ([]byte, error) {
	payload, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(payload) > maxFrame {
		return nil, fmt.Errorf("consumer-group offsets: entry of %d bytes is too large", len(payload))
	}
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint32(b[:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(payload, crcTable))
	return append(b, payload...), nil
}

var errClosed = errors.New("consumer-group offsets: store closed")

// write appends e, makes it as durable as the fsync mode says and applies
// it to the image; on error nothing is applied and the file is cut back.
func (s *File) write(e entry) error {
	b, err := frame(e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if s.broken != nil {
		if err := s.repair(); err != nil {
			return err
		}
	}
	if _, err := s.f.Write(b); err != nil {
		s.broken = err
		return fmt.Errorf("consumer-group offsets: write: %w", err)
	}
	if s.opts.Fsync == logstore.FsyncAlways {
		if err := fsutil.Fdatasync(s.f); err != nil {
			s.broken = err
			return fmt.Errorf("consumer-group offsets: fsync: %w", err)
		}
	} else {
		s.dirty = true
	}
	s.size += int64(len(b))
	s.im.apply(e)
	if s.size >= s.opts.CompactBytes && s.size > 4*int64(s.im.size())*128 {
		if err := s.compact(); err != nil {
			// The entry is written; the old file stays in use.
			s.opts.Logger.Warn("consumer-group offsets: compaction failed", "error", err)
		}
	}
	return nil
}

// repair cuts the file back to its last whole frame after a failed write.
func (s *File) repair() error {
	if err := s.f.Truncate(s.size); err != nil {
		return fmt.Errorf("consumer-group offsets: repair: %w", err)
	}
	if _, err := s.f.Seek(s.size, io.SeekStart); err != nil {
		return fmt.Errorf("consumer-group offsets: repair: %w", err)
	}
	s.broken = nil
	return nil
}

// compact replaces the file with the image's snapshot (mu held).
func (s *File) compact() error {
	var buf []byte
	for _, e := range s.im.snapshot() {
		b, err := frame(e)
		if err != nil {
			return err
		}
		buf = append(buf, b...)
	}
	sync := fsutil.SyncFileAndDir
	if s.opts.Fsync == logstore.FsyncNever {
		sync = fsutil.NoSync
	}
	if s.opts.Fsync == logstore.FsyncInterval {
		// The old file's unsynced tail is in the snapshot; sync it like
		// the rest so that the rename never loses what was acknowledged.
		sync = fsutil.SyncFileAndDir
	}
	if err := fsutil.WriteFileAtomic(s.path, buf, sync); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return err
	}
	s.f.Close()
	s.f, s.size, s.dirty = f, int64(len(buf)), false
	return nil
}

func (s *File) syncLoop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.FsyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			if s.dirty && !s.closed {
				if err := fsutil.Fdatasync(s.f); err != nil {
					s.opts.Logger.Warn("consumer-group offsets: fsync", "error", err)
				} else {
					s.dirty = false
				}
			}
			s.mu.Unlock()
		}
	}
}

// Load implements Store.
func (s *File) Load() ([]Group, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	return s.im.list(), nil
}

// Commit implements Store.
func (s *File) Commit(group string, offsets []Offset) error {
	return s.write(entry{Kind: "c", Group: group, Offsets: offsets})
}

// Delete implements Store.
func (s *File) Delete(group string, parts []Partition) error {
	return s.write(entry{Kind: "d", Group: group, Parts: parts, All: parts == nil})
}

// SetMeta implements Store.
func (s *File) SetMeta(group string, m Meta) error {
	return s.write(entry{Kind: "s", Group: group, Meta: &m})
}

// Close implements Store: the file is fsynced unless the mode is never.
func (s *File) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.opts.Fsync != logstore.FsyncNever {
		err = s.f.Sync()
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}
