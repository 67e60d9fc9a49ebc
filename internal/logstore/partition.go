package logstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// logStartFile holds a partition's persisted log start offset (decimal text).
const logStartFile = "log-start-offset"

// maxSpareBuf bounds the group buffer a partition keeps between commits, so
// one huge batch does not pin its memory forever.
const maxSpareBuf = 8 << 20

// partition is one partition's log: an ordered list of segments, the last of
// which (the active segment) takes appends.
//
// Locks, in the order they may be taken (never the reverse):
//
//	lsMu  serialises log start moves (purge, retention) and their persistence
//	wmu   the append queue: next, fill, pending, leader, werr (wcond waits on it)
//	mu    (RW) the segment list segs
//	segment.mu  one segment's file handle and indexes
//	watch.mu    leaf
//
// The append leader does its I/O holding none of them; it takes mu and
// segment.mu only briefly to publish. The high watermark and log start are
// atomics so Bounds and the read fast path take no lock.
type partition struct {
	st       *FileStore
	topic    string
	id       int32
	dir      string
	segBytes int64

	hw       atomic.Int64 // next offset; stored by the leader after its data is durable per the fsync mode
	logStart atomic.Int64 // stored under lsMu after being persisted

	lsMu  sync.Mutex
	lsErr error // guarded by lsMu: non-nil once the partition is shut down

	wmu       sync.Mutex
	wcond     sync.Cond    // L = &wmu; signalled when a commit finishes
	next      int64        // next offset to reserve
	fill      []byte       // frames of pending batches, in offset order
	pending   []*appendReq // batches waiting for the next commit
	spareBuf  []byte       // the previous group's buffer, for reuse
	spareReqs []*appendReq
	leader    bool  // a goroutine is committing a group
	werr      error // sticky: the partition takes no more appends

	mu   sync.RWMutex
	segs []*segment // ascending base offsets; never empty until shutdown

	// keysPending counts sealed segments whose key-index run is missing or
	// damaged and queued for a rebuild; OSO scans wait until it is 0.
	keysPending atomic.Int32

	gone    atomic.Pointer[error] // set at shutdown: the error every call returns
	dirty   atomic.Bool           // unsynced appends (fsync mode interval)
	commits atomic.Int64          // group commits so far (tests check that groups form)
	watch   notifier
}

// appendReq is one Append call waiting in a partition's queue.
type appendReq struct {
	base       int64
	n          int
	start, end int // its frames in the group buffer
	done       bool
	err        error
}

var reqPool = sync.Pool{New: func() any { return new(appendReq) }}

func (p *partition) errf(format string, args ...any) error {
	return fmt.Errorf("topic %q partition %d: "+format, append([]any{p.topic, p.id}, args...)...)
}

func (p *partition) closedErr() error {
	if e := p.gone.Load(); e != nil {
		return *e
	}
	return nil
}

// append implements Store.Append with group commit: every caller encodes its
// batch into the shared group buffer under wmu (so offsets are assigned in
// queue order), then either waits for a commit or becomes the leader, which
// writes the whole queue with one write, syncs once, publishes the new high
// watermark and wakes everyone it committed. Callers arriving during a
// commit form the next group; encoding overlaps the leader's fsync.
//
// ctx is checked before queueing only: a queued batch is already encoded at
// its offsets and cannot be withdrawn without leaving a gap.
func (p *partition) append(ctx context.Context, recs []Record) (int64, error) {
	size, err := validateBatch(recs)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	req := reqPool.Get().(*appendReq)
	p.wmu.Lock()
	if p.werr != nil {
		err := p.werr
		p.wmu.Unlock()
		reqPool.Put(req)
		return 0, err
	}
	base := p.next
	p.next += int64(len(recs))
	start := len(p.fill)
	p.fill = slices.Grow(p.fill, size)
	for i := range recs {
		p.fill = appendFrame(p.fill, &recs[i], base+int64(i), i == len(recs)-1)
	}
	*req = appendReq{base: base, n: len(recs), start: start, end: len(p.fill)}
	p.pending = append(p.pending, req)
	for !req.done && p.leader {
		p.wcond.Wait()
	}
	if !req.done {
		p.lead()
	}
	err = req.err
	*req = appendReq{}
	p.wmu.Unlock()
	reqPool.Put(req)
	if err != nil {
		return 0, err
	}
	return base, nil
}

