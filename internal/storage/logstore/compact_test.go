package logstore_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// latest is a key's newest record in the model: its offset and value (nil:
// deleted).
type latest struct {
	off int64
	val []byte
}

// compactModel is what was appended, folded per key.
type compactModel map[string]latest

func (m compactModel) apply(base int64, recs []logstore.Record) {
	for i, r := range recs {
		m[string(r.Key)] = latest{off: base + int64(i), val: r.Value}
	}
}

// fakeClock is an injected clock for tombstone retention.
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// compactOpts are the store options of the compaction tests: no background
// cleaner (the tests run passes with CompactNow), the fake clock.
func compactOpts(c *fakeClock) logstore.Options {
	return logstore.Options{Fsync: logstore.FsyncNever, CompactionInterval: -1, Now: c.now}
}

// readAll reads the whole partition, checking offsets strictly increase.
func readAll(t *testing.T, s logstore.Store, topic string) []logstore.Record {
	t.Helper()
	ls, hw, err := s.Bounds(topic, 0)
	require.NoError(t, err)
	var out []logstore.Record
	for cur := ls; cur < hw; {
		recs, err := s.Read(ctx, topic, 0, cur, 97, 1<<20)
		require.NoError(t, err, "read at %d", cur)
		if len(recs) == 0 {
			break // the rest of the range was removed by compaction
		}
		for _, r := range recs {
			require.GreaterOrEqual(t, r.Offset, cur, "offsets increase")
			cur = r.Offset + 1
		}
		out = append(out, recs...)
	}
	return out
}

// checkView checks that the partition's latest record per key is the
// model's: same offset and value for live keys, and for deleted keys
// either nothing or the tombstone at its offset. Keys whose latest record
// is below the log start (purged) must be gone.
func checkView(t *testing.T, s logstore.Store, topic string, m compactModel) {
	t.Helper()
	got := make(compactModel)
	for _, r := range readAll(t, s, topic) {
		got[string(r.Key)] = latest{off: r.Offset, val: r.Value}
	}
	ls, _, err := s.Bounds(topic, 0)
	require.NoError(t, err)
	for k, want := range m {
		g, ok := got[k]
		if want.off < ls {
			assert.False(t, ok, "key %q: its latest record %d is below the log start %d", k, want.off, ls)
			continue
		}
		if want.val == nil {
			if ok {
				assert.Equal(t, want, g, "deleted key %q: only its tombstone may remain", k)
			}
			continue
		}
		if assert.True(t, ok, "key %q lost (latest at offset %d)", k, want.off) {
			assert.Equal(t, want, g, "key %q", k)
		}
	}
	for k := range got {
		_, ok := m[k]
		assert.True(t, ok, "key %q was never written", k)
	}
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	}))
	return n
}

