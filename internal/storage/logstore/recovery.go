package logstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// load reads every topic under topicsDir (Open's recovery). Nothing it
// cannot explain is deleted: a topic directory without a valid meta.json,
// or an unexpected file, is moved to the quarantine directory. A partition
// whose files fail validation goes offline on its own; the rest of the
// store opens normally.
func (s *FileStore) load() error {
	entries, err := os.ReadDir(s.topicsDir)
	if err != nil {
		return err
	}
	loaded := map[string]bool{}        // topic ids loaded
	quarantined := map[string]string{} // topic id -> why its directory was quarantined
	for _, e := range entries {
		path := filepath.Join(s.topicsDir, e.Name())
		if strings.HasSuffix(e.Name(), deletedSuffix) || strings.HasSuffix(e.Name(), tmpSuffix) {
			// A deletion interrupted between rename and removal, or a
			// creation interrupted before its final rename (nothing in it
			// was ever acknowledged).
			if err := os.RemoveAll(path); err != nil {
				return err
			}
			continue
		}
		if !e.IsDir() {
			s.quarantineOrKeep(path, "unexpected file among the topics")
			continue
		}
		meta, err := readMeta(filepath.Join(path, metaFile))
		if err != nil {
			// Topics are created under <id>.tmp and renamed once meta.json
			// is in place, so this is damage, not an interrupted creation.
			why := fmt.Sprintf("topic directory without a valid meta.json (%v)", err)
			quarantined[e.Name()] = why
			s.quarantineOrKeep(path, why)
			continue
		}
		if meta.ID != e.Name() {
			why := fmt.Sprintf("meta.json names topic id %q, not its directory's", meta.ID)
			quarantined[e.Name()] = why
			s.quarantineOrKeep(path, why)
			continue
		}
		if other, err := s.topics.Lookup(meta.Name); err == nil {
			return fmt.Errorf("topic %q is stored twice, with ids %s and %s", meta.Name, other.info.ID, meta.ID)
		}
		t, err := s.openTopic(meta, path)
		if err != nil {
			return fmt.Errorf("topic %q: %w", meta.Name, err)
		}
		if err := s.topics.Add(t); err != nil {
			t.shutdown(ErrClosed, false)
			return err
		}
		loaded[meta.ID] = true
	}
	return s.reconcileManifest(loaded, quarantined)
}

// quarantineOrKeep quarantines path; if even that fails it is left in
// place (and ignored), with an ERROR.
func (s *FileStore) quarantineOrKeep(path, why string) {
	if err := s.quarantine(path, why); err != nil {
		s.log.Error("logstore: ignoring what cannot be explained, and cannot be moved to quarantine: "+why,
			"path", path, "err", err, "action", "inspect it and move it out of the data directory (see docs/operations.md)")
	}
}

func readMeta(path string) (topicMeta, error) {
	var m topicMeta
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	if m.Version != metaVersion {
		return m, fmt.Errorf("%s: unsupported version %d", path, m.Version)
	}
	cfg, err := normalizeTopic(m.Name, m.Partitions, m.Config.topicConfig())
	if err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	m.Config = metaConfig(cfg)
	return m, nil
}

func (s *FileStore) openTopic(m topicMeta, dir string) (*topic, error) {
	t := &topic{
		info: TopicInfo{Name: m.Name, ID: m.ID, Partitions: m.Partitions, Config: m.Config.topicConfig()},
		dir:  dir,
		conf: newTopicConf(m.Config.topicConfig(), m.Compacted),
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name, path := e.Name(), filepath.Join(dir, e.Name())
		switch n, err := strconv.Atoi(name); {
		case name == metaFile:
		case strings.HasSuffix(name, tmpSuffix):
			if err := os.RemoveAll(path); err != nil {
				return nil, err
			}
		case err == nil && e.IsDir() && n >= 0 && n < int(m.Partitions) && strconv.Itoa(n) == name:
		case err == nil && e.IsDir() && n >= int(m.Partitions) && strconv.Itoa(n) == name && emptyDir(path):
			// A partition of an AlterTopic interrupted before its
			// meta.json was replaced: never acknowledged, holds nothing.
			s.log.Info("logstore: removing the empty directory of a partition never added", "topic", m.Name, "dir", path)
			if err := os.Remove(path); err != nil {
				return nil, err
			}
		default:
			s.quarantineOrKeep(path, fmt.Sprintf("unexpected entry in the directory of topic %q", m.Name))
		}
	}
	t.parts = make([]*partition, m.Partitions)
	for i := range t.parts {
		p := newPartition(s, t, int32(i))
		t.parts[i] = p
		p.open()
	}
	return t, nil
}