// lead commits the queued group. wmu is held on entry and on return, and
// released during the I/O.
func (p *partition) lead() {
	p.leader = true
	group, buf := p.pending, p.fill
	p.pending, p.fill = p.spareReqs[:0], p.spareBuf[:0]
	p.wmu.Unlock()

	err := p.commit(group, buf)
	p.commits.Add(1)

	p.wmu.Lock()
	for _, r := range group {
		r.done, r.err = true, err
	}
	if err != nil && p.werr == nil {
		// After a failed write or fsync the file's state is unknown (and the
		// kernel may have dropped the dirty pages), so stop taking appends;
		// reopening the store recovers from what is on disk.
		p.werr = p.errf("appends disabled after a storage error: %w", err)
		p.st.log.Error("logstore: partition failed", "topic", p.topic, "partition", p.id, "err", err)
	}
	clear(group)
	p.spareReqs = group[:0]
	if cap(buf) <= maxSpareBuf {
		p.spareBuf = buf[:0]
	} else {
		p.spareBuf = nil
	}
	p.leader = false
	p.wcond.Broadcast()
}

// commit writes a group's frames, rolling segments as needed, syncs per the
// fsync mode and publishes the new high watermark. Only the leader runs it.
func (p *partition) commit(group []*appendReq, buf []byte) error {
	active := p.active()
	pieceStart := 0
	for _, r := range group {
		// Roll before a batch that would overflow a non-empty segment; a
		// batch never spans segments, so every segment ends on a batch end.
		if used := active.wpos + int64(r.start-pieceStart); used > 0 && used+int64(r.end-r.start) > p.segBytes {
			if err := p.writePiece(active, buf[pieceStart:r.start]); err != nil {
				return err
			}
			next, err := p.roll(active, r.base)
			if err != nil {
				return err
			}
			active, pieceStart = next, r.start
		}
	}
	if err := p.writePiece(active, buf[pieceStart:]); err != nil {
		return err
	}
	switch p.st.opts.Fsync {
	case FsyncAlways:
		if err := p.st.io.datasync(active.f); err != nil {
			return err
		}
	case FsyncInterval:
		p.dirty.Store(true)
	}
	last := group[len(group)-1]
	p.hw.Store(last.base + int64(last.n))
	p.watch.notify()
	return nil
}

// active returns the active segment. Only the leader and shutdown may call
// it while the partition is open.
func (p *partition) active() *segment {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.segs[len(p.segs)-1]
}

// writePiece writes frames to seg with one write, indexes them and
// publishes the segment's new size (not yet the high watermark).
func (p *partition) writePiece(seg *segment, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if seg.f == nil { // safe without seg.mu: only the leader sets f on the active segment
		if err := seg.create(); err != nil {
			return err
		}
		if p.st.opts.Fsync != FsyncNever {
			if err := fsutil.SyncDir(p.dir); err != nil {
				return err
			}
		}
	}
	at := seg.wpos
	if _, err := p.st.io.writeAt(seg.f, b, at); err != nil {
		return err
	}
	seg.wpos += int64(len(b))
	seg.mu.Lock()
	// The key index learns the records before the high watermark passes
	// them (change-stream.md §7). Lock order: segment.mu, then memIndex.mu.
	mem := seg.mem
	if mem != nil {
		mem.mu.Lock()
	}
	for pos := 0; pos < len(b); {
		n, _ := frameLen(b[pos:]) // our own frames: lengths are valid
		off := int64(beUint64(b[pos+offFieldOffset:]))
		seg.indexFrame(at+int64(pos), frameInfo{
			offset:    off,
			timestamp: int64(beUint64(b[pos+tsFieldOffset:])),
		})
		if key, tomb, ok := frameKey(b[pos : pos+n]); ok && mem != nil {
			mem.addLocked(key, off, tomb, frameLoc(at+int64(pos), n))
		}
		pos += n
	}
	if mem != nil {
		mem.mu.Unlock()
	}
	seg.mu.Unlock()
	seg.size.Store(seg.wpos)
	return nil
}