func TestCompactionKeepsLatestPerKeyWithOffsets(t *testing.T) {
	clock := &fakeClock{}
	dir := t.TempDir()
	s := openStore(t, dir, compactOpts(clock))
	_, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact, MinCleanableDirtyRatio: 0.01})
	require.NoError(t, err)
	m := make(compactModel)
	write := func(from, to int) {
		for i := from; i < to; i++ {
			recs := []logstore.Record{{Key: fmt.Appendf(nil, "k%d", i%10), Value: fmt.Appendf(nil, "v%d", i), Timestamp: int64(i)}}
			base, err := s.Append(ctx, "c", 0, recs)
			require.NoError(t, err)
			m.apply(base, recs)
		}
	}
	write(0, 300)
	_, parts, err := s.Topic(ctx, "c")
	require.NoError(t, err)
	before := parts[0]
	s.CompactNow()
	_, parts, err = s.Topic(ctx, "c")
	require.NoError(t, err)
	after := parts[0]
	assert.Less(t, after.SizeBytes, before.SizeBytes/4, "superseded records are gone")
	assert.Equal(t, before.SegmentCount, after.SegmentCount, "full segments are cleaned one by one")
	// The next pass merges the small cleaned segments (groups add up to
	// at most segment_bytes of their current sizes, as Kafka's).
	write(300, 400)
	_, parts, err = s.Topic(ctx, "c")
	require.NoError(t, err)
	before = parts[0]
	s.CompactNow()
	_, parts, err = s.Topic(ctx, "c")
	require.NoError(t, err)
	after = parts[0]
	assert.Less(t, after.SegmentCount, before.SegmentCount/2, "cleaned segments are merged")
	assert.Equal(t, before.HighWatermark, after.HighWatermark)
	assert.Equal(t, int64(0), after.PurgedTombstonesBelow, "no tombstone removed")
	checkView(t, s, "c", m)

	// Reads from a removed offset start at the next stored record.
	recs, err := s.Read(ctx, "c", 0, 0, 1, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Greater(t, recs[0].Offset, int64(0))
	off, ts, err := s.OffsetForTimestamp(ctx, "c", 0, 5)
	require.NoError(t, err)
	assert.Equal(t, recs[0].Offset, off, "timestamps are offsets here")
	assert.Equal(t, off, ts)

	st := s.CompactionStats()
	assert.Equal(t, int64(2), st.Runs)
	assert.Positive(t, st.RecordsRemoved)
	assert.Positive(t, st.BytesRead)
	assert.Positive(t, st.BytesWritten)
	require.Len(t, st.Partitions, 1)
	assert.Greater(t, st.Partitions[0].DirtyRatio, 0.01)

	// The cleaned layout survives a clean restart and a crash.
	s = reopen(t, s, dir, compactOpts(clock))
	checkView(t, s, "c", m)
	require.NoError(t, s.Crash())
	s = openStore(t, dir, compactOpts(clock))
	checkView(t, s, "c", m)
	assert.Empty(t, s.Offline())
}

func TestCompactionOfflineAndCheckpointless(t *testing.T) {
	clock := &fakeClock{}
	dir := t.TempDir()
	s := openStore(t, dir, compactOpts(clock))
	info, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact, MinCleanableDirtyRatio: 0.01})
	require.NoError(t, err)
	m := make(compactModel)
	for i := range 200 {
		recs := []logstore.Record{{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "v%d", i)}}
		base, err := s.Append(ctx, "c", 0, recs)
		require.NoError(t, err)
		m.apply(base, recs)
	}
	s.CompactNow()
	require.NoError(t, s.Crash())
	require.NoError(t, os.Remove(filepath.Join(partDir(dir, info, 0), "checkpoint")))
	s = openStore(t, dir, compactOpts(clock))
	assert.Empty(t, s.Offline(), "a rescan accepts the cleaned segments")
	checkView(t, s, "c", m)
}

func TestCompactionRemovesExpiredTombstonesAndRaisesP(t *testing.T) {
	clock := &fakeClock{}
	clock.ms.Store(1_000_000)
	s := openStore(t, t.TempDir(), compactOpts(clock))
	_, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact,
		DeleteRetentionMs: 60_000, MinCleanableDirtyRatio: 0.01})
	require.NoError(t, err)
	m := make(compactModel)
	put := func(key string, val []byte) int64 {
		recs := []logstore.Record{{Key: []byte(key), Value: val, Timestamp: clock.ms.Load()}}
		base, err := s.Append(ctx, "c", 0, recs)
		require.NoError(t, err)
		m.apply(base, recs)
		return base
	}
	put("a", []byte("1"))
	put("b", []byte("1"))
	put("a", nil) // superseded by a later a: removed without raising P
	put("a", []byte("2"))
	tombB := put("b", nil) // the latest of b: kept for delete_retention_ms
	for i := range 60 {
		put(fmt.Sprintf("x%d", i%5), []byte("filler-filler-filler"))
	}
	s.CompactNow()
	_, parts, err := s.Topic(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, int64(0), parts[0].PurgedTombstonesBelow, "young tombstone kept, superseded one does not count")
	recs, err := s.Read(ctx, "c", 0, tombB, 1, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, tombB, recs[0].Offset, "the tombstone of b is still there")
	checkView(t, s, "c", m)

	clock.advance(2 * time.Minute)
	for i := range 60 {
		put(fmt.Sprintf("x%d", i%5), []byte("filler-filler-filler"))
	}
	w, err := s.Watch("c", 0)
	require.NoError(t, err)
	s.CompactNow()
	select {
	case <-w:
	default:
		t.Fatal("raising P wakes watchers (change streams re-read it)")
	}
	_, parts, err = s.Topic(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, tombB+1, parts[0].PurgedTombstonesBelow, "P is the expired tombstone of b")
	recs, err = s.Read(ctx, "c", 0, tombB, 1, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Greater(t, recs[0].Offset, tombB, "the tombstone is gone")
	checkView(t, s, "c", m)
	assert.Equal(t, int64(1), s.CompactionStats().TombstonesRemoved)
}

