package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// Sparse index parameters.
const (
	// indexInterval is the number of log bytes between offset index entries
	// (and the minimum between time index entries): a lookup reads at most
	// this much before the wanted frame.
	indexInterval  = 4096
	indexEntrySize = 8  // u32 relative offset, u32 file position
	timeEntrySize  = 12 // i64 max timestamp so far, u32 relative offset
)

// File name suffixes of a segment; the base name is the base offset as
// %020d, so names sort lexically in offset order.
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
)

// segmentSuffixes are the files of one segment, removed together.
var segmentSuffixes = []string{logSuffix, indexSuffix, timeIndexSuffix, keysSuffix}

// indexEntry maps a record (offset base+rel) to the file position of its frame.
type indexEntry struct {
	rel uint32
	pos uint32
}

// timeEntry says: every record with relative offset <= rel has a timestamp
// <= ts (ts is the running maximum). Entries increase strictly in both fields.
type timeEntry struct {
	ts  int64
	rel uint32
}

// segment is one log file of a partition with its sparse indexes.
//
// Lifetime: refs starts at 1, the reference of the partition's segment list.
// Readers add one (under the partition's mu, while the segment is still
// listed) for as long as they use the file. Removal from the list renames
// the files to *.deleted and drops the list's reference; whoever drops the
// last reference closes the file and, if it was deleted, unlinks it. So a
// reader never sees a segment disappear under it.
type segment struct {
	base int64
	dir  string     // the partition directory
	fc   *fdCache   // the store's open files (fdcache.go)
	fs   *storageFS // the store's file operations

	// fd is the log file's place in fc: opened on demand, pinned while in
	// use (pin, unpin), closed when evicted or with the segment.
	fd fdSlot
	// created: the log file exists (made by the first append, or found at
	// Open). Set by the append leader or Open only.
	created atomic.Bool

	refs atomic.Int32
	// size is the number of readable bytes. For the active segment the append
	// leader publishes it after writing and before moving the high watermark.
	size atomic.Int64

	// wpos is the next write position. Only the append leader uses it (the
	// leader role is handed over under partition.wmu, which orders accesses).
	wpos int64
	// needDirSync: the file was created and its directory entry is not
	// known durable yet (leader only).
	needDirSync bool
	// synced: the whole file is known fsynced (sealed in a durable mode,
	// found synced in the checkpoint, or flushed by a clean Close).
	synced atomic.Bool
	// opened is when the segment was made, or found at Open (ms, the
	// store's clock): segment.ms counts from it (partition.commit).
	opened int64
	// sparse: the segment was written (or, being a sealed segment of a
	// compacted topic, may have been) by compaction, so its offsets may
	// have gaps, also before its end. Set before the segment is listed and
	// never changed.
	sparse bool

	// mu guards the fields below. Lock order: partition locks, then mu.
	// It also serialises the opening of fd (lock order: mu, then fdCache.mu).
	mu      sync.Mutex
	sealed  bool // no more appends; index files written
	deleted bool // files renamed to *.<delGen>.deleted
	// delGen makes the deleted names of this segment unique: a segment
	// compacted twice leaves two generations of the same base marked for
	// deletion, and a reader still pinning the older one must open its
	// own files, not the newer one's (and its release must unlink only
	// its own).
	delGen uint64
	loaded bool // idx and tidx are in memory (always true for the active segment)
	idx    []indexEntry
	tidx   []timeEntry
	maxTs  int64 // newest timestamp in the segment; math.MinInt64 when empty
	end    int64 // offset after the last indexed record
	// Indexer state: positions at or after which the next entry may be made.
	nextIdxPos  int64
	nextTidxPos int64
	// Key index (keyindex.go): mem holds the entries of the active segment
	// (and of a sealed one until its run is written); run is the parsed
	// block index of the sealed segment's .keys file. Both nil: the run is
	// missing and queued for a rebuild.
	mem *memIndex
	run *runIndex
	// damages caches the damaged stretches found in a sealed segment.
	damages []damage
	// retired are handles replaced by a repair; readers may still use
	// them, so they close with the segment.
	retired []*os.File
}

// newSegment returns an empty segment of p at base; its file is created by
// create (or found by Open).
func (p *partition) newSegment(base int64) *segment {
	s := &segment{base: base, dir: p.dir, fc: p.st.fds, fs: &p.st.fs, loaded: true, maxTs: math.MinInt64, end: base, nextIdxPos: indexInterval, mem: newMemIndex(),
		opened: p.st.opts.Now().UnixMilli()}
	s.refs.Store(1)
	return s
}