// open recovers a partition directory (see doc.go, Recovery). If its files
// fail validation the partition goes offline: every call on it fails with
// an error wrapping ErrOffline, and its files are left as they are.
func (p *partition) open() {
	err := p.load()
	if err == nil {
		// What the manifest may record (manifest.go): in the durable modes
		// recovery synced the recovered tail; with fsync never only what a
		// roll sealed is known.
		hw := p.hw.Load()
		if !p.st.durable() {
			hw = p.segs[len(p.segs)-1].base
		}
		p.noteHW(hw)
		return
	}
	p.setOffline(err, true)
}

// setOffline makes the partition offline for good (this Open): every call
// on it fails with err, wrapped with ErrOffline. log: with the ERROR line
// of a partition whose files failed validation.
func (p *partition) setOffline(err error, log bool) {
	for _, s := range p.segs {
		s.release()
	}
	p.segs = nil
	err = fmt.Errorf("topic %q partition %d is offline: %w: %w", p.topic, p.id, err, ErrOffline)
	p.offlineErr = err
	p.werr, p.lsErr = err, err
	p.gone.Store(&err)
	p.watch.shutdown(err)
	if log {
		p.st.log.Error("logstore: partition offline", "topic", p.topic, "partition", p.id, "dir", p.dir, "err", err,
			"action", "its files were left untouched; restore the named file from a backup or replica and restart, or delete the topic, or restart once with --repair-accept-loss if the data directory manifest reports lost records (see docs/operations.md)")
	}
}

// maxSaneOffset bounds offsets read from disk: no log gets near 2^62
// records, so anything above is damage, and later arithmetic cannot
// overflow.
const maxSaneOffset = 1 << 62