func TestKeylessRecordsRejectedOnCompactedTopics(t *testing.T) {
	for name, s := range map[string]logstore.Store{
		"file": openStore(t, t.TempDir(), logstore.Options{Fsync: logstore.FsyncNever, CompactionInterval: -1}),
		"mem":  logstore.NewMem(),
	} {
		t.Run(name, func(t *testing.T) {
			for _, pol := range []string{logstore.CleanupCompact, logstore.CleanupCompactDelete} {
				topic := strings.ReplaceAll(pol, ",", "-")
				_, err := s.CreateTopic(ctx, topic, 1, logstore.TopicConfig{CleanupPolicy: pol})
				require.NoError(t, err)
				_, err = s.Append(ctx, topic, 0, []logstore.Record{{Key: []byte("k"), Value: []byte("v")}, {Value: []byte("no key")}})
				require.ErrorIs(t, err, logstore.ErrInvalidArgument)
				assert.Contains(t, err.Error(), "record 1 has no key")
				_, hw, err := s.Bounds(topic, 0)
				require.NoError(t, err)
				assert.Equal(t, int64(0), hw, "nothing of the batch was appended")
				_, err = s.Append(ctx, topic, 0, []logstore.Record{{Key: []byte{}, Value: []byte("empty key is a key")}})
				require.NoError(t, err)
			}
			_, err := s.CreateTopic(ctx, "plain", 1, logstore.TopicConfig{})
			require.NoError(t, err)
			_, err = s.Append(ctx, "plain", 0, []logstore.Record{{Value: []byte("no key")}})
			require.NoError(t, err)
		})
	}
}

func TestCompactionConfigDefaultsAndValidation(t *testing.T) {
	s := logstore.NewMem()
	info, err := s.CreateTopic(ctx, "d", 1, logstore.TopicConfig{CleanupPolicy: logstore.CleanupCompact})
	require.NoError(t, err)
	assert.Equal(t, int64(logstore.DefaultDeleteRetentionMs), info.Config.DeleteRetentionMs)
	assert.Equal(t, logstore.DefaultMinCleanableDirtyRatio, info.Config.MinCleanableDirtyRatio)
	for name, cfg := range map[string]logstore.TopicConfig{
		"negative retention": {DeleteRetentionMs: -1},
		"ratio above 1":      {MinCleanableDirtyRatio: 1.5},
		"negative ratio":     {MinCleanableDirtyRatio: -0.1},
	} {
		_, err := s.CreateTopic(ctx, "bad", 1, cfg)
		assert.ErrorIs(t, err, logstore.ErrInvalidArgument, name)
	}
	// The config survives a reopen of the file store.
	dir := t.TempDir()
	fsStore := openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever, CompactionInterval: -1})
	_, err = fsStore.CreateTopic(ctx, "d", 1, logstore.TopicConfig{CleanupPolicy: logstore.CleanupCompact, DeleteRetentionMs: 5, MinCleanableDirtyRatio: 0.25})
	require.NoError(t, err)
	fsStore = reopen(t, fsStore, dir, logstore.Options{Fsync: logstore.FsyncNever, CompactionInterval: -1})
	info, err = fsStore.TopicInfo(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, int64(5), info.Config.DeleteRetentionMs)
	assert.Equal(t, 0.25, info.Config.MinCleanableDirtyRatio)
}