// path returns the file path for suffix, following a rename to *.deleted.
// s.mu must be held.
func (s *segment) path(suffix string) string {
	p := filepath.Join(s.dir, fmt.Sprintf("%020d%s", s.base, suffix))
	if s.deleted {
		p += fmt.Sprintf(".%d%s", s.delGen, deletedSuffix)
	}
	return p
}

// deleteGen numbers the segments marked for deletion in this process.
var deleteGen atomic.Uint64

// acquire adds a reference. The caller must have found s in the partition's
// segment list under the partition's mu, so the list still holds one.
func (s *segment) acquire() { s.refs.Add(1) }

// tryAcquire adds a reference unless the last one is gone (the segment
// may be closed): for holders of a pointer that is no longer listed.
func (s *segment) tryAcquire() bool {
	for {
		n := s.refs.Load()
		if n <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release drops a reference; the last one closes the file and unlinks a
// deleted segment.
func (s *segment) release() {
	if s.refs.Add(-1) != 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fc.remove(&s.fd); f != nil {
		_ = f.Close()
	}
	for _, f := range s.retired {
		_ = f.Close()
	}
	s.retired = nil
	if s.deleted {
		for _, suf := range segmentSuffixes {
			_ = removeIfExists(s.path(suf))
		}
	}
}

// pin returns the segment's log file, open until the matching unpin: an
// evicted file is opened again (read-write while the segment is active,
// read-only once sealed). Failures are storage errors (ErrStorage, e.g.
// EMFILE: retryable). The caller holds a reference to s.
func (s *segment) pin() (*os.File, error) {
	if f := s.fc.pin(&s.fd); f != nil {
		return f, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pinLocked()
}

// pinLocked is pin; s.mu is held.
func (s *segment) pinLocked() (*os.File, error) {
	if f := s.fc.pin(&s.fd); f != nil {
		return f, nil
	}
	flag := os.O_RDONLY
	if !s.sealed {
		flag = os.O_RDWR
	}
	s.fc.reserve()
	f, err := s.fs.openFile(s.path(logSuffix), flag, 0)
	if err != nil {
		s.fc.unreserve()
		return nil, err
	}
	s.fc.add(&s.fd, f, true)
	return f, nil
}

// unpin ends a pin: the file may be closed from now on.
func (s *segment) unpin() { s.fc.unpin(&s.fd) }

// adopt makes f, opened by the caller on s's log file (or on the file
// that is renamed to it before s is listed), the segment's file, pinned
// or not. s's file must be closed.
func (s *segment) adopt(f *os.File, pinned bool) {
	s.fc.reserve()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fc.add(&s.fd, f, pinned)
	s.created.Store(true)
}

// dropFile closes the segment's file if it is open (a segment never
// listed gives its file up).
func (s *segment) dropFile() {
	if f := s.fc.remove(&s.fd); f != nil {
		_ = f.Close()
	}
}

// logPath is the segment's log file path.
func (s *segment) logPath() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.path(logSuffix)
}

// create creates the file of a new active segment. Only the append leader
// (or Open) calls it. A file of that name can only be the leftover of a
// failed roll (its base is the high watermark, so it holds nothing
// acknowledged): it is truncated. The new file stays open, unpinned.
func (s *segment) create() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.fc.remove(&s.fd); f != nil {
		_ = f.Close() // not reached: a new segment has no file yet
	}
	s.fc.reserve()
	f, err := s.fs.openFile(s.path(logSuffix), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		s.fc.unreserve()
		return err
	}
	s.fc.add(&s.fd, f, false)
	s.created.Store(true)
	s.needDirSync = true
	return nil
}

// markDeleted renames the segment's files to *.deleted. The caller has
// removed s from the partition's list and then drops the list's reference.
func (s *segment) markDeleted() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return nil
	}
	var first error
	gen := deleteGen.Add(1)
	for _, suf := range segmentSuffixes {
		from := s.path(suf)
		to := fmt.Sprintf("%s.%d%s", from, gen, deletedSuffix)
		if err := renameIfExists(from, to); err != nil && first == nil {
			first = err
		}
	}
	// Even if a rename failed, later paths must not point at a file that may
	// have moved; release unlinks the new names best-effort.
	s.deleted, s.delGen = true, gen
	return first
}

