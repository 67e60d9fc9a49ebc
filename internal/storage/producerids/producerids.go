// Package producerids reserves blocks of idempotent producer ids in a
// file of the data directory (docs/produce.md), for the file store; the
// JetStream store keeps the same counter in the cluster's metadata bucket
// (jslog.Store.ReserveProducerIDs).
//
// # On disk
//
// <data dir>/producer-ids holds the next id that was never handed out:
//
//	u64 next (big-endian) | u32 CRC32C of those 8 bytes
//
// A reservation of n ids writes next+n with an atomic replacement (temp
// file, fsync, rename, fsync of the directory) before it answers, so a
// crash loses at most the unused rest of a block and never hands an id
// out twice. A missing file (a new data directory, or one whose file was
// lost) starts at the current time in milliseconds times 1000, so that
// even a lost file does not make ids of the past come back unless more
// than 1000 ids per millisecond were reserved on average. A damaged file
// is an error: the server refuses to guess.
package producerids

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// FileName is the counter's file in the data directory.
const FileName = "producer-ids"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File is the counter in one data directory. It is safe for concurrent
// use; one process owns the directory (the log store's lock).
type File struct {
	path string
	now  func() time.Time

	mu   sync.Mutex
	next int64 // 0 until the file was read
}

// Open returns the counter of dir; the file is read on first use.
func Open(dir string) *File {
	return &File{path: filepath.Join(dir, FileName), now: time.Now}
}

// ReserveProducerIDs durably reserves n ids and returns the first.
func (f *File) ReserveProducerIDs(ctx context.Context, n int64) (int64, error) {
	if n <= 0 {
		return 0, fmt.Errorf("reserve %d producer ids: %w", n, logstore.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == 0 {
		next, err := f.read()
		if err != nil {
			return 0, err
		}
		f.next = next
	}
	if f.next > math.MaxInt64-n {
		return 0, fmt.Errorf("producer ids are exhausted (next %d): %w", f.next, logstore.ErrStorage)
	}
	first := f.next
	var b [12]byte
	binary.BigEndian.PutUint64(b[:], uint64(first+n))
	binary.BigEndian.PutUint32(b[8:], crc32.Checksum(b[:8], castagnoli))
	if err := fsutil.WriteFileAtomic(f.path, b[:], fsutil.SyncFileAndDir); err != nil {
		return 0, fmt.Errorf("write %s: %w (%w)", f.path, err, logstore.ErrStorage)
	}
	f.next = first + n
	return first, nil
}

func (f *File) read() (int64, error) {
	b, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return max(1, f.now().UnixMilli()*1000), nil
	case err != nil:
		return 0, fmt.Errorf("read %s: %w (%w)", f.path, err, logstore.ErrStorage)
	case len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.BigEndian.Uint32(b[8:]):
		return 0, fmt.Errorf("%s is damaged (%d bytes, checksum mismatch or wrong size): move it away only if you know that no producer id above the highest one in use was handed out: %w",
			f.path, len(b), logstore.ErrStorage)
	}
	next := int64(binary.BigEndian.Uint64(b))
	if next <= 0 {
		return 0, fmt.Errorf("%s holds the impossible next id %d: %w", f.path, next, logstore.ErrStorage)
	}
	return next, nil
}