// load does open's work: it returns why the partition cannot be served.
//   - *.deleted and *.tmp files are removed; unknown files are quarantined;
//   - the segment files are checked against the checkpoint (none missing
//     or of another size, unless wholly below the log start) and against
//     each other (each base is the previous segment's end);
//   - sealed segments not covered by the checkpoint, and after an unclean
//     shutdown those not known fsynced, are rescanned frame by frame;
//   - the active (last) segment is scanned and cut after the last whole,
//     checksum-valid, contiguous batch (never below the checkpoint's high
//     watermark);
//   - the log start is checked against the checkpoint and the high
//     watermark.
func (p *partition) load() error {
	if _, err := os.Stat(p.dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("partition directory %s is missing; it is not recreated empty, which would restart its offsets at 0", p.dir)
		}
		return err
	}
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return err
	}
	// A compaction swap a crash interrupted is completed first (its
	// cleaned segment was synced before it was named *.swap).
	swapped, rewritten, err := p.completeSwaps(entries)
	if err != nil {
		return fmt.Errorf("completing a compaction swap: %w", err)
	}
	if rewritten {
		if entries, err = os.ReadDir(p.dir); err != nil {
			return err
		}
	}
	var bases []int64
	var indexFiles []string
	ls, lsFound := int64(0), false
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(p.dir, name)
		switch {
		case strings.HasSuffix(name, deletedSuffix), strings.HasSuffix(name, tmpSuffix):
			if err := os.RemoveAll(path); err != nil {
				return err
			}
		case name == logStartFile:
			if ls, err = readLogStart(path); err != nil {
				return err
			}
			lsFound = true
		case name == checkpointFile:
		case name == cleanerStateFile:
			purged, cleaned, err := readCleanerState(path)
			if err != nil {
				return fmt.Errorf("unreadable compaction state: %w; it holds the offset below which compaction removed tombstones, which change streams need (see docs/compaction.md)", err)
			}
			p.purgedTombs.Store(purged)
			p.cleaner.cleanedThrough = cleaned
		case strings.HasSuffix(name, logSuffix) && !e.IsDir():
			b, ok := parseBase(name, logSuffix)
			if !ok {
				p.st.quarantineOrKeep(path, "segment file with an invalid name")
				continue
			}
			bases = append(bases, b)
		case (strings.HasSuffix(name, indexSuffix) || strings.HasSuffix(name, timeIndexSuffix) || strings.HasSuffix(name, keysSuffix)) && !e.IsDir():
			indexFiles = append(indexFiles, name)
		default:
			p.st.quarantineOrKeep(path, "unexpected file in a partition directory")
		}
	}
	slices.Sort(bases)
	// Index files of a log that no longer exists (a crash during deletion).
	for _, name := range indexFiles {
		suf := indexSuffix
		switch {
		case strings.HasSuffix(name, timeIndexSuffix):
			suf = timeIndexSuffix
		case strings.HasSuffix(name, keysSuffix):
			suf = keysSuffix
		}
		if b, ok := parseBase(name, suf); !ok || !slices.Contains(bases, b) {
			if err := removeIfExists(filepath.Join(p.dir, name)); err != nil {
				return err
			}
		}
	}

	ckPath := p.path(checkpointFile)
	ck, err := readCheckpoint(ckPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		ck = nil // new or never rolled: every sealed segment is rescanned
	case err != nil:
		return fmt.Errorf("unreadable checkpoint: %w; moving it out of the directory makes the next start rebuild it from a full scan", err)
	}
	if ck != nil {
		// Entries of segments a completed swap replaced are stale unless
		// the checkpoint was written after the swap (it then names the
		// cleaned segment with its size); stale ones are dropped, and the
		// cleaned segment is rescanned like any unlisted one.
		for _, r := range swapped {
			size := int64(-1)
			if st, err := os.Stat(filepath.Join(p.dir, fmt.Sprintf("%020d%s", r[0], logSuffix))); err == nil {
				size = st.Size()
			}
			ck.segs = slices.DeleteFunc(ck.segs, func(e ckptSegment) bool {
				return e.base >= r[0] && e.base < r[1] && !(e.base == r[0] && e.end == r[1] && e.size == size)
			})
		}
	}

	// The log start, against the checkpoint: it never moves back.
	lsPath := p.path(logStartFile)
	if ls > maxSaneOffset {
		return fmt.Errorf("%s: log start offset %d is impossibly large", lsPath, ls)
	}
	if ck != nil && ls < ck.logStart {
		if !lsFound {
			return fmt.Errorf("%s is missing, but %s recorded log start offset %d", lsPath, ckPath, ck.logStart)
		}
		return fmt.Errorf("%s: log start offset %d is below %d recorded in %s", lsPath, ls, ck.logStart, ckPath)
	}

	// The segment files, against the checkpoint, before anything is changed.
	if ck != nil {
		for _, e := range ck.segs {
			if e.end <= ls {
				continue // wholly below the log start: may have been reclaimed
			}
			path := filepath.Join(p.dir, fmt.Sprintf("%020d%s", e.base, logSuffix))
			st, err := os.Stat(path)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("segment file %s is missing (offsets %d to %d, recorded in %s)", path, e.base, e.end-1, ckPath)
			}
			if err != nil {
				return err
			}
			if st.Size() != e.size {
				return fmt.Errorf("segment file %s is %d bytes, but %d were recorded in %s (truncated or overwritten)", path, st.Size(), e.size, ckPath)
			}
		}
	}
	if len(bases) > 0 && bases[0] > ls {
		return fmt.Errorf("the first segment file %s starts at offset %d, but the log start offset is %d: the segment files before it are missing",
			filepath.Join(p.dir, fmt.Sprintf("%020d%s", bases[0], logSuffix)), bases[0], ls)
	}

	durable := p.st.durable()
	changed := ck == nil
	for i, b := range bases {
		seg := p.newSegment(b)
		p.segs = append(p.segs, seg)
		if i == len(bases)-1 {
			break
		}
		seg.sparse = p.conf.sparse.Load() // possibly rewritten by compaction
		next := bases[i+1]
		path := seg.logPath()
		e, listed := ck.find(b)
		if listed && e.end != next {
			return fmt.Errorf("segment file %s ends at offset %d (per %s), but the next segment file starts at %d: the segment files in between are missing or damaged",
				path, e.end, ckPath, next)
		}
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		// Written since the last checkpoint, or not known fsynced after an
		// unclean shutdown: every frame is checked (which rebuilds the
		// indexes too). Segments wholly below the log start are not served.
		rescan := next > ls && (!listed || p.st.unclean && !e.synced)
		res, err := seg.openSealed(st.Size(), next, e.maxTs, listed && !rescan, durable)
		if err != nil {
			return fmt.Errorf("segment %s: %w", path, err)
		}
		seg.synced.Store(listed && e.synced)
		if rescan {
			if err := p.checkRescan(seg, res, next); err != nil {
				return err
			}
			changed = true
		}
		if ri, err := loadRun(seg.path(keysSuffix), b); err == nil {
			seg.run = ri
		} else {
			p.queueKeyRebuild(seg)
		}
	}
	minHW := int64(0)
	if ck != nil {
		minHW = ck.hw
	}
	if len(p.segs) == 0 {
		if minHW > ls {
			return fmt.Errorf("no segment files, but %s recorded high watermark %d", ckPath, minHW)
		}
		// Nothing written yet (or everything lost with fsync never): the
		// active segment starts at the log start; its file comes with the
		// first append.
		p.segs = []*segment{p.newSegment(ls)}
	} else if err := p.recoverActive(p.segs[len(p.segs)-1], minHW); err != nil {
		return err
	}
	active := p.segs[len(p.segs)-1]
	hw := active.end
	// The high watermark, against the data directory manifest: deleting
	// the checkpoint with the last segments must not reuse their offsets.
	ls, accepted, err := p.checkRecordedHW(ls, hw)
	if err != nil {
		return err
	}
	if ls > hw {
		if !accepted && (!p.st.unclean || p.st.opts.Fsync == FsyncAlways) {
			// Every offset below the log start was on disk when the purge
			// was made durable; after a clean shutdown or in fsync mode
			// always they cannot have been lost.
			return fmt.Errorf("%s: log start offset %d is above the high watermark %d", lsPath, ls, hw)
		}
		// The persisted log start is beyond the recovered data (records
		// lost to a crash in fsync mode interval or never after a purge).
		// Offsets must never be reused below the log start: continue at ls
		// in a new segment; the old ones are reclaimed.
		p.st.log.Warn("logstore: log start beyond recovered data, skipping offsets",
			"topic", p.topic, "partition", p.id, "high_watermark", hw, "log_start", ls)
		if active.created.Load() {
			active.wpos = active.size.Load()
			if err := active.seal(durable); err != nil {
				return err
			}
			p.sealKeys(active)
			p.segs = append(p.segs, p.newSegment(ls))
		} else {
			p.segs[len(p.segs)-1] = p.newSegment(ls)
		}
		// The new segment's file exists from now on, so the next Open
		// finds the recovered high watermark even before any append.
		if err := p.segs[len(p.segs)-1].create(); err != nil {
			return err
		}
		if durable {
			if err := p.st.fs.syncDir(p.dir); err != nil {
				return err
			}
		}
		p.segs[len(p.segs)-1].needDirSync = false
		hw = ls
		changed = true
	}
	p.hw.Store(hw)
	p.logStart.Store(ls)
	p.next = hw
	if changed {
		// In the durable modes recoverActive synced the recovered tail.
		ckHW := p.segs[len(p.segs)-1].base
		if durable {
			ckHW = hw
		}
		if err := p.writeCheckpoint(ckHW, false); err != nil {
			p.st.log.Warn("logstore: writing the partition checkpoint", "topic", p.topic, "partition", p.id, "err", err)
		}
	}
	return nil
}