// indexFrame adds the frame at file position pos to the in-memory indexes.
// s.mu must be held.
func (s *segment) indexFrame(pos int64, fi frameInfo) {
	rel := uint32(fi.offset - s.base)
	if pos >= s.nextIdxPos {
		s.idx = append(s.idx, indexEntry{rel: rel, pos: uint32(pos)})
		s.nextIdxPos = pos + indexInterval
	}
	if fi.timestamp > s.maxTs {
		s.maxTs = fi.timestamp
		if pos >= s.nextTidxPos {
			s.tidx = append(s.tidx, timeEntry{ts: fi.timestamp, rel: rel})
			s.nextTidxPos = pos + indexInterval
		}
	}
	s.end = fi.offset + 1
}

// finishTimeIndex makes the last time index entry carry the segment's
// maximum timestamp, so a sealed segment's newest timestamp is the last
// entry of its file. s.mu must be held.
func (s *segment) finishTimeIndex() {
	if s.end > s.base && s.maxTs != math.MinInt64 && (len(s.tidx) == 0 || s.tidx[len(s.tidx)-1].ts < s.maxTs) {
		s.tidx = append(s.tidx, timeEntry{ts: s.maxTs, rel: uint32(s.end - 1 - s.base)})
	}
}

// lookup returns a file position at or before the frame of offset off.
func (s *segment) lookup(off int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		return 0, err
	}
	return s.lookupLocked(off), nil
}

// lookupOffset is lookup that also returns the offset of the frame at the
// returned position.
func (s *segment) lookupOffset(off int64) (int64, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		return 0, 0, err
	}
	i := s.lookupIndexLocked(off)
	if i < 0 {
		return 0, s.base, nil
	}
	return int64(s.idx[i].pos), s.base + int64(s.idx[i].rel), nil
}

// lookupIndexLocked returns the index of the last entry at or before off, or -1.
func (s *segment) lookupIndexLocked(off int64) int {
	rel := off - s.base
	lo, hi := 0, len(s.idx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int64(s.idx[m].rel) > rel {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo - 1
}

func (s *segment) lookupLocked(off int64) int64 {
	rel := off - s.base
	// First entry with rel > target; the one before it is the answer.
	lo, hi := 0, len(s.idx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int64(s.idx[m].rel) > rel {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return 0
	}
	return int64(s.idx[lo-1].pos)
}

// avgFrameSize estimates the segment's mean frame size from its index (0 if
// unknown), so reads can size their first disk read.
func (s *segment) avgFrameSize() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.idx); n > 0 && s.idx[n-1].rel > 0 {
		return int(s.idx[n-1].pos / s.idx[n-1].rel)
	}
	return 0
}

// timeLookup returns the newest timestamp in the segment and an offset from
// which a scan for the first record with timestamp >= ts may start.
func (s *segment) timeLookup(ts int64) (maxTs, start int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		return 0, 0, err
	}
	// Last entry with entry.ts < ts: every record up to its rel is older.
	lo, hi := 0, len(s.tidx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.tidx[m].ts >= ts {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return s.maxTs, s.base, nil
	}
	return s.maxTs, s.base + int64(s.tidx[lo-1].rel) + 1, nil
}

// maxTimestamp returns the newest timestamp in the segment.
func (s *segment) maxTimestamp() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxTs
}

// seal finishes the active segment's indexes after its last write and
// writes them to disk (temp file, optional fsync, rename: they are either
// complete or missing, and a missing index is rebuilt at Open).
func (s *segment) seal(durable bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishTimeIndex()
	s.sealed = true
	return s.writeIndexesLocked(durable)
}

func (s *segment) writeIndexesLocked(durable bool) error {
	if s.deleted {
		return nil
	}
	ib := make([]byte, 0, len(s.idx)*indexEntrySize)
	for _, e := range s.idx {
		ib = binary.BigEndian.AppendUint32(ib, e.rel)
		ib = binary.BigEndian.AppendUint32(ib, e.pos)
	}
	tb := make([]byte, 0, len(s.tidx)*timeEntrySize)
	for _, e := range s.tidx {
		tb = binary.BigEndian.AppendUint64(tb, uint64(e.ts))
		tb = binary.BigEndian.AppendUint32(tb, e.rel)
	}
	// A CRC32C trailer: a damaged index would send reads to the wrong
	// byte, or make retention and timestamp search trust a wrong time.
	ib = binary.BigEndian.AppendUint32(ib, crc32.Checksum(ib, castagnoli))
	tb = binary.BigEndian.AppendUint32(tb, crc32.Checksum(tb, castagnoli))
	// No directory fsync: an index lost to a crash is rebuilt from the log.
	if err := fsutil.WriteFileAtomic(s.path(indexSuffix), ib, fileSync(durable)); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(s.path(timeIndexSuffix), tb, fileSync(durable))
}