func TestCompactionDirtyRatioTrigger(t *testing.T) {
	clock := &fakeClock{}
	s := openStore(t, t.TempDir(), compactOpts(clock))
	_, err := s.CreateTopic(ctx, "r", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact, MinCleanableDirtyRatio: 0.9})
	require.NoError(t, err)
	write := func(n int) {
		for i := range n {
			_, err := s.Append(ctx, "r", 0, []logstore.Record{{Key: fmt.Appendf(nil, "k%d", i%3), Value: []byte("0123456789012345678901234567890123456789")}})
			require.NoError(t, err)
		}
	}
	require.Len(t, s.CompactionStats().Partitions, 1)
	assert.Equal(t, -1.0, s.CompactionStats().Partitions[0].DirtyRatio, "not measured yet")
	write(100)
	s.CompactNow() // never cleaned: dirty ratio 1 > 0.9
	require.Equal(t, int64(1), s.CompactionStats().Runs)
	write(30)
	s.CompactNow() // a little new data next to the cleaned part: below 0.9
	st := s.CompactionStats()
	assert.Equal(t, int64(1), st.Runs, "not dirty enough")
	require.Len(t, st.Partitions, 1)
	assert.Less(t, st.Partitions[0].DirtyRatio, 0.9)
	assert.Positive(t, st.Partitions[0].DirtyRatio)
}

// TestCompactionBoundsDiskUse: a compact-only topic under 200k updates of
// 1k keys stays within a small multiple of its live data.
func TestCompactionBoundsDiskUse(t *testing.T) {
	clock := &fakeClock{}
	dir := t.TempDir()
	s := openStore(t, dir, compactOpts(clock))
	info, err := s.CreateTopic(ctx, "u", 1, logstore.TopicConfig{SegmentBytes: 256 << 10, CleanupPolicy: logstore.CleanupCompact})
	require.NoError(t, err)
	const updates, keys, batch = 200_000, 1000, 500
	val := []byte(strings.Repeat("v", 40))
	var written int64
	peak := int64(0)
	recs := make([]logstore.Record, batch)
	for i := 0; i < updates; i += batch {
		for j := range recs {
			recs[j] = logstore.Record{Key: fmt.Appendf(nil, "key-%04d", (i+j)%keys), Value: val, Timestamp: int64(i + j)}
			written += int64(37 + len(recs[j].Key) + len(val)) // its frame on disk
		}
		_, err := s.Append(ctx, "u", 0, recs)
		require.NoError(t, err)
		if (i/batch)%20 == 19 {
			s.CompactNow()
		}
		peak = max(peak, dirBytes(t, partDir(dir, info, 0)))
	}
	s.CompactNow()
	final := dirBytes(t, partDir(dir, info, 0))
	t.Logf("%d updates of %d keys: %d bytes of frames appended (the size without compaction), partition directory peak %d bytes, after the last pass %d bytes",
		updates, keys, written, peak, final)
	// Live data is ~1000 * 94 bytes per frame; the active segment and the
	// dirty part add at most a few segments of 256 KiB.
	assert.Less(t, final, int64(1<<20), "compacted size")
	assert.Less(t, peak, int64(6<<20), "peak between passes")
}

// copyDir copies the regular files under src to dst (a crash image: what
// was on disk at that instant).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		return errors.Join(err, out.Close())
	}))
}

