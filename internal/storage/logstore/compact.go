package logstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// Log compaction (cleanup_policy compact and compact,delete): a background
// cleaner rewrites sealed segments keeping each key's latest record, with
// the offsets it had. The protocol and its recovery are in doc.go
// ("Compaction"); operators and clients read docs/compaction.md.

// File names of compaction. A cleaned segment is written as
// <base>-<end>.cleaned, renamed to <base>-<end>.swap once complete and
// synced, and renamed to <base>.log once the segments it replaces (every
// segment based in [base, end)) are gone. Open removes *.cleaned and
// completes *.swap.
const (
	cleanedSuffix    = ".cleaned"
	swapSuffix       = ".swap"
	cleanerStateFile = "cleaner-state"
	cleanerMagic     = "sharelog-cleaner-state 1"
)

// DefaultCompactionInterval is how often the cleaner looks for partitions
// to clean when Options.CompactionInterval is zero.
const DefaultCompactionInterval = 15 * time.Second

// maxCleanerKeys bounds the key → latest offset map of one cleaning pass
// (about 100 MB with short keys): the dirty range is cut at the first
// segment boundary past it, and the rest is cleaned by the next pass. A
// variable for tests.
var maxCleanerKeys = 1 << 20

// cleanerChunk is the write buffer of a cleaned segment and the unit the
// throttle is asked for.
const cleanerChunk = 256 << 10

// cleanerState is a partition's persisted compaction state (besides P,
// which lives in partition.purgedTombs). Only the cleaner goroutine and
// Open touch it.
type cleanerState struct {
	// cleanedThrough is the first dirty offset: segments ending at or
	// below it were cleaned by a pass that completed, so they hold at most
	// one record per key. Persisted after the pass.
	cleanedThrough int64
	// tombsDue is when (ms) the first tombstone the last full pass kept
	// becomes removable: from then on a pass runs even if the partition is
	// not dirty enough. math.MaxInt64: none known (none kept, or no full
	// pass since Open). Not persisted.
	tombsDue int64
	// uncleanable is why the cleaner skips the partition until restart
	// (damaged records in the range to clean).
	uncleanable error
}

func (c *cleanerState) encode(p int64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\ntombstones_purged %d\ncleaned_through %d\n", cleanerMagic, p, c.cleanedThrough)
	fmt.Fprintf(&b, "crc32c %08x\n", crc32.Checksum(b.Bytes(), castagnoli))
	return b.Bytes()
}

// readCleanerState parses the cleaner-state file: P and cleaned_through.
func readCleanerState(path string) (purged, cleanedThrough int64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1, 0, err
	}
	bad := func(why string) (int64, int64, error) {
		return -1, 0, fmt.Errorf("%s: %s", path, why)
	}
	i := bytes.LastIndex(data, []byte("crc32c "))
	if i < 0 || !bytes.HasSuffix(data, []byte("\n")) {
		return bad("no checksum line (truncated?)")
	}
	want, err := strconv.ParseUint(strings.TrimSpace(string(data[i+len("crc32c "):])), 16, 32)
	if err != nil || crc32.Checksum(data[:i], castagnoli) != uint32(want) {
		return bad("checksum mismatch")
	}
	lines := strings.Split(strings.TrimSuffix(string(data[:i]), "\n"), "\n")
	if len(lines) != 3 || lines[0] != cleanerMagic {
		return bad("unknown format")
	}
	var vals [2]int64
	for k, name := range []string{"tombstones_purged", "cleaned_through"} {
		f := strings.Fields(lines[k+1])
		if len(f) != 2 || f[0] != name {
			return bad(fmt.Sprintf("line %d: expected %s", k+2, name))
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || v < -1 || v > maxSaneOffset || k > 0 && v < 0 {
			return bad(fmt.Sprintf("line %d: bad number %q", k+2, f[1]))
		}
		vals[k] = v
	}
	return vals[0], vals[1], nil
}

// writeCleanerState persists P and st (temp file, fsync, rename, fsync the
// directory unless fsync is never).
func (p *partition) writeCleanerState(purged int64, st cleanerState) error {
	return p.st.fs.writeFileAtomic(p.path(cleanerStateFile), st.encode(purged), dirSync(p.st.durable()))
}