// openSealed prepares a sealed segment found at Open. end is the next
// segment's base offset. With a maxTs known from the checkpoint the
// indexes are loaded lazily, on first use; otherwise the whole log is
// scanned now (rescan), which rebuilds them, and the scan is returned.
func (s *segment) openSealed(size, end, maxTs int64, known, durable bool) (walkResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealed, s.loaded, s.end, s.mem = true, false, end, nil
	s.created.Store(true)
	s.size.Store(size)
	s.wpos = size
	if known {
		s.maxTs = maxTs
		return walkResult{}, nil
	}
	return s.rebuildLocked(durable)
}

// loadLocked brings a sealed segment's indexes into memory, rebuilding them
// from the log if the files are missing or inconsistent. s.mu must be held.
func (s *segment) loadLocked() error {
	if s.loaded {
		return nil
	}
	if s.loadFilesLocked() {
		s.loaded = true
		return nil
	}
	_, err := s.rebuildLocked(false)
	return err
}

// checkTrailer verifies and strips the CRC32C trailer of an index file.
func checkTrailer(b []byte, entrySize int) ([]byte, bool) {
	if len(b) < 4 || (len(b)-4)%entrySize != 0 {
		return nil, false
	}
	body := b[:len(b)-4]
	return body, crc32.Checksum(body, castagnoli) == binary.BigEndian.Uint32(b[len(b)-4:])
}

func (s *segment) loadFilesLocked() bool {
	size := s.size.Load()
	count := s.end - s.base
	ib, err := os.ReadFile(s.path(indexSuffix))
	if err != nil {
		return false
	}
	ib, ok := checkTrailer(ib, indexEntrySize)
	if !ok {
		return false
	}
	tb, err := os.ReadFile(s.path(timeIndexSuffix))
	if err != nil {
		return false
	}
	if tb, ok = checkTrailer(tb, timeEntrySize); !ok {
		return false
	}
	idx := make([]indexEntry, 0, len(ib)/indexEntrySize)
	for i := 0; i < len(ib); i += indexEntrySize {
		e := indexEntry{rel: binary.BigEndian.Uint32(ib[i:]), pos: binary.BigEndian.Uint32(ib[i+4:])}
		if int64(e.rel) >= count || int64(e.pos) >= size ||
			len(idx) > 0 && (e.rel <= idx[len(idx)-1].rel || e.pos <= idx[len(idx)-1].pos) {
			return false
		}
		idx = append(idx, e)
	}
	tidx := make([]timeEntry, 0, len(tb)/timeEntrySize)
	for i := 0; i < len(tb); i += timeEntrySize {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(tb[i:])), rel: binary.BigEndian.Uint32(tb[i+8:])}
		if int64(e.rel) >= count || len(tidx) > 0 && (e.ts <= tidx[len(tidx)-1].ts || e.rel <= tidx[len(tidx)-1].rel) {
			return false
		}
		tidx = append(tidx, e)
	}
	if n := len(tidx); n > 0 && tidx[n-1].ts != s.maxTs || n == 0 && count > 0 && s.maxTs != math.MinInt64 {
		return false // the checkpoint's newest timestamp disagrees
	}
	s.idx, s.tidx = idx, tidx
	return true
}

// rebuildLocked recomputes a sealed segment's indexes by scanning its log
// and rewrites the index files. Damaged frames are stepped over; reads
// that reach them report ErrCorrupt. s.mu must be held.
func (s *segment) rebuildLocked(durable bool) (walkResult, error) {
	f, err := s.pinLocked()
	if err != nil {
		return walkResult{}, err
	}
	defer s.unpin()
	s.idx, s.tidx, s.maxTs = nil, nil, math.MinInt64
	s.nextIdxPos, s.nextTidxPos = indexInterval, 0
	end := s.end
	// Damaged frames are stepped over (resync), so records after them stay
	// indexed; reads that reach the damage report it.
	res, err := walkFrames(f, s.size.Load(), s.base, end, s.sparse, func(_ []byte, pos int64, fi frameInfo) { s.indexFrame(pos, fi) })
	if err != nil {
		return res, err
	}
	if len(s.damages) == 0 {
		s.damages = res.damages[:min(len(res.damages), maxDamages)]
	}
	s.finishTimeIndex()
	if s.sealed {
		// end is the next segment's base; keep it even if the scan stopped
		// early, offsets in between are simply unreadable.
		s.end = max(end, s.end)
	}
	s.loaded = true
	if err := s.writeIndexesLocked(durable); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, err
	}
	return res, nil
}
