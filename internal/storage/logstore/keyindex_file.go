package logstore

import (
	"bytes"
	"context"
	"os"
	"sync"
)

var _ KeyIndexer = (*FileStore)(nil)

// keyRebuilder rebuilds missing or damaged key-index runs in the background
// (one goroutine per store, started by Open).
type keyRebuilder struct {
	mu   sync.Mutex
	jobs []keyJob
	wake chan struct{} // buffered 1
}

type keyJob struct {
	p   *partition
	seg *segment
}

// rebuildHook, when set (tests), runs before each run rebuild.
var rebuildHook func()

// queueKeyRebuild marks seg's run missing and queues its rebuild; until it
// is done the partition's scans fail with ErrIndexNotReady.
func (p *partition) queueKeyRebuild(seg *segment) {
	p.keysPending.Add(1)
	r := &p.st.keys
	r.mu.Lock()
	r.jobs = append(r.jobs, keyJob{p, seg})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// keyLoop runs queued rebuilds until the store closes.
func (s *FileStore) keyLoop() {
	defer s.wg.Done()
	for {
		s.keys.mu.Lock()
		var job keyJob
		ok := len(s.keys.jobs) > 0
		if ok {
			job = s.keys.jobs[0]
			s.keys.jobs = s.keys.jobs[1:]
		}
		s.keys.mu.Unlock()
		if !ok {
			select {
			case <-s.stop:
				return
			case <-s.keys.wake:
			}
			continue
		}
		select {
		case <-s.stop:
			return
		default:
		}
		if rebuildHook != nil {
			rebuildHook()
		}
		if err := job.p.rebuildRun(job.seg); err != nil {
			if job.p.closedErr() == nil {
				s.log.Error("logstore: rebuilding key index run failed; OSO stays off for the partition until restart",
					"topic", job.p.topic, "partition", job.p.id, "segment", job.seg.base, "err", err)
			}
			continue
		}
		job.p.keysPending.Add(-1)
	}
}

// rebuildRun scans a sealed segment and writes its key-index run. If the
// file cannot be written the index stays in memory and serves scans.
func (p *partition) rebuildRun(seg *segment) error {
	if err := p.closedErr(); err != nil {
		return err
	}
	p.mu.RLock()
	listed := false
	for _, s := range p.segs {
		if s == seg {
			listed = true
			seg.acquire()
			break
		}
	}
	p.mu.RUnlock()
	if !listed {
		return nil // reclaimed meanwhile: nothing to index
	}
	defer seg.release()
	f, err := seg.pin()
	if err != nil {
		return err
	}
	defer seg.unpin()
	mem := newMemIndex()
	seg.mu.Lock()
	end := seg.end
	seg.mu.Unlock()
	// As rebuildLocked: damaged frames are stepped over, and reads reaching
	// them report the damage.
	if _, err := walkFrames(f, seg.size.Load(), seg.base, end, seg.sparse, func(fr []byte, pos int64, fi frameInfo) {
		if key, tomb, ok := frameKey(fr); ok {
			mem.add(key, fi.offset, tomb, frameLoc(pos, len(fr)))
		}
	}); err != nil {
		return err
	}
	seg.mu.Lock()
	seg.mem = mem
	seg.mu.Unlock()
	p.sealKeys(seg)
	return nil
}

// sealKeys writes a sealed segment's in-memory key index as its run file
// and then serves scans from the file. A failed write is logged and leaves
// the index in memory (Open rebuilds the file next time).
func (p *partition) sealKeys(seg *segment) {
	seg.mu.Lock()
	mem, path, deleted := seg.mem, seg.path(keysSuffix), seg.deleted
	seg.mu.Unlock()
	if mem == nil || deleted {
		return
	}
	ri, err := writeRun(path, seg.base, mem)
	if err != nil {
		p.st.log.Warn("logstore: writing key index run; keeping it in memory", "topic", p.topic, "partition", p.id, "segment", seg.base, "err", err)
		return
	}
	seg.mu.Lock()
	if !seg.deleted {
		seg.run, seg.mem = ri, nil
	}
	seg.mu.Unlock()
}

// runCorrupt takes a run that failed a block checksum out of service and
// queues its rebuild.
func (p *partition) runCorrupt(seg *segment) {
	seg.mu.Lock()
	had := seg.run != nil
	seg.run = nil
	seg.mu.Unlock()
	if had {
		p.st.log.Error("logstore: key index run failed its checksum; rebuilding", "topic", p.topic, "partition", p.id, "segment", seg.base)
		p.queueKeyRebuild(seg)
	}
}

// scanKeys implements KeyIndexer.ScanKeys: one source per segment that may
// hold offsets in [log start, end), merged by key.
func (p *partition) scanKeys(prefix []byte, end int64) (KeyCursor, error) {
	if err := p.closedErr(); err != nil {
		return nil, err
	}
	if p.keysPending.Load() > 0 {
		return nil, p.errf("%w", ErrIndexNotReady)
	}
	ls := p.logStart.Load()
	p.mu.RLock()
	var segs []*segment
	for i, s := range p.segs {
		if s.base >= end {
			break
		}
		if i+1 < len(p.segs) && p.segs[i+1].base <= ls {
			continue // wholly below the log start
		}
		s.acquire()
		segs = append(segs, s)
	}
	p.mu.RUnlock()
	release := func() {
		for _, s := range segs {
			s.release()
		}
	}
	prefix = bytes.Clone(prefix)
	iters := make([]keyIter, 0, len(segs))
	fail := func(err error) (KeyCursor, error) {
		for _, it := range iters {
			it.close()
		}
		release()
		return nil, err
	}
	for _, s := range segs {
		s.mu.Lock()
		mem, ri := s.mem, s.run
		var f *os.File
		var err error
		if mem == nil && ri != nil {
			f, err = os.Open(s.path(keysSuffix))
		}
		s.mu.Unlock()
		switch {
		case mem != nil:
			iters = append(iters, &segIter{newMemIter(mem, prefix, end), s})
		case ri == nil:
			return fail(p.errf("%w", ErrIndexNotReady))
		case err != nil:
			return fail(p.errf("open key index run: %w", err))
		default:
			it := newRunIter(f, ri, prefix, end)
			it.onCorrupt = func() { p.runCorrupt(s) }
			iters = append(iters, &segIter{it, s})
		}
	}
	return newMergeCursor(iters, release), nil
}

// rangeStats implements KeyIndexer.RangeStats from segment sizes and the
// sparse offset indexes (accurate to about indexInterval per end).
func (p *partition) rangeStats(from, end int64) (int64, int64, error) {
	if err := p.closedErr(); err != nil {
		return 0, 0, err
	}
	hw := p.hw.Load()
	from, end = max(from, p.logStart.Load()), min(end, hw)
	if from >= end {
		return 0, 0, nil
	}
	type span struct {
		seg    *segment
		segEnd int64
	}
	var spans []span
	p.mu.RLock()
	for i, s := range p.segs {
		segEnd := hw
		if i+1 < len(p.segs) {
			segEnd = p.segs[i+1].base
		}
		if segEnd <= from || s.base >= end {
			continue
		}
		s.acquire()
		spans = append(spans, span{s, segEnd})
	}
	p.mu.RUnlock()
	var size int64
	var err error
	for _, sp := range spans {
		lo, hi := int64(0), sp.seg.size.Load()
		if from > sp.seg.base && err == nil {
			lo, err = sp.seg.lookup(from)
		}
		if end < sp.segEnd && err == nil {
			hi, err = sp.seg.lookup(end)
		}
		size += max(hi-lo, 0)
		sp.seg.release()
	}
	if err != nil {
		return 0, 0, err
	}
	return end - from, size, nil
}

// segmentEnd implements KeyIndexer.SegmentEnd.
func (p *partition) segmentEnd(off int64) (int64, error) {
	if err := p.closedErr(); err != nil {
		return 0, err
	}
	hw := p.hw.Load()
	if off >= hw {
		return hw, nil
	}
	seg, end, err := p.acquire(max(off, 0), hw)
	if err != nil {
		return 0, err
	}
	seg.release()
	return end, nil
}

// TopicID implements KeyIndexer.
func (s *FileStore) TopicID(name string) (string, error) { return s.topics.TopicID(name) }

// ScanKeys implements KeyIndexer.
func (s *FileStore) ScanKeys(ctx context.Context, topic string, partition int32, prefix []byte, end int64) (KeyCursor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return nil, err
	}
	return p.scanKeys(prefix, end)
}