// TestCompactionCrashAtEveryStep produces random keys and tombstones,
// compacts, and takes a crash image of the data directory before every
// storage operation of each cleaning pass (the fault seam sees them all).
// Each image must open with the latest record of every key intact. The
// live store is also crashed and reopened now and then.
func TestCompactionCrashAtEveryStep(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	clock := &fakeClock{}
	clock.ms.Store(1_000_000)
	opts := compactOpts(clock)
	opts.ReclaimInterval = time.Hour // no background deletions racing the images
	dir := t.TempDir()
	s := openStore(t, dir, opts)
	// compact,delete topics are also purged now and then.
	policy := []string{logstore.CleanupCompact, logstore.CleanupCompactDelete}[rng.IntN(2)]
	t.Logf("cleanup policy %s", policy)
	info, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 1024 + int64(rng.IntN(2048)),
		// No time retention: the model knows only compaction and purges.
		RetentionMs: -1, CleanupPolicy: policy, DeleteRetentionMs: 1000, MinCleanableDirtyRatio: 0.05 + rng.Float64()/2})
	require.NoError(t, err)
	m := make(compactModel)
	images, runs := 0, int64(0)
	for round := range 20 {
		for range 5 + rng.IntN(20) {
			n := 1 + rng.IntN(5)
			recs := make([]logstore.Record, n)
			for i := range recs {
				recs[i] = logstore.Record{Key: fmt.Appendf(nil, "k%02d", rng.IntN(30)), Timestamp: clock.ms.Load()}
				if rng.IntN(5) > 0 {
					recs[i].Value = fmt.Appendf(nil, "r%d-%d", round, rng.IntN(1000))
				}
			}
			base, err := s.Append(ctx, "c", 0, recs)
			require.NoError(t, err)
			m.apply(base, recs)
		}
		clock.advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		if policy == logstore.CleanupCompactDelete && rng.IntN(5) == 0 {
			ls, hw, err := s.Bounds("c", 0)
			require.NoError(t, err)
			ls, err = s.DeleteRecordsBefore(ctx, "c", 0, ls+rng.Int64N(hw-ls+1)/2)
			require.NoError(t, err)
			// The purge wakes the reclaimer; let it finish, so that no
			// deletion runs while a crash image is copied (a copy is not
			// atomic: it could catch a later segment gone and an earlier
			// one not, which no crash can leave).
			pdir := partDir(dir, info, 0)
			require.Eventually(t, func() bool {
				bases := segmentBases(t, pdir)
				return len(filesWithSuffix(t, pdir, ".deleted")) == 0 && (len(bases) < 2 || bases[1] > ls)
			}, 5*time.Second, time.Millisecond)
		}

		// Crash images before every storage operation of the pass; a few
		// chosen at random are opened and checked.
		var mu sync.Mutex
		var shots []string
		s.InjectFault(func(op, path string) error {
			mu.Lock()
			defer mu.Unlock()
			if len(shots) < 4 && rng.IntN(3) == 0 { // a few random steps per pass keep the test fast
				img := filepath.Join(t.TempDir(), "img")
				copyDir(t, dir, img)
				shots = append(shots, img)
			}
			return nil
		})
		s.CompactNow()
		s.InjectFault(nil)
		images += len(shots)
		for _, img := range shots {
			_ = os.Remove(filepath.Join(img, "LOCK"))
			is, err := logstore.Open(img, opts)
			require.NoError(t, err, "crash image of round %d", round)
			require.Empty(t, is.Offline(), "crash image of round %d", round)
			checkView(t, is, "c", m)
			// The recovered store goes on: new keys make it dirty, every
			// tombstone expires, and a pass cleans what the crash left.
			im := maps.Clone(m)
			for i := range 40 {
				recs := []logstore.Record{{Key: fmt.Appendf(nil, "new%d", i%8), Value: []byte("after the crash"), Timestamp: clock.ms.Load()}}
				base, err := is.Append(ctx, "c", 0, recs)
				require.NoError(t, err)
				im.apply(base, recs)
			}
			clock.advance(2 * time.Second)
			is.CompactNow()
			checkView(t, is, "c", im)
			require.NoError(t, is.Close())
		}
		checkView(t, s, "c", m)
		if rng.IntN(4) == 0 {
			runs += s.CompactionStats().Runs // counters restart with the store
			require.NoError(t, s.Crash())
			s = openStore(t, dir, opts)
			require.Empty(t, s.Offline())
			checkView(t, s, "c", m)
		}
	}
	runs += s.CompactionStats().Runs
	t.Logf("%d cleaning passes, %d crash images checked", runs, images)
	assert.Positive(t, runs)
}

// TestCompactionThrottledAndCancelledByClose: with a byte rate the cleaner
// waits for its budget (one burst of 256 KiB passes at once, then 1 KiB/s),
// Close cancels the wait, and nothing is lost or half-swapped.
func TestCompactionThrottledAndCancelledByClose(t *testing.T) {
	clock := &fakeClock{}
	dir := t.TempDir()
	opts := compactOpts(clock)
	opts.CompactionMaxBytesPerSec = 1024
	s, err := logstore.Open(dir, opts)
	require.NoError(t, err)
	_, err = s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 64 << 10, CleanupPolicy: logstore.CleanupCompact})
	require.NoError(t, err)
	m := make(compactModel)
	val := []byte(strings.Repeat("x", 200))
	for i := range 3000 { // ~700 KiB: the pass needs far more than the burst
		recs := []logstore.Record{{Key: fmt.Appendf(nil, "k%d", i%50), Value: val}}
		base, err := s.Append(ctx, "c", 0, recs)
		require.NoError(t, err)
		m.apply(base, recs)
	}
	done := make(chan struct{})
	go func() {
		s.CompactNow()
		close(done)
	}()
	require.Eventually(t, func() bool { return s.CompactionStats().BytesRead > 0 }, 5*time.Second, time.Millisecond)
	select {
	case <-done:
		t.Fatal("the pass finished within its burst: not throttled")
	default:
	}
	require.NoError(t, s.Close()) // cancels the throttled pass
	<-done
	st := s.CompactionStats()
	assert.Less(t, st.BytesRead+st.BytesWritten, int64(700<<10))
	s = openStore(t, dir, compactOpts(clock))
	assert.Empty(t, s.Offline())
	checkView(t, s, "c", m)
}