// roll seals the full active segment and starts a new one at base.
func (p *partition) roll(old *segment, base int64) (*segment, error) {
	durable := p.st.opts.Fsync != FsyncNever
	if durable {
		if err := p.st.io.datasync(old.f); err != nil {
			return nil, err
		}
	}
	if err := old.seal(durable); err != nil {
		return nil, err
	}
	p.sealKeys(old)
	seg := newSegment(p.dir, base)
	if err := seg.create(); err != nil {
		return nil, err
	}
	if durable {
		if err := fsutil.SyncDir(p.dir); err != nil {
			seg.release()
			return nil, err
		}
	}
	p.mu.Lock()
	p.segs = append(p.segs, seg)
	p.mu.Unlock()
	return seg, nil
}

// acquire returns, with a reference, the segment holding offset off and the
// offset where the next segment starts (or hw for the active segment). It
// fails with ErrOffsetOutOfRange if that segment has been reclaimed.
func (p *partition) acquire(off, hw int64) (*segment, int64, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	segs := p.segs
	if len(segs) == 0 {
		if err := p.closedErr(); err != nil {
			return nil, 0, err
		}
	}
	// Last segment with base <= off.
	lo, hi := 0, len(segs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if segs[m].base > off {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return nil, 0, p.outOfRange(off)
	}
	seg := segs[lo-1]
	seg.acquire()
	end := hw
	if lo < len(segs) {
		end = segs[lo].base
	}
	return seg, end, nil
}

func (p *partition) outOfRange(off int64) error {
	return p.errf("offset %d is outside [log start %d, high watermark %d]: %w",
		off, p.logStart.Load(), p.hw.Load(), ErrOffsetOutOfRange)
}

func (p *partition) corrupt(seg *segment, pos int64, err error) error {
	return p.errf("segment %020d at byte %d: %v: %w", seg.base, pos, err, ErrCorrupt)
}

// read implements Store.Read. Records are copied out of the pooled read
// buffer into one exactly sized allocation per disk read, so the caller owns
// them and a fetch costs a few allocations whatever its record count.
func (p *partition) read(offset int64, maxRecords, maxBytes int) ([]Record, error) {
	if err := validateReadLimits(maxRecords, maxBytes); err != nil {
		return nil, err
	}
	if err := p.closedErr(); err != nil {
		return nil, err
	}
	hw := p.hw.Load()
	if offset < p.logStart.Load() || offset > hw {
		return nil, p.outOfRange(offset)
	}
	if offset == hw {
		return nil, nil
	}
	r := reader{out: make([]Record, 0, min(int64(maxRecords), hw-offset, 1024)), maxRecords: maxRecords, maxBytes: maxBytes}
	cur := offset
	for cur < hw && !r.full {
		seg, end, err := p.acquire(cur, hw)
		if err != nil {
			if len(r.out) > 0 {
				break // purged meanwhile: return what was read before
			}
			return nil, err
		}
		cur, err = r.scanSegment(seg, cur, hw)
		seg.release()
		if err != nil {
			if errors.Is(err, errBadFrame) || errors.Is(err, errShortFrame) {
				err = p.corrupt(seg, r.errPos, err)
				if len(r.out) > 0 {
					break // return the good records; the next read reports the damage
				}
			}
			return nil, err
		}
		if !r.full {
			cur = max(cur, end) // the segment is exhausted
		}
	}
	return r.out, nil
}

// reader accumulates one Read's records.
type reader struct {
	out        []Record
	maxRecords int
	maxBytes   int
	bytes      int
	full       bool
	copied     int   // out[:copied] no longer alias the scratch buffer
	errPos     int64 // file position of a damaged frame
}

// scanSegment appends seg's records from offset cur on and returns the
// offset after the last one appended.
func (r *reader) scanSegment(seg *segment, cur, hw int64) (int64, error) {
	f, err := seg.file()
	if err != nil {
		return cur, err
	}
	pos, err := seg.lookup(cur)
	if err != nil {
		return cur, err
	}
	// Size the first pread for what this read will probably return: the
	// index is at most indexInterval behind, and the mean frame size comes
	// from the index.
	want := min(r.maxBytes, scratchSize)
	if avg := seg.avgFrameSize(); avg > 0 {
		want = min(want, min(r.maxRecords-len(r.out), scratchSize)*avg)
	}
	sc := newScanner(f, pos, seg.size.Load(), want+indexInterval+minFrameSize)
	sc.onRefill = r.detach
	defer sc.close()
	defer r.detach()
	for !r.full {
		fr, fpos, err := sc.next()
		if errors.Is(err, io.EOF) {
			return cur, nil
		}
		if err != nil {
			r.errPos = fpos
			return cur, err // errShortFrame below the HW is damage too
		}
		// Frames before the wanted offset (at most indexInterval bytes) are
		// skipped by their offset field alone: damage there is not this
		// read's business. The density check below catches a damaged
		// offset field that would make us skip the wanted record.
		if int64(beUint64(fr[offFieldOffset:])) < cur {
			continue
		}
		var rec Record
		if _, _, err := decodeFrame(fr, &rec); err != nil {
			r.errPos = fpos
			return cur, err
		}
		if rec.Offset >= hw {
			r.full = true
			break
		}
		if rec.Offset != cur {
			r.errPos = fpos
			return cur, fmt.Errorf("%w: offset %d where %d was expected", errBadFrame, rec.Offset, cur)
		}
		sz := rec.Size()
		if len(r.out) > 0 && r.bytes+sz > r.maxBytes {
			r.full = true
			break
		}
		r.bytes += sz
		r.out = append(r.out, rec)
		cur = rec.Offset + 1
		if len(r.out) >= r.maxRecords || r.bytes >= r.maxBytes {
			r.full = true
		}
	}
	return cur, nil
}

// detach copies the payload of records that still alias the scratch buffer
// into one new allocation.
func (r *reader) detach() {
	recs := r.out[r.copied:]
	r.copied = len(r.out)
	n := 0
	for i := range recs {
		n += len(recs[i].Key) + len(recs[i].Value)
		for _, h := range recs[i].Headers {
			n += len(h.Value)
		}
	}
	if len(recs) == 0 {
		return
	}
	arena := make([]byte, 0, n)
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		s := len(arena)
		arena = append(arena, b...)
		return arena[s:len(arena):len(arena)]
	}
	for i := range recs {
		recs[i].Key = take(recs[i].Key)
		recs[i].Value = take(recs[i].Value)
		for j := range recs[i].Headers {
			recs[i].Headers[j].Value = take(recs[i].Headers[j].Value)
		}
	}
}

