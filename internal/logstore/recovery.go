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

// load reads every topic under topicsDir (Open's recovery).
func (s *FileStore) load() error {
	entries, err := os.ReadDir(s.topicsDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(s.topicsDir, e.Name())
		if strings.HasSuffix(e.Name(), deletedSuffix) || strings.HasSuffix(e.Name(), tmpSuffix) {
			// A deletion interrupted between rename and removal.
			if err := os.RemoveAll(path); err != nil {
				return err
			}
			continue
		}
		if !e.IsDir() {
			s.log.Warn("logstore: ignoring unexpected file", "path", path)
			continue
		}
		meta, err := readMeta(filepath.Join(path, metaFile))
		if errors.Is(err, fs.ErrNotExist) {
			// meta.json is written last, before any append can happen: this
			// is an interrupted creation holding no records.
			s.log.Warn("logstore: removing topic directory without meta.json (interrupted creation)", "path", path)
			if err := os.RemoveAll(path); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if meta.ID != e.Name() {
			return fmt.Errorf("%s: topic id %q does not match its directory", path, meta.ID)
		}
		if other := s.topics[meta.Name]; other != nil {
			return fmt.Errorf("topic %q is stored twice, with ids %s and %s", meta.Name, other.info.ID, meta.ID)
		}
		t, err := s.openTopic(meta, path)
		if err != nil {
			return fmt.Errorf("topic %q: %w", meta.Name, err)
		}
		s.topics[meta.Name] = t
	}
	return nil
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
	cfg := TopicConfig{SegmentBytes: m.Config.SegmentBytes, RetentionMs: m.Config.RetentionMs, CleanupPolicy: m.Config.CleanupPolicy}
	if _, err := normalizeTopic(m.Name, m.Partitions, cfg); err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

func (s *FileStore) openTopic(m topicMeta, dir string) (*topic, error) {
	t := &topic{
		info: TopicInfo{Name: m.Name, ID: m.ID, Partitions: m.Partitions, Config: TopicConfig{
			SegmentBytes: m.Config.SegmentBytes, RetentionMs: m.Config.RetentionMs, CleanupPolicy: m.Config.CleanupPolicy,
		}},
		dir: dir,
	}
	t.parts = make([]*partition, m.Partitions)
	for i := range t.parts {
		p := newPartition(s, t, int32(i))
		t.parts[i] = p
		if err := p.open(); err != nil {
			t.shutdown(ErrClosed, false) // closes the files opened so far
			return nil, fmt.Errorf("partition %d: %w", i, err)
		}
	}
	return t, nil
}

// open recovers a partition directory:
//   - *.deleted and *.tmp files are removed;
//   - sealed segments are trusted; their indexes are rebuilt if missing;
//   - the active (last) segment is scanned and cut after the last whole,
//     checksum-valid, contiguous batch; its indexes are rebuilt in memory;
//   - log start = max(persisted log start, base of the first segment).
func (p *partition) open() error {
	if _, err := os.Stat(p.dir); errors.Is(err, fs.ErrNotExist) {
		// Lost to a crash right after CreateTopic (it held no records).
		if err := os.Mkdir(p.dir, 0o755); err != nil {
			return err
		}
		if p.st.durable() {
			if err := fsutil.SyncDir(filepath.Dir(p.dir)); err != nil {
				return err
			}
		}
	}
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		return err
	}
	var bases []int64
	var indexFiles []string
	ls := int64(0)
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
		case strings.HasSuffix(name, logSuffix):
			b, ok := parseBase(name, logSuffix)
			if !ok {
				p.st.log.Warn("logstore: ignoring unexpected file", "path", path)
				continue
			}
			bases = append(bases, b)
		case strings.HasSuffix(name, indexSuffix), strings.HasSuffix(name, timeIndexSuffix), strings.HasSuffix(name, keysSuffix):
			indexFiles = append(indexFiles, name)
		default:
			p.st.log.Warn("logstore: ignoring unexpected file", "path", path)
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

	durable := p.st.durable()
	for i, b := range bases {
		seg := newSegment(p.dir, b)
		p.segs = append(p.segs, seg)
		if i == len(bases)-1 {
			if err := p.recoverActive(seg); err != nil {
				return fmt.Errorf("segment %020d: %w", b, err)
			}
			continue
		}
		st, err := os.Stat(seg.path(logSuffix))
		if err != nil {
			return err
		}
		if err := seg.openSealed(st.Size(), bases[i+1], durable); err != nil {
			return fmt.Errorf("segment %020d: %w", b, err)
		}
		if ri, err := loadRun(seg.path(keysSuffix), b); err == nil {
			seg.run = ri
		} else {
			p.queueKeyRebuild(seg)
		}
	}
	if len(p.segs) == 0 {
		// Nothing written yet (or everything lost with fsync never): the
		// active segment starts at the log start; its file comes with the
		// first append.
		p.segs = []*segment{newSegment(p.dir, ls)}
	}
	active := p.segs[len(p.segs)-1]
	hw := active.end
	ls = max(ls, p.segs[0].base)
	if ls > hw {
		// The persisted log start is beyond the recovered data (records
		// lost to a crash in fsync mode interval after a purge). Offsets
		// must never be reused below the log start: continue at ls in a
		// new segment; the old ones are reclaimed.
		p.st.log.Warn("logstore: log start beyond recovered data, skipping offsets",
			"topic", p.topic, "partition", p.id, "high_watermark", hw, "log_start", ls)
		if active.f != nil {
			active.wpos = active.size.Load()
			if err := active.seal(durable); err != nil {
				return err
			}
			p.sealKeys(active)
			p.segs = append(p.segs, newSegment(p.dir, ls))
		} else {
			p.segs[len(p.segs)-1] = newSegment(p.dir, ls)
		}
		hw = ls
	}
	p.hw.Store(hw)
	p.logStart.Store(ls)
	p.next = hw
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
func (p *partition) recoverActive(seg *segment) error {
	f, err := os.OpenFile(seg.path(logSuffix), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	seg.f = f
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