// CompactionStats are the cleaner's counters since Open, for metrics.
type CompactionStats struct {
	Runs              int64 // cleaning passes that rewrote at least one segment
	BytesRead         int64 // segment bytes read by the cleaner
	BytesWritten      int64 // cleaned segment bytes written
	RecordsRemoved    int64 // superseded records and expired tombstones removed
	TombstonesRemoved int64 // expired tombstones removed (those that raise P)
	Partitions        []PartitionCompaction
}

// PartitionCompaction is one compacted partition's cleaner state.
type PartitionCompaction struct {
	Topic     string
	Partition int32
	// DirtyRatio is the share of the sealed bytes written since the last
	// cleaning, as last measured by the cleaner (-1: not measured yet).
	DirtyRatio float64
	// PurgedTombstones is P (-1: none removed).
	PurgedTombstones int64
}

// compactionCounters are FileStore's cleaner counters.
type compactionCounters struct {
	runs, read, written, removed, tombs atomic.Int64
}

// CompactionStats returns the cleaner's counters and, per partition of a
// compacted topic, its last dirty ratio and P (sorted by topic, partition).
func (s *FileStore) CompactionStats() CompactionStats {
	c := &s.compactStats
	out := CompactionStats{Runs: c.runs.Load(), BytesRead: c.read.Load(), BytesWritten: c.written.Load(),
		RecordsRemoved: c.removed.Load(), TombstonesRemoved: c.tombs.Load()}
	for _, t := range s.liveTopics() {
		if !t.info.Config.Compacts() {
			continue
		}
		for _, p := range t.parts {
			out.Partitions = append(out.Partitions, PartitionCompaction{Topic: t.info.Name, Partition: p.id,
				DirtyRatio: math.Float64frombits(p.dirtyRatio.Load()), PurgedTombstones: p.purgedTombs.Load()})
		}
	}
	slices.SortFunc(out.Partitions, func(a, b PartitionCompaction) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		return int(a.Partition - b.Partition)
	})
	return out
}

// cleanLoop runs a cleaning pass every CompactionInterval until Close.
func (s *FileStore) cleanLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.opts.CompactionInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.compactAll()
	}
}

// CompactNow runs one cleaning pass over every compacted partition now, as
// the background cleaner does every CompactionInterval (tests and tools; it
// waits for a pass in progress).
func (s *FileStore) CompactNow() { s.compactAll() }

// compactAll runs one cleaning pass over every compacted partition.
func (s *FileStore) compactAll() {
	s.cleanMu.Lock()
	defer s.cleanMu.Unlock()
	for _, t := range s.liveTopics() {
		if !t.info.Config.Compacts() {
			continue
		}
		for _, p := range t.parts {
			if s.cleanCtx.Err() != nil {
				return
			}
			if err := p.clean(s.cleanCtx); err != nil && p.closedErr() == nil && s.cleanCtx.Err() == nil {
				s.log.Error("logstore: compaction of a partition failed", "topic", p.topic, "partition", p.id, "err", err)
			}
		}
	}
}