// TestCompactionRemovesExpiredTombstoneWithoutNewWrites: a tombstone the
// cleaner kept because it was young is removed by the first pass after its
// retention, even if nothing was written since (the partition is not dirty).
func TestCompactionRemovesExpiredTombstoneWithoutNewWrites(t *testing.T) {
	clock := &fakeClock{}
	clock.ms.Store(1_000_000)
	s := openStore(t, t.TempDir(), compactOpts(clock))
	_, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact,
		DeleteRetentionMs: 60_000, MinCleanableDirtyRatio: 0.5})
	require.NoError(t, err)
	m := make(compactModel)
	put := func(key string, val []byte) int64 {
		recs := []logstore.Record{{Key: []byte(key), Value: val, Timestamp: clock.ms.Load()}}
		base, err := s.Append(ctx, "c", 0, recs)
		require.NoError(t, err)
		m.apply(base, recs)
		return base
	}
	put("gone", []byte("v"))
	tomb := put("gone", nil)
	for i := range 80 {
		put(fmt.Sprintf("k%d", i%5), []byte("filler-filler-filler"))
	}
	s.CompactNow()
	runs := s.CompactionStats().Runs
	require.Positive(t, runs)
	clock.advance(30 * time.Second)
	s.CompactNow() // not dirty, tombstone still young: no pass
	assert.Equal(t, runs, s.CompactionStats().Runs)
	_, parts, err := s.Topic(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, int64(0), parts[0].PurgedTombstonesBelow)

	clock.advance(time.Minute)
	s.CompactNow() // not dirty, but the tombstone's retention is over
	_, parts, err = s.Topic(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, tomb+1, parts[0].PurgedTombstonesBelow, "the expired tombstone was removed")
	assert.Equal(t, runs+1, s.CompactionStats().Runs)
	checkView(t, s, "c", m)
}

// TestCompactionConcurrentWithAppendsAndReads: the cleaner swaps segments
// while appends roll new ones and readers scan the partition and its key
// index; no read fails, and the final view is the model's.
func TestCompactionConcurrentWithAppendsAndReads(t *testing.T) {
	clock := &fakeClock{}
	dir := t.TempDir()
	s := openStore(t, dir, compactOpts(clock))
	_, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 2048, CleanupPolicy: logstore.CleanupCompact,
		DeleteRetentionMs: 1, MinCleanableDirtyRatio: 0.1})
	require.NoError(t, err)
	m := make(compactModel)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() { // the cleaner, as often as it can
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			clock.advance(5 * time.Millisecond)
			s.CompactNow()
		}
	}()
	go func() { // a reader of the log and of the key index
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ls, hw, err := s.Bounds("c", 0)
			if !assert.NoError(t, err) {
				return
			}
			for cur := ls; cur < hw; {
				recs, err := s.Read(ctx, "c", 0, cur, 50, 1<<20)
				if !assert.NoError(t, err, "read at %d", cur) || len(recs) == 0 {
					break
				}
				cur = recs[len(recs)-1].Offset + 1
			}
			c, err := s.ScanKeys(ctx, "c", 0, nil, hw)
			if errors.Is(err, logstore.ErrIndexNotReady) {
				continue
			}
			if !assert.NoError(t, err) {
				return
			}
			for c.Next() {
				e := c.Entry()
				// The cursor pins the segment versions it read, so the
				// entry's record is readable even if compaction has
				// removed it from the current version since.
				rec, err := s.ReadEntry(ctx, "c", 0, e)
				if assert.NoError(t, err, "entry %q@%d", e.Key, e.Offset) {
					assert.Equal(t, e.Offset, rec.Offset)
					assert.Equal(t, e.Key, rec.Key)
				}
			}
			assert.NoError(t, c.Err())
			c.Close()
		}
	}()
	for i := range 3000 {
		recs := []logstore.Record{{Key: fmt.Appendf(nil, "k%02d", i%20), Timestamp: clock.ms.Load()}}
		if i%7 != 3 {
			recs[0].Value = fmt.Appendf(nil, "v%d", i)
		}
		base, err := s.Append(ctx, "c", 0, recs)
		require.NoError(t, err)
		m.apply(base, recs)
	}
	close(stop)
	wg.Wait()
	checkView(t, s, "c", m)
	assert.Positive(t, s.CompactionStats().Runs)
	require.NoError(t, s.Close())
	s = openStore(t, dir, compactOpts(clock))
	assert.Empty(t, s.Offline())
	checkView(t, s, "c", m)
}