// RangeStats implements KeyIndexer.
func (s *FileStore) RangeStats(topic string, partition int32, from, end int64) (int64, int64, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	return p.rangeStats(from, end)
}

// PurgedTombstonesBelow implements KeyIndexer.
func (s *FileStore) PurgedTombstonesBelow(topic string, partition int32) (int64, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, err
	}
	if err := p.closedErr(); err != nil {
		return 0, err
	}
	return p.purgedTombs.Load() + 1, nil
}

// SegmentEnd implements KeyIndexer.
func (s *FileStore) SegmentEnd(topic string, partition int32, offset int64) (int64, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, err
	}
	return p.segmentEnd(offset)
}

var (
	_ EntryReader = (*FileStore)(nil)
	_ KeyCounter  = (*FileStore)(nil)
)

// readEntry implements EntryReader.ReadEntry: one pread of the frame at the
// entry's location, checked (length, CRC, offset); anything else goes the
// offset path of read.
func (p *partition) readEntry(ent KeyEntry) (Record, error) {
	if err := p.closedErr(); err != nil {
		return Record{}, err
	}
	hw := p.hw.Load()
	if ent.loc.size >= minFrameSize && int64(ent.loc.size) <= MaxRecordBytes &&
		ent.Offset >= p.logStart.Load() && ent.Offset < hw {
		// The segment version the cursor read first (compaction may have
		// replaced it since; the cursor keeps it alive), then the current one.
		if seg := ent.seg; seg != nil && seg.tryAcquire() {
			rec, ok := readFrameAt(seg, ent.Offset, ent.loc)
			seg.release()
			if ok {
				return rec, nil
			}
		}
		if seg, _, err := p.acquire(ent.Offset, hw); err == nil {
			rec, ok := readFrameAt(seg, ent.Offset, ent.loc)
			seg.release()
			if ok {
				return rec, nil
			}
		}
	}
	recs, err := p.read(ent.Offset, 1, 1)
	if err != nil {
		return Record{}, err
	}
	if len(recs) == 0 || recs[0].Offset != ent.Offset {
		// Compaction removed the record (a later one of its key exists).
		return Record{}, p.errf("offset %d holds no record any more (removed by compaction): %w", ent.Offset, ErrOffsetOutOfRange)
	}
	return recs[0], nil
}