// offsetForTimestamp implements Store.OffsetForTimestamp: skip segments
// whose newest record is older than ts, then start from the time index and
// scan forward.
func (p *partition) offsetForTimestamp(ts int64) (int64, int64, error) {
	if err := p.closedErr(); err != nil {
		return 0, 0, err
	}
	hw := p.hw.Load()
	cur := p.logStart.Load()
	for cur < hw {
		seg, end, err := p.acquire(cur, hw)
		if errors.Is(err, ErrOffsetOutOfRange) {
			// Reclaimed meanwhile: continue from the new log start.
			if ls := p.logStart.Load(); ls > cur {
				cur = ls
				continue
			}
		}
		if err != nil {
			return 0, 0, err
		}
		off, fts, err := p.findTimestamp(seg, cur, hw, ts)
		seg.release()
		if err != nil || off >= 0 {
			return off, fts, err
		}
		cur = max(cur, end)
	}
	return -1, -1, nil
}

// findTimestamp returns the first record of seg at or after offset from
// with timestamp >= ts, or -1.
func (p *partition) findTimestamp(seg *segment, from, hw, ts int64) (int64, int64, error) {
	maxTs, start, err := seg.timeLookup(ts)
	if err != nil || maxTs < ts {
		return -1, -1, err
	}
	start = max(start, from)
	pos, err := seg.lookup(start)
	if err != nil {
		return -1, -1, err
	}
	f, err := seg.file()
	if err != nil {
		return -1, -1, err
	}
	sc := newScanner(f, pos, seg.size.Load(), 0)
	defer sc.close()
	for expect := start; ; expect++ {
		fr, fpos, err := sc.next()
		if errors.Is(err, io.EOF) {
			return -1, -1, nil
		}
		if err != nil {
			return -1, -1, p.corrupt(seg, fpos, err)
		}
		if int64(beUint64(fr[offFieldOffset:])) < start {
			expect--
			continue // before the search range: skipped unchecked, as in read
		}
		_, fi, err := decodeFrame(fr, nil)
		if err != nil {
			return -1, -1, p.corrupt(seg, fpos, err)
		}
		if fi.offset >= hw {
			return -1, -1, nil
		}
		if fi.offset != expect { // as in read: a damaged offset field must not hide a record
			return -1, -1, p.corrupt(seg, fpos, fmt.Errorf("%w: offset %d where %d was expected", errBadFrame, fi.offset, expect))
		}
		if fi.timestamp >= ts {
			return fi.offset, fi.timestamp, nil
		}
	}
}

