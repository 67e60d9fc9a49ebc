package logstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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
	st      *FileStore
	topic   string
	topicID string
	id      int32
	dir     string
	conf    *topicConf // the topic's config, which AlterTopic changes

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
	leader    bool  // a goroutine is committing a group (or probing)
	werr      error // sticky: the partition is shut down or offline
	// needRepair: the last commit failed; the next leader first cuts what
	// it may have left in the active segment (repair).
	needRepair bool

	// offlineErr is set by Open (and never changed) when the partition's
	// files failed validation; it wraps ErrOffline.
	offlineErr error
	// failed holds the last storage error while the partition's writes are
	// failing (nil once a write succeeds again): for Offline and readiness.
	failed atomic.Pointer[error]

	mu   sync.RWMutex
	segs []*segment // ascending base offsets; never empty until shutdown

	// keysPending counts sealed segments whose key-index run is missing or
	// damaged and queued for a rebuild; OSO scans wait until it is 0.
	keysPending atomic.Int32

	// Compaction (compact.go). purgedTombs is P: the greatest offset of a
	// tombstone removed while it was the latest of its key (-1: none),
	// persisted in the cleaner-state file before it is stored here, and
	// stored before the segments without that tombstone are listed.
	purgedTombs atomic.Int64
	cleaner     cleanerState  // guarded by the store's cleaner (one goroutine) and Open
	ckMu        sync.Mutex    // serialises checkpoint writes (append leader, cleaner)
	dirtyRatio  atomic.Uint64 // math.Float64bits of the last dirty ratio measured

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
	if err := validateKeys(p.config(), recs); err != nil {
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
	repair := p.needRepair
	p.wmu.Unlock()

	done, err := p.commit(group, buf, repair)
	p.commits.Add(1)

	p.wmu.Lock()
	if err != nil {
		err = p.errf("%w", err)
	}
	for i, r := range group {
		r.done = true
		if i >= done {
			r.err = err
		}
	}
	if err != nil {
		// The requests queued meanwhile were encoded at offsets after the
		// failed ones; committing them would leave a gap. They fail too
		// (ErrStorage is retryable) and offsets are reserved again from the
		// high watermark, so they stay dense.
		for _, r := range p.pending {
			r.done, r.err = true, err
		}
		clear(p.pending)
		p.pending = p.pending[:0]
		p.fill = p.fill[:0]
		p.next = p.hw.Load()
		p.needRepair = true
		if p.failed.Swap(&err) == nil { // once per failing period, not per request
			p.st.log.Error("logstore: append failed; the partition retries on the next append",
				"topic", p.topic, "partition", p.id, "high_watermark", p.next, "err", err)
		}
	} else {
		p.needRepair = false
		p.clearFailed()
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
// It returns how many requests of the group are committed: on an error the
// requests written (and synced per the fsync mode) before it succeed, the
// others fail. Nothing that failed is indexed or published; whatever it
// left in the file after the active segment's wpos is cut by the next
// leader's repair.
func (p *partition) commit(group []*appendReq, buf []byte, repair bool) (int, error) {
	if repair {
		if err := p.repair(); err != nil {
			return 0, err
		}
	}
	durable := p.st.durable()
	active := p.active()
	cfg := p.config()
	// segment.ms: a non-empty active segment opened that long ago rolls
	// before this group's first batch.
	aged := p.st.opts.Now().UnixMilli()-active.opened >= cfg.WithDefaults().SegmentMs
	pieceStart := 0
	for i, r := range group {
		// Roll before a batch that would overflow a non-empty segment; a
		// batch never spans segments, so every segment ends on a batch end.
		if used := active.wpos + int64(r.start-pieceStart); used > 0 && (used+int64(r.end-r.start) > cfg.SegmentBytes || i == 0 && aged) {
			// The full segment is synced before it is sealed (fsync modes
			// always and interval), so sealed segments are durable.
			if err := p.writePiece(active, buf[pieceStart:r.start], durable); err != nil {
				return i - p.countIn(group[:i], pieceStart), err
			}
			if i > 0 {
				p.publish(group[i-1])
			}
			next, err := p.roll(active, r.base)
			if err != nil {
				return i, err
			}
			active, pieceStart = next, r.start
		}
	}
	if err := p.writePiece(active, buf[pieceStart:], p.st.opts.Fsync == FsyncAlways); err != nil {
		return len(group) - p.countIn(group, pieceStart), err
	}
	if p.st.opts.Fsync == FsyncInterval {
		p.dirty.Store(true)
	}
	p.publish(group[len(group)-1])
	return len(group), nil
}

// countIn counts the requests of group whose frames start at or after
// pieceStart (those of the piece being written).
func (p *partition) countIn(group []*appendReq, pieceStart int) int {
	n := 0
	for _, r := range group {
		if r.start >= pieceStart {
			n++
		}
	}
	return n
}

// publish moves the high watermark past r and wakes watchers.
func (p *partition) publish(r *appendReq) {
	p.hw.Store(r.base + int64(r.n))
	p.watch.notify()
}

// repair re-validates the active segment after a failed commit: it cuts
// whatever the failed write left after the last committed frame (wpos,
// which only moves after a successful write), reopening the file if its
// handle is what failed, and syncs the result. The in-memory indexes never
// saw the failed frames, so they need nothing.
func (p *partition) repair() error {
	seg := p.active()
	if !seg.created.Load() {
		return nil // never created: nothing on disk to fix
	}
	f, err := seg.pin()
	if err != nil {
		return err
	}
	defer seg.unpin()
	if err := p.st.fs.truncate(f, seg.wpos); err != nil {
		nf, oerr := p.st.fs.openFile(seg.logPath(), os.O_RDWR, 0)
		if oerr != nil {
			return errors.Join(err, oerr)
		}
		if err := p.st.fs.truncate(nf, seg.wpos); err != nil {
			nf.Close()
			return err
		}
		seg.mu.Lock()
		// Readers may still use the old handle: it is closed with the segment.
		if old := seg.fc.swap(&seg.fd, nf); old != nil {
			seg.retired = append(seg.retired, old)
		}
		seg.mu.Unlock()
		f = nf
	}
	if p.st.durable() {
		if err := p.st.fs.datasync(f); err != nil {
			return err
		}
	}
	return nil
}

// probe retries a failing partition without waiting for an append (the
// reclaimer calls it), so that readiness recovers once the cause is gone
// even if no client retries meanwhile: it repairs the active segment and
// writes, syncs and removes a small file in the partition directory.
func (p *partition) probe() {
	p.wmu.Lock()
	if p.leader || p.werr != nil || p.failed.Load() == nil {
		p.wmu.Unlock()
		return
	}
	p.leader = true
	repair := p.needRepair
	p.wmu.Unlock()

	var err error
	if repair {
		err = p.repair()
	}
	if err == nil {
		err = p.probeWrite()
	}

	p.wmu.Lock()
	if err == nil {
		p.needRepair = false
		p.clearFailed()
	}
	p.leader = false
	p.wcond.Broadcast()
	p.wmu.Unlock()
}

// probeFile is written and removed by probe; a leftover (*.tmp) is removed
// at Open.
const probeFile = "probe" + tmpSuffix

func (p *partition) probeWrite() error {
	path := p.path(probeFile)
	f, err := p.st.fs.openFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	if err := p.st.fs.writeAt(f, make([]byte, 4096), 0); err != nil {
		return err
	}
	if p.st.durable() {
		if err := p.st.fs.datasync(f); err != nil {
			return err
		}
		// With the file still open, as a roll holds the new segment open
		// while it syncs the directory: the probe needs the descriptors a
		// roll needs, or it would declare a partition healthy that still
		// cannot roll (one descriptor free, two needed).
		return p.st.fs.syncDir(p.dir)
	}
	return nil
}

// clearFailed ends a failing period (logged once).
func (p *partition) clearFailed() {
	if p.failed.Swap(nil) != nil {
		p.st.log.Info("logstore: partition writes work again", "topic", p.topic, "partition", p.id)
	}
}

func (p *partition) path(name string) string { return filepath.Join(p.dir, name) }

// active returns the active segment. Only the leader and shutdown may call
// it while the partition is open.
func (p *partition) active() *segment {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.segs[len(p.segs)-1]
}

// writePiece writes frames to seg with one write (creating the segment's
// file first if needed), syncs them if sync, indexes them and publishes the
// segment's new size (not yet the high watermark). On an error nothing is
// indexed and wpos does not move.
func (p *partition) writePiece(seg *segment, b []byte, sync bool) error {
	if len(b) == 0 {
		if sync && seg.created.Load() && p.st.opts.Fsync == FsyncInterval {
			// A roll right at the start of a group: the segment holds
			// earlier groups' data that mode interval has not synced yet,
			// and it must be synced before it is sealed.
			f, err := seg.pin()
			if err != nil {
				return err
			}
			defer seg.unpin()
			return p.st.fs.datasync(f)
		}
		return nil
	}
	if !seg.created.Load() { // only the leader creates the active segment's file
		if err := seg.create(); err != nil {
			return err
		}
	}
	// Pinned for the write and its sync: the cache must not close the
	// handle in between (fdcache.go).
	f, err := seg.pin()
	if err != nil {
		return err
	}
	defer seg.unpin()
	if seg.needDirSync {
		if p.st.durable() {
			if err := p.st.fs.syncDir(p.dir); err != nil {
				return err
			}
		}
		seg.needDirSync = false
	}
	at := seg.wpos
	if err := p.st.fs.writeAt(f, b, at); err != nil {
		return err
	}
	if sync {
		if err := p.st.fs.datasync(f); err != nil {
			return err
		}
	}
	seg.wpos += int64(len(b))
	seg.mu.Lock()
	// The key index learns the records before the high watermark passes
	// them. Lock order: segment.mu, then memIndex.mu.
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

// roll seals the full active segment (already synced by writePiece in the
// durable modes) and starts a new one at base. The new file is created
// first: if that fails, old stays the active segment, untouched. Index
// files and the checkpoint are rebuildable, so failing to write them is
// logged, not fatal.
func (p *partition) roll(old *segment, base int64) (*segment, error) {
	durable := p.st.durable()
	seg := p.newSegment(base)
	if err := seg.create(); err != nil {
		return nil, err
	}
	if durable {
		if err := p.st.fs.syncDir(p.dir); err != nil {
			seg.release()
			_ = os.Remove(seg.logPath()) // a leftover is empty: truncated by the next create, or an empty segment at Open
			return nil, err
		}
	}
	seg.needDirSync = false
	old.synced.Store(durable)
	if err := old.seal(durable); err != nil {
		p.st.log.Warn("logstore: writing the indexes of a sealed segment; they are rebuilt when needed",
			"topic", p.topic, "partition", p.id, "segment", old.base, "err", err)
	}
	p.sealKeys(old)
	p.mu.Lock()
	p.segs = append(p.segs, seg)
	p.mu.Unlock()
	if err := p.writeCheckpoint(base, false); err != nil {
		p.st.log.Warn("logstore: writing the partition checkpoint; Open will rescan what it does not cover",
			"topic", p.topic, "partition", p.id, "err", err)
	}
	// Everything below base is on disk (synced above in the durable
	// modes): the data directory manifest may record it (manifest.go).
	p.noteHW(base)
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

// damageAt describes the damage found at byte pos of seg while expecting
// offset expect: it resyncs on the next valid frame below endOff (the
// segment's end offset). Results for sealed segments are remembered, so
// reads past a damaged frame do not search again.
func (p *partition) damageAt(seg *segment, f *os.File, pos, expect, endOff int64, cause error) (damage, error) {
	seg.mu.Lock()
	sealed := seg.sealed
	for _, d := range seg.damages {
		if d.pos == pos {
			seg.mu.Unlock()
			return d, nil
		}
	}
	seg.mu.Unlock()
	next, noff, ok, err := resync(f, pos, seg.size.Load(), expect, endOff)
	if err != nil {
		return damage{}, err
	}
	d := damage{pos: pos, next: -1, from: expect, to: endOff - 1, err: cause}
	if ok {
		d.next, d.to = next, noff-1
	}
	if sealed {
		seg.mu.Lock()
		if len(seg.damages) < maxDamages {
			seg.damages = append(seg.damages, d)
		}
		seg.mu.Unlock()
	}
	return d, nil
}

// maxDamages bounds the damaged stretches remembered per segment.
const maxDamages = 64

// corruptErr is the error reads return for d.
func (p *partition) corruptErr(seg *segment, d damage) error {
	return &CorruptError{Topic: p.topic, Partition: p.id, File: seg.logPath(), Pos: d.pos, From: d.from, To: d.to, Err: d.err}
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
		cur, err = r.scanSegment(p, seg, cur, end, hw)
		seg.release()
		if err != nil {
			if errors.Is(err, ErrCorrupt) && len(r.out) > 0 {
				break // return the good records; the next read reports the damage
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
	copied     int // out[:copied] no longer alias the scratch buffer
}

// scanSegment appends seg's records from offset cur on and returns the
// offset after the last one appended. end is the segment's end offset (the
// next segment's base, or hw). A damaged frame holding offsets at or after
// cur is a *CorruptError; damage wholly before cur is stepped over by
// resynchronising on the next valid frame.
func (r *reader) scanSegment(p *partition, seg *segment, cur, end, hw int64) (int64, error) {
	f, err := seg.pin()
	if err != nil {
		return cur, err // e.g. EMFILE: a storage error, retryable
	}
	defer seg.unpin()
	pos, expect, err := seg.lookupOffset(cur)
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
	defer func() { sc.close() }()
	defer r.detach()
	for !r.full {
		fr, fpos, err := sc.next()
		if errors.Is(err, io.EOF) {
			return cur, nil
		}
		var rec Record
		if err == nil {
			// Frames before the wanted offset are skipped by their offset
			// field alone: damage there is not this read's business. The
			// density check below catches a damaged offset field that would
			// make us skip the wanted record.
			if off := int64(beUint64(fr[offFieldOffset:])); off < cur {
				expect = off + 1
				continue
			}
			_, _, err = decodeFrame(fr, &rec)
		}
		if err == nil && rec.Offset >= hw {
			r.full = true
			break
		}
		if err == nil && rec.Offset != cur && !(seg.sparse && rec.Offset > cur && rec.Offset < end) {
			// A compacted segment skips the offsets of removed records.
			err = fmt.Errorf("%w: offset %d where %d was expected", errBadFrame, rec.Offset, cur)
		}
		if err != nil {
			if !errors.Is(err, errBadFrame) && !errors.Is(err, errShortFrame) {
				return cur, err
			}
			// errShortFrame below the HW is damage too.
			d, derr := p.damageAt(seg, f, fpos, expect, end, err)
			if derr != nil {
				return cur, derr
			}
			if d.next < 0 || cur <= d.to {
				return cur, p.corruptErr(seg, d)
			}
			// The damage lies wholly before cur: resume at the next valid frame.
			r.detach()
			sc.close()
			sc = newScanner(f, d.next, seg.size.Load(), 0)
			sc.onRefill = r.detach
			expect = d.to + 1
			continue
		}
		sz := rec.Size()
		if len(r.out) > 0 && r.bytes+sz > r.maxBytes {
			r.full = true
			break
		}
		r.bytes += sz
		r.out = append(r.out, rec)
		cur = rec.Offset + 1
		expect = cur
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
		off, fts, err := p.findTimestamp(seg, cur, end, hw, ts)
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
func (p *partition) findTimestamp(seg *segment, from, end, hw, ts int64) (int64, int64, error) {
	maxTs, start, err := seg.timeLookup(ts)
	if err != nil || maxTs < ts {
		return -1, -1, err
	}
	start = max(start, from)
	pos, prev, err := seg.lookupOffset(start)
	if err != nil {
		return -1, -1, err
	}
	f, err := seg.pin()
	if err != nil {
		return -1, -1, err
	}
	defer seg.unpin()
	sc := newScanner(f, pos, seg.size.Load(), 0)
	defer sc.close()
	// A damaged frame fails the search: a record hidden in it might be the
	// answer. The error carries the unreadable range.
	damaged := func(fpos, expect int64, cause error) error {
		d, err := p.damageAt(seg, f, fpos, expect, min(end, hw), cause)
		if err != nil {
			return err
		}
		return p.corruptErr(seg, d)
	}
	for expect := start; ; expect++ {
		fr, fpos, err := sc.next()
		if errors.Is(err, io.EOF) {
			return -1, -1, nil
		}
		if err != nil {
			return -1, -1, damaged(fpos, min(prev, expect), err)
		}
		if off := int64(beUint64(fr[offFieldOffset:])); off < start {
			prev = off + 1
			expect--
			continue // before the search range: skipped unchecked, as in read
		}
		_, fi, err := decodeFrame(fr, nil)
		if err != nil {
			return -1, -1, damaged(fpos, min(prev, expect), err)
		}
		if fi.offset >= hw {
			return -1, -1, nil
		}
		if seg.sparse && fi.offset > expect && fi.offset < end {
			expect = fi.offset // offsets removed by compaction
		}
		if fi.offset != expect { // as in read: a damaged offset field must not hide a record
			return -1, -1, damaged(fpos, min(prev, expect), fmt.Errorf("%w: offset %d where %d was expected", errBadFrame, fi.offset, expect))
		}
		prev = fi.offset + 1
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
	if err := p.st.fs.writeFileAtomic(filepath.Join(p.dir, logStartFile), strconv.AppendInt(nil, off, 10), dirSync(p.st.durable())); err != nil {
		// The log start stays where it was; the purge can be retried.
		err = p.errf("persist log start offset: %w", err)
		p.failed.Store(&err)
		return 0, err
	}
	p.clearFailed()
	p.logStart.Store(off)
	p.watch.notify()
	p.st.wakeReclaimer()
	return off, nil
}

// info returns the partition's bounds and disk use.
func (p *partition) info() PartitionInfo {
	if p.offlineErr != nil {
		return PartitionInfo{Partition: p.id, Err: p.offlineErr}
	}
	pi := PartitionInfo{Partition: p.id, LogStartOffset: p.logStart.Load(), HighWatermark: p.hw.Load(), PurgedTombstonesBelow: p.purgedTombs.Load() + 1}
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
	if !seg.created.Load() {
		return
	}
	// The file may have been closed by the cache since the append: the
	// fsync of a new handle writes back what the old one wrote (fdcache.go).
	f, err := seg.pin()
	if err == nil {
		defer seg.unpin()
		err = p.st.fs.datasync(f)
	}
	if err != nil {
		err = p.errf("%w", err)
		p.wmu.Lock()
		// The next leader (or the probe) syncs again before anything else.
		p.needRepair = true
		p.failed.Store(&err)
		p.wmu.Unlock()
		p.dirty.Store(true)
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
	p.mu.RLock()
	segs := p.segs
	p.mu.RUnlock()
	var ferr error
	if flush && len(segs) > 0 && p.offlineErr == nil && p.failed.Load() == nil {
		// The list is still in place for writeCheckpoint; nobody appends.
		ferr = p.flush(segs)
	}
	p.mu.Lock()
	p.segs = nil
	p.mu.Unlock()
	for _, s := range segs {
		s.release()
	}
	p.watch.shutdown(err)
	return ferr
}

// flush makes everything durable for a clean Close: the active segment, in
// fsync mode never also the sealed segments not synced yet, then the
// checkpoint records the final high watermark with every segment synced.
func (p *partition) flush(segs []*segment) error {
	for i, s := range segs {
		if i < len(segs)-1 && s.synced.Load() {
			continue
		}
		if i == len(segs)-1 && !s.created.Load() {
			continue // an active segment whose file the first append has not created
		}
		f, err := s.pin()
		if err != nil {
			return p.errf("%w", err)
		}
		err = p.st.fs.datasync(f)
		s.unpin()
		if err != nil {
			return p.errf("%w", err)
		}
		s.synced.Store(true)
	}
	if err := p.writeCheckpoint(p.hw.Load(), true); err != nil {
		return p.errf("%w", err)
	}
	return nil
}