// readFrameAt reads the record at offset from seg at loc; ok is false if
// that is not where it is (the caller falls back to the offset path, which
// also reports real damage).
func readFrameAt(seg *segment, offset int64, loc recLoc) (Record, bool) {
	if int64(loc.pos)+int64(loc.size) > seg.size.Load() {
		return Record{}, false
	}
	f, err := seg.pin()
	if err != nil {
		return Record{}, false
	}
	defer seg.unpin()
	buf := make([]byte, loc.size)
	if _, err := f.ReadAt(buf, int64(loc.pos)); err != nil {
		return Record{}, false
	}
	var rec Record
	n, fi, err := decodeFrame(buf, &rec)
	if err != nil || n != len(buf) || fi.offset != offset {
		return Record{}, false
	}
	return rec, true
}

// countKeys implements KeyCounter.CountKeys from the runs' block indexes
// (per-block key counts) and a walk of in-memory indexes.
func (p *partition) countKeys(prefix []byte, end, limit int64) (int64, int64, error) {
	if err := p.closedErr(); err != nil {
		return 0, 0, err
	}
	if p.keysPending.Load() > 0 {
		return 0, 0, p.errf("%w", ErrIndexNotReady)
	}
	type src struct {
		seg   *segment
		below bool // every offset of the segment is below end
	}
	ls := p.logStart.Load()
	p.mu.RLock()
	var srcs []src
	for i, s := range p.segs {
		if s.base >= end {
			break
		}
		if i+1 < len(p.segs) && p.segs[i+1].base <= ls {
			continue // wholly below the log start
		}
		s.acquire()
		srcs = append(srcs, src{s, i+1 < len(p.segs) && p.segs[i+1].base <= end})
	}
	p.mu.RUnlock()
	defer func() {
		for _, s := range srcs {
			s.seg.release()
		}
	}()
	var lo, hi int64
	for _, s := range srcs {
		s.seg.mu.Lock()
		mem, ri := s.seg.mem, s.seg.run
		s.seg.mu.Unlock()
		switch {
		case mem != nil:
			n := mem.count(prefix, end, limit)
			lo, hi = max(lo, n), hi+n
		case ri == nil:
			return 0, 0, p.errf("%w", ErrIndexNotReady)
		default:
			l, h := ri.countPrefix(prefix)
			if !s.below {
				l = 0
			}
			lo, hi = max(lo, l), hi+h
		}
		if lo >= limit {
			break
		}
	}
	return lo, max(lo, hi), nil
}

// ReadEntry implements EntryReader.
func (s *FileStore) ReadEntry(ctx context.Context, topic string, partition int32, ent KeyEntry) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return Record{}, err
	}
	return p.readEntry(ent)
}

// CountKeys implements KeyCounter.
func (s *FileStore) CountKeys(ctx context.Context, topic string, partition int32, prefix []byte, end, limit int64) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	return p.countKeys(prefix, end, limit)
}