// throttle waits until n more bytes of cleaner I/O are allowed
// (Options.CompactionMaxBytesPerSec).
func (s *FileStore) throttle(ctx context.Context, n int) error {
	l := s.limiter
	if l == nil || n <= 0 {
		return ctx.Err()
	}
	for n > 0 {
		k := min(n, l.Burst())
		if err := l.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func newLimiter(bytesPerSec int64) *rate.Limiter {
	if bytesPerSec <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(bytesPerSec), int(min(max(bytesPerSec, cleanerChunk), math.MaxInt32)))
}

// errSwapAborted: the segments to replace changed meanwhile (reclaimed
// after a purge, or the partition shut down); the cleaned copy is dropped.
var errSwapAborted = errors.New("segments changed during cleaning")

// clean runs one cleaning pass over the partition if its dirty ratio
// exceeds the topic's min_cleanable_dirty_ratio:
//
//  1. the cleanable range is every sealed segment not wholly below the log
//     start (never the active segment); its dirty part is what lies at or
//     after cleanedThrough;
//  2. a map key → latest offset is built from the dirty part;
//  3. the range is cut into groups of consecutive segments whose sizes add
//     up to at most segment_bytes, and each group, in offset order, is
//     rewritten as one segment without the records a later record of their
//     key supersedes and without the tombstones that are the latest of their
//     key and whose segment's newest record is older than
//     delete_retention_ms (those raise P);
//  4. cleanedThrough moves to the end of the dirty part.
//
// Groups are swapped in offset order, so a crash between two swaps never
// leaves a tombstone removed while an older value of its key survives.
func (p *partition) clean(ctx context.Context) error {
	if p.offlineErr != nil || p.closedErr() != nil || p.cleaner.uncleanable != nil {
		return nil
	}
	p.mu.RLock()
	segs := p.segs
	if len(segs) < 2 {
		p.mu.RUnlock()
		return nil
	}
	ls := p.logStart.Load()
	i0 := 0
	for i0+1 < len(segs) && segs[i0+1].base <= ls {
		i0++
	}
	cand := slices.Clone(segs[i0 : len(segs)-1])
	ends := make([]int64, len(cand))
	for i := range cand {
		cand[i].acquire()
		ends[i] = segs[i0+i+1].base
	}
	p.mu.RUnlock()
	defer func() {
		for _, s := range cand {
			s.release()
		}
	}()
	if len(cand) == 0 {
		return nil
	}

	// 1. The dirty ratio.
	ct := p.cleaner.cleanedThrough
	var cleanBytes, dirtyBytes int64
	firstDirty := len(cand)
	for i, s := range cand {
		if ends[i] <= ct {
			cleanBytes += s.size.Load()
			continue
		}
		dirtyBytes += s.size.Load()
		firstDirty = min(firstDirty, i)
	}
	ratio := 0.0
	if total := cleanBytes + dirtyBytes; total > 0 {
		ratio = float64(dirtyBytes) / float64(total)
	}
	p.dirtyRatio.Store(math.Float64bits(ratio))
	now := p.st.opts.Now().UnixMilli()
	tombsDue := now > p.cleaner.tombsDue
	cfg := p.config().WithDefaults()
	if (dirtyBytes == 0 || ratio <= cfg.MinCleanableDirtyRatio) && !tombsDue {
		return nil
	}

	// 2. The key map from the dirty part.
	latest := make(map[string]int64)
	last := len(cand) // cand[:last] is cleaned by this pass
	for i := firstDirty; i < len(cand); i++ {
		s := cand[i]
		f, err := s.pin()
		if err != nil {
			return err
		}
		var terr error
		pending := 0
		res, err := walkFrames(f, s.size.Load(), s.base, ends[i], s.sparse, func(fr []byte, _ int64, fi frameInfo) {
			if key, _, ok := frameKey(fr); ok {
				if off, seen := latest[string(key)]; !seen || off < fi.offset {
					latest[string(key)] = fi.offset
				}
			}
			if pending += len(fr); pending >= cleanerChunk && terr == nil {
				terr = p.st.throttle(ctx, pending)
				pending = 0
			}
		})
		s.unpin()
		if err == nil {
			err = terr
		}
		if err == nil {
			err = p.st.throttle(ctx, pending)
		}
		p.st.compactStats.read.Add(s.size.Load())
		if err != nil {
			return err
		}
		if len(res.damages) > 0 {
			return p.markUncleanable(s, res.damages[0])
		}
		if len(latest) > maxCleanerKeys {
			last = i + 1
			break
		}
	}
	dirtyEnd := ends[last-1]

	// 3. Groups, cleaned and swapped in offset order.
	horizon := now - cfg.DeleteRetentionMs
	removedAny := false
	nextDue := int64(math.MaxInt64)
	for i := 0; i < last; {
		j, size := i+1, cand[i].size.Load()
		for j < last && size+cand[j].size.Load() <= cfg.SegmentBytes && ends[j]-cand[i].base <= math.MaxUint32 {
			size += cand[j].size.Load()
			j++
		}
		removed, keptTombsTs, err := p.cleanGroup(ctx, cand[i:j], ends[i:j], latest, horizon)
		if err != nil {
			if errors.Is(err, errSwapAborted) {
				return nil // the next pass starts over
			}
			return err
		}
		removedAny = removedAny || removed
		if keptTombsTs != math.MinInt64 {
			nextDue = min(nextDue, keptTombsTs+cfg.DeleteRetentionMs)
		}
		i = j
	}
	if last < len(cand) {
		nextDue = now // the segments past the cut were not looked at
	}

	// 4. Everything below dirtyEnd now holds one record per key at most.
	st := p.cleaner
	st.cleanedThrough = max(st.cleanedThrough, dirtyEnd)
	st.tombsDue = nextDue
	if err := p.writeCleanerState(p.purgedTombs.Load(), st); err != nil {
		return err
	}
	p.cleaner = st
	if removedAny {
		p.st.compactStats.runs.Add(1)
	}
	return nil
}

// markUncleanable stops cleaning a partition whose range to clean holds
// damaged records: rewriting it would turn the damage into a silent gap.
func (p *partition) markUncleanable(s *segment, d damage) error {
	err := fmt.Errorf("segment %s holds damaged records (offsets %d to %d at byte %d): %w; compaction of the partition is off until restart",
		s.logPath(), d.from, d.to, d.pos, ErrCorrupt)
	p.cleaner.uncleanable = err
	return err
}

// cleanGroup rewrites the segments g (ends[i] is where g[i] ends) as one
// segment holding the records it keeps, and swaps it in. It reports whether
// anything was removed and, if it kept a tombstone that is the latest of
// its key, the newest timestamp of the segment now holding it (the clock
// of its retention; math.MinInt64 if none). A group of one segment from
// which nothing would be removed is left alone.
func (p *partition) cleanGroup(ctx context.Context, g []*segment, ends []int64, latest map[string]int64, horizon int64) (bool, int64, error) {
	base, end := g[0].base, ends[len(ends)-1]
	durable := p.st.durable()
	ns := p.newSegment(base)
	ns.mem.mu.Lock() // not shared yet; addLocked wants the lock held
	ns.sealed, ns.sparse = true, true
	var (
		out            []byte
		outPos         int64
		f              *os.File
		werr           error
		removed, tombs int64
		keptTomb       bool
		purged         = int64(-1)
		tmpPath        = p.path(fmt.Sprintf("%020d-%020d%s", base, end, cleanedSuffix))
		swapPath       = p.path(fmt.Sprintf("%020d-%020d%s", base, end, swapSuffix))
	)
	discard := func() {
		ns.mem.mu.Unlock()
		if f != nil {
			_ = f.Close()
		}
		_ = removeIfExists(tmpPath)
	}
	flush := func() {
		if werr != nil || len(out) == 0 {
			return
		}
		if f == nil {
			if f, werr = p.st.fs.openFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644); werr != nil {
				return
			}
		}
		if werr = p.st.throttle(ctx, len(out)); werr != nil {
			return
		}
		if werr = p.st.fs.writeAt(f, out, outPos); werr != nil {
			return
		}
		p.st.compactStats.written.Add(int64(len(out)))
		outPos += int64(len(out))
		out = out[:0]
	}
	for i, s := range g {
		sf, err := s.pin()
		if err != nil {
			discard()
			return false, math.MinInt64, err
		}
		tombsRemovable := s.maxTimestamp() < horizon
		pending := 0
		res, err := walkFrames(sf, s.size.Load(), s.base, ends[i], s.sparse, func(fr []byte, _ int64, fi frameInfo) {
			if werr != nil {
				return
			}
			if pending += len(fr); pending >= cleanerChunk {
				werr = p.st.throttle(ctx, pending)
				pending = 0
			}
			key, tomb, keyed := frameKey(fr)
			if keyed {
				if off, ok := latest[string(key)]; ok && off > fi.offset {
					removed++ // superseded
					return
				}
				if tomb && tombsRemovable {
					removed++
					tombs++
					purged = max(purged, fi.offset)
					return
				}
				keptTomb = keptTomb || tomb
			}
			pos := outPos + int64(len(out))
			out = append(out, fr...)
			ns.indexFrame(pos, fi)
			if keyed {
				ns.mem.addLocked(key, fi.offset, tomb, frameLoc(pos, len(fr)))
			}
			if len(out) >= cleanerChunk {
				flush()
			}
		})
		s.unpin()
		p.st.compactStats.read.Add(s.size.Load())
		if err == nil && len(res.damages) > 0 {
			err = p.markUncleanable(s, res.damages[0])
		}
		if err == nil {
			err = werr
		}
		if err != nil {
			discard()
			return false, math.MinInt64, err
		}
	}
	if removed == 0 && len(g) == 1 {
		discard()
		if keptTomb {
			return false, g[0].maxTimestamp(), nil
		}
		return false, math.MinInt64, nil
	}
	flush()
	if werr == nil && f == nil { // everything removed: an empty segment keeps the offsets' place
		f, werr = p.st.fs.openFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	if werr == nil && durable {
		werr = p.st.fs.datasync(f)
	}
	if werr != nil {
		discard()
		return false, math.MinInt64, werr
	}
	ns.mem.mu.Unlock()
	// Pinned until swapIn has renamed the file to ns's name: before that,
	// opening ns's path again would find the old segment of that base.
	ns.adopt(f, true)
	ns.end = end
	ns.finishTimeIndex()
	ns.size.Store(outPos)
	ns.wpos = outPos
	ns.synced.Store(durable)
	if err := p.swapIn(g, ns, tmpPath, swapPath, purged); err != nil {
		ns.dropFile()
		return false, math.MinInt64, err
	}
	p.st.compactStats.removed.Add(removed)
	p.st.compactStats.tombs.Add(tombs)
	if keptTomb {
		return removed > 0, ns.maxTimestamp(), nil
	}
	return removed > 0, math.MinInt64, nil
}

// swapIn replaces the listed segments g by ns, whose file is complete and
// synced at tmpPath:
//
//  1. P, if purged raises it, is persisted, then published and streams
//     woken, before any reader can see ns;
//  2. tmpPath is renamed to swapPath (from here on Open completes the swap);
//  3. the list is changed and the checkpoint rewritten (it names ns);
//  4. the old segments' files are renamed to *.deleted (unlinked when
//     their last reader lets go) and swapPath is renamed to <base>.log;
//  5. ns's index files and key-index run are written.
//
// Until step 3 a failure drops the copy; after it, Open finishes the job.
func (p *partition) swapIn(g []*segment, ns *segment, tmpPath, swapPath string, purged int64) error {
	listed := func() int {
		for i, s := range p.segs {
			if s == g[0] {
				if i+len(g) >= len(p.segs) { // never the active segment
					return -1
				}
				for k := range g {
					if p.segs[i+k] != g[k] {
						return -1
					}
				}
				return i
			}
		}
		return -1
	}
	p.mu.RLock()
	ok := listed() >= 0
	p.mu.RUnlock()
	if !ok || p.closedErr() != nil {
		_ = removeIfExists(tmpPath)
		return errSwapAborted
	}
	if purged > p.purgedTombs.Load() {
		if err := p.writeCleanerState(purged, p.cleaner); err != nil {
			_ = removeIfExists(tmpPath)
			return err
		}
		p.purgedTombs.Store(purged)
		p.watch.notify()
	}
	durable := p.st.durable()
	if err := p.st.fs.rename(tmpPath, swapPath); err != nil {
		_ = removeIfExists(tmpPath)
		return err
	}
	if durable {
		if err := p.st.fs.syncDir(p.dir); err != nil {
			_ = removeIfExists(swapPath)
			return err
		}
	}

	p.mu.Lock()
	i := listed()
	if i < 0 || p.closedErr() != nil {
		p.mu.Unlock()
		_ = removeIfExists(swapPath)
		return errSwapAborted
	}
	segs := make([]*segment, 0, len(p.segs)-len(g)+1)
	segs = append(append(append(segs, p.segs[:i]...), ns), p.segs[i+len(g):]...)
	p.segs = segs
	activeBase := segs[len(segs)-1].base
	p.mu.Unlock()

	if err := p.writeCheckpoint(activeBase, false); err != nil {
		// Without a checkpoint naming ns, a crash after the renames below
		// would look like a truncated segment: put the old ones back.
		p.mu.Lock()
		if k := slices.Index(p.segs, ns); k >= 0 {
			segs := make([]*segment, 0, len(p.segs)+len(g)-1)
			segs = append(append(append(segs, p.segs[:k]...), g...), p.segs[k+1:]...)
			p.segs = segs
		}
		p.mu.Unlock()
		_ = removeIfExists(swapPath)
		return err
	}
	for _, old := range g {
		if err := old.markDeleted(); err != nil {
			p.st.log.Warn("logstore: renaming a compacted segment for deletion", "topic", p.topic, "partition", p.id, "segment", old.base, "err", err)
		}
		old.release() // the list's reference
	}
	if err := p.st.fs.rename(swapPath, ns.logPath()); err != nil {
		// ns keeps its open file (pinned); Open completes the swap.
		p.st.log.Warn("logstore: renaming a cleaned segment into place; the next start completes it", "topic", p.topic, "partition", p.id, "file", swapPath, "err", err)
	} else {
		ns.unpin() // at its name now: the cache may close it and open it again
		if durable {
			if err := p.st.fs.syncDir(p.dir); err != nil {
				p.st.log.Warn("logstore: syncing the directory after compaction", "topic", p.topic, "partition", p.id, "err", err)
			}
		}
	}
	ns.mu.Lock()
	err := ns.writeIndexesLocked(durable)
	ns.mu.Unlock()
	if err != nil {
		p.st.log.Warn("logstore: writing the indexes of a cleaned segment; they are rebuilt when needed", "topic", p.topic, "partition", p.id, "segment", ns.base, "err", err)
	}
	p.sealKeys(ns)
	return nil
}

// parseSwapName parses <base>-<end><suffix>.
func parseSwapName(name, suffix string) (base, end int64, ok bool) {
	b, e, found := strings.Cut(strings.TrimSuffix(name, suffix), "-")
	if !found {
		return 0, 0, false
	}
	base, ok1 := parseBase(b, "")
	end, ok2 := parseBase(e, "")
	return base, end, ok1 && ok2 && base < end
}

// completeSwaps finishes at Open the swaps a crash interrupted: for each
// <base>-<end>.swap, the files of every segment based in [base, end) are
// removed and the swap file becomes <base>.log. *.cleaned files (never
// swapped in) are removed. It returns the ranges swapped and whether it
// changed the directory.
func (p *partition) completeSwaps(entries []os.DirEntry) ([][2]int64, bool, error) {
	var done [][2]int64
	changed := false
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, cleanedSuffix) {
			if err := removeIfExists(p.path(name)); err != nil {
				return nil, false, err
			}
			changed = true
			continue
		}
		if !strings.HasSuffix(name, swapSuffix) {
			continue
		}
		base, end, ok := parseSwapName(name, swapSuffix)
		if !ok {
			continue // quarantined by load as an unknown file
		}
		for _, o := range entries {
			for _, suf := range segmentSuffixes {
				if b, ok := parseBase(o.Name(), suf); ok && b >= base && b < end {
					if err := removeIfExists(p.path(o.Name())); err != nil {
						return nil, false, err
					}
				}
			}
		}
		if err := os.Rename(p.path(name), filepath.Join(p.dir, fmt.Sprintf("%020d%s", base, logSuffix))); err != nil {
			return nil, false, err
		}
		p.st.log.Info("logstore: completed a compaction swap interrupted by a crash", "topic", p.topic, "partition", p.id, "from_offset", base, "to_offset", end)
		done = append(done, [2]int64{base, end})
	}
	if len(done) > 0 && p.st.durable() {
		if err := fsutil.SyncDir(p.dir); err != nil {
			return nil, false, err
		}
	}
	return done, changed || len(done) > 0, nil
}