// moveLogStart moves the log start offset forward to off, persisting it
// first unless the fsync mode is never. It is O(1) in the data purged:
// segments are removed later by the reclaimer.
func (p *partition) moveLogStart(off int64) (int64, error) {
	p.lsMu.Lock()
	defer p.lsMu.Unlock()
	if p.lsErr != nil {
		return 0, p.lsErr
	}
	cur := p.logStart.Load()
	if off <= cur {
		return cur, nil
	}
	if hw := p.hw.Load(); off > hw {
		return 0, p.errf("purge to offset %d beyond the high watermark %d: %w", off, hw, ErrOffsetOutOfRange)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(p.dir, logStartFile), strconv.AppendInt(nil, off, 10), dirSync(p.st.opts.Fsync != FsyncNever)); err != nil {
		return 0, p.errf("persist log start offset: %w", err)
	}
	p.logStart.Store(off)
	p.watch.notify()
	p.st.wakeReclaimer()
	return off, nil
}

// info returns the partition's bounds and disk use.
func (p *partition) info() PartitionInfo {
	pi := PartitionInfo{Partition: p.id, LogStartOffset: p.logStart.Load(), HighWatermark: p.hw.Load()}
	p.mu.RLock()
	for _, s := range p.segs {
		pi.SizeBytes += s.size.Load()
	}
	pi.SegmentCount = int32(len(p.segs))
	p.mu.RUnlock()
	return pi
}

// syncIfDirty fsyncs the active segment if appends happened since the last
// sync (fsync mode interval).
func (p *partition) syncIfDirty() {
	if !p.dirty.Swap(false) {
		return
	}
	p.mu.RLock()
	if len(p.segs) == 0 {
		p.mu.RUnlock()
		return
	}
	seg := p.segs[len(p.segs)-1]
	seg.acquire()
	p.mu.RUnlock()
	defer seg.release()
	seg.mu.Lock()
	f := seg.f
	seg.mu.Unlock()
	if f == nil {
		return
	}
	if err := p.st.io.datasync(f); err != nil {
		p.wmu.Lock()
		if p.werr == nil {
			p.werr = p.errf("appends disabled after a failed fsync: %w", err)
		}
		p.wmu.Unlock()
		p.st.log.Error("logstore: fsync failed", "topic", p.topic, "partition", p.id, "err", err)
	}
}

// shutdown stops the partition: later calls fail with err, in-flight appends
// finish first, watchers are woken, and the files are closed once the last
// reader lets go. With flush, the active segment is fsynced.
func (p *partition) shutdown(err error, flush bool) error {
	p.lsMu.Lock()
	p.lsErr = err
	p.wmu.Lock()
	p.werr = err
	for p.leader || len(p.pending) > 0 {
		p.wcond.Wait()
	}
	p.wmu.Unlock()
	p.lsMu.Unlock()

	p.gone.Store(&err)
	p.mu.Lock()
	segs := p.segs
	p.segs = nil
	p.mu.Unlock()
	var ferr error
	if flush && len(segs) > 0 {
		if f := segs[len(segs)-1].f; f != nil { // the leader is gone: no race on f
			ferr = fsutil.Fdatasync(f)
		}
	}
	for _, s := range segs {
		s.release()
	}
	p.watch.shutdown(err)
	return ferr
}