// checkRescan judges the scan of every frame of a sealed segment that Open cannot trust.
// Damage followed by valid frames is logged and left for reads to report
// (as a CorruptError naming the offsets); a segment that does not reach
// the next segment's base has lost records, so the partition goes offline.
func (p *partition) checkRescan(seg *segment, res walkResult, next int64) error {
	path := seg.logPath()
	// A compacted segment may end before the next one starts (its last
	// records were superseded).
	short := res.end != next && !(seg.sparse && res.end <= next)
	if n := len(res.damages); n > 0 && res.damages[n-1].next < 0 || short {
		pos := res.endPos
		if n > 0 {
			pos = res.damages[n-1].pos
		}
		return fmt.Errorf("segment file %s holds valid records up to offset %d only, but the next segment starts at %d: its tail (from byte %d) is damaged or missing",
			path, res.end-1, next, pos)
	}
	for _, d := range res.damages {
		if d.to < d.from {
			continue // garbage between two valid frames: nothing unreadable
		}
		p.st.log.Error("logstore: damaged records in a sealed segment; reads of them fail with a corrupt-record error",
			"topic", p.topic, "partition", p.id, "file", path, "byte", d.pos, "from_offset", d.from, "to_offset", d.to, "err", d.err,
			"action", "restore the file from a backup or replica, or purge past the damaged offsets (see docs/operations.md)")
	}
	return nil
}