// TestKeyCursorPinsSegmentVersions: a key-index cursor opened before a
// cleaning reads, through ReadEntry, the records it was opened on even
// when the cleaning removed them (an OSO snapshot is unaffected by
// compaction, change-stream rules); a new read no longer finds them.
func TestKeyCursorPinsSegmentVersions(t *testing.T) {
	clock := &fakeClock{}
	s := openStore(t, t.TempDir(), compactOpts(clock))
	_, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact, MinCleanableDirtyRatio: 0.01})
	require.NoError(t, err)
	write := func(from, to int) {
		for i := from; i < to; i++ {
			_, err := s.Append(ctx, "c", 0, []logstore.Record{{Key: fmt.Appendf(nil, "k%d", i%5), Value: fmt.Appendf(nil, "v%03d", i)}})
			require.NoError(t, err)
		}
	}
	write(0, 50)
	write(50, 150) // supersedes every record below 50 (and rolls segments past them)
	require.Eventually(t, func() bool {
		c, err := s.ScanKeys(ctx, "c", 0, nil, 50)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 5*time.Second, time.Millisecond, "key index ready")
	c, err := s.ScanKeys(ctx, "c", 0, nil, 50)
	require.NoError(t, err)
	defer c.Close()
	s.CompactNow()
	recs, err := s.Read(ctx, "c", 0, 45, 1, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Greater(t, recs[0].Offset, int64(49), "the records below 50 were removed")
	n := 0
	for c.Next() {
		e := c.Entry()
		rec, err := s.ReadEntry(ctx, "c", 0, e)
		require.NoError(t, err, "entry %s@%d", e.Key, e.Offset)
		assert.Equal(t, e.Offset, rec.Offset)
		assert.Equal(t, fmt.Sprintf("v%03d", e.Offset), string(rec.Value))
		n++
	}
	require.NoError(t, c.Err())
	assert.Equal(t, 5, n)
}

// TestCompactionKeyMapBound: a pass whose dirty part has more keys than
// the map may hold cleans up to a segment boundary past the bound; the
// following passes clean the rest, and no latest record is lost.
func TestCompactionKeyMapBound(t *testing.T) {
	defer logstore.SetMaxCleanerKeys(3)()
	clock := &fakeClock{}
	s := openStore(t, t.TempDir(), compactOpts(clock))
	_, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 1024, CleanupPolicy: logstore.CleanupCompact, MinCleanableDirtyRatio: 0.01})
	require.NoError(t, err)
	m := make(compactModel)
	for i := range 400 {
		recs := []logstore.Record{{Key: fmt.Appendf(nil, "k%02d", i%40), Value: fmt.Appendf(nil, "v%d", i)}}
		base, err := s.Append(ctx, "c", 0, recs)
		require.NoError(t, err)
		m.apply(base, recs)
	}
	var sizes []int64
	for range 40 {
		s.CompactNow()
		checkView(t, s, "c", m)
		_, parts, err := s.Topic(ctx, "c")
		require.NoError(t, err)
		sizes = append(sizes, parts[0].SizeBytes)
	}
	assert.Greater(t, sizes[0], sizes[len(sizes)-1], "later passes cleaned what the first one could not")
	assert.Greater(t, s.CompactionStats().Runs, int64(1), "the bound cut the work into several passes")
}