func parseBase(name, suffix string) (int64, bool) {
	digits := strings.TrimSuffix(name, suffix)
	if len(digits) != 20 {
		return 0, false
	}
	b, err := strconv.ParseInt(digits, 10, 64)
	return b, err == nil && b >= 0
}

func readLogStart(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		// Written atomically, so this is damage, not a torn write. Starting
		// from the first segment could resurrect purged records: refuse.
		return 0, fmt.Errorf("%s: invalid log start offset %q", path, b)
	}
	return v, nil
}

// recoverActive scans the active segment, truncates it after the last
// complete batch and builds its indexes in memory.
func (p *partition) recoverActive(seg *segment, minHW int64) error {
	f, err := os.OpenFile(seg.logPath(), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	// Held for the scan only: after it the cache may close the file, so
	// that a store of many partitions opens within the descriptor budget.
	seg.adopt(f, true)
	defer seg.unpin()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()

	// The indexer state at the end of the last complete batch, restored if
	// the tail after it is cut.
	type mark struct {
		pos, maxTs, end, nextIdxPos, nextTidxPos int64
		nIdx, nTidx                              int
	}
	snap := func(pos int64) mark {
		return mark{pos, seg.maxTs, seg.end, seg.nextIdxPos, seg.nextTidxPos, len(seg.idx), len(seg.tidx)}
	}
	good := snap(0)
	var reason error
	// Key-index entries of the batch being scanned, added when its
	// batch-end frame proves the batch whole (a cut tail adds nothing).
	type pendingKey struct {
		key  []byte
		off  int64
		tomb bool
		loc  recLoc
	}
	var batchKeys []pendingKey
	sc := newScanner(f, 0, size, 0)
	for {
		fr, pos, err := sc.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if !errors.Is(err, errShortFrame) && !errors.Is(err, errBadFrame) {
				sc.close()
				return err
			}
			reason = fmt.Errorf("at byte %d: %w", pos, err)
			break
		}
		n, fi, err := decodeFrame(fr, nil)
		if err != nil {
			reason = fmt.Errorf("at byte %d: %w", pos, err)
			break
		}
		if fi.offset != seg.end {
			reason = fmt.Errorf("at byte %d: offset %d, expected %d", pos, fi.offset, seg.end)
			break
		}
		seg.indexFrame(pos, fi)
		if key, tomb, ok := frameKey(fr); ok {
			batchKeys = append(batchKeys, pendingKey{bytes.Clone(key), fi.offset, tomb, frameLoc(pos, n)})
		}
		if fi.batchEnd {
			good = snap(pos + int64(n))
			for _, k := range batchKeys {
				seg.mem.add(k.key, k.off, k.tomb, k.loc)
			}
			batchKeys = batchKeys[:0]
		}
	}
	sc.close()
	if good.end < minHW {
		// Acknowledged records (below the checkpointed high watermark) are
		// gone: never cut them silently.
		why := "truncated"
		if reason != nil {
			why = reason.Error()
		}
		return fmt.Errorf("segment file %s holds valid records up to offset %d only, but the checkpoint recorded high watermark %d (%s)",
			seg.logPath(), good.end-1, minHW, why)
	}
	if good.pos < size {
		if reason == nil {
			reason = errors.New("last batch incomplete")
		}
		p.st.log.Warn("logstore: truncating torn tail of active segment",
			"topic", p.topic, "partition", p.id, "segment", seg.base,
			"keep_bytes", good.pos, "cut_bytes", size-good.pos, "reason", reason)
		seg.maxTs, seg.end, seg.nextIdxPos, seg.nextTidxPos = good.maxTs, good.end, good.nextIdxPos, good.nextTidxPos
		seg.idx, seg.tidx = seg.idx[:good.nIdx], seg.tidx[:good.nTidx]
		if err := f.Truncate(good.pos); err != nil {
			return err
		}
	}
	if seg.end == seg.base {
		seg.maxTs = math.MinInt64
	}
	// Index files of the active segment are stale by definition (written
	// when it was sealed before a crash, or for a longer log).
	for _, suf := range []string{indexSuffix, timeIndexSuffix} {
		if err := removeIfExists(seg.path(suf)); err != nil {
			return err
		}
	}
	seg.wpos = good.pos
	seg.size.Store(good.pos)
	// Data recovered from the page cache after a process crash may not be on
	// disk yet; make the recovered high watermark durable.
	if p.st.durable() {
		return fsutil.Fdatasync(f)
	}
	return nil
}

// emptyDir reports whether dir is a directory with nothing in it.
func emptyDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) == 0
}
