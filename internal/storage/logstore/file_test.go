package logstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/logstore/logstoretest"
)

var ctx = context.Background()

// Polls for background work (segment reclamation) use short ticks and a
// deadline that only matters when the test fails.
const (
	pollFor  = 5 * time.Second
	pollTick = 5 * time.Millisecond
)

func TestFileStoreConformance(t *testing.T) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncInterval, logstore.FsyncNever} {
		t.Run("fsync="+mode.String(), func(t *testing.T) {
			t.Parallel()
			logstoretest.Run(t, func(t *testing.T) logstore.Store {
				return openStore(t, t.TempDir(), logstore.Options{Fsync: mode, FsyncInterval: 10 * time.Millisecond})
			})
			logstoretest.RunKeyIndex(t, func(t *testing.T) (logstore.Store, logstore.KeyIndexer) {
				s := openStore(t, t.TempDir(), logstore.Options{Fsync: mode, FsyncInterval: 10 * time.Millisecond})
				return s, s
			})
		})
	}
}

// openStore opens dir and closes the store at the end of the test.
func openStore(t testing.TB, dir string, opts logstore.Options) *logstore.FileStore {
	t.Helper()
	if opts.ReclaimInterval == 0 {
		opts.ReclaimInterval = 5 * time.Millisecond
	}
	s, err := logstore.Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// reopen closes s and opens its directory again.
func reopen(t *testing.T, s *logstore.FileStore, dir string, opts logstore.Options) *logstore.FileStore {
	t.Helper()
	require.NoError(t, s.Close())
	return openStore(t, dir, opts)
}

// value returns a recognisable value of n bytes for record i.
func value(i, n int) []byte {
	v := []byte(strings.Repeat(strconv.Itoa(i%10), n))
	copy(v, fmt.Sprintf("v%d:", i))
	return v
}

// appendN appends records [from, from+n) one batch of size per call, with
// key "k<i>", value(i, valueLen) and timestamp ts(i).
func appendN(t *testing.T, s logstore.Store, topic string, from, n, batch, valueLen int, ts func(int) int64) {
	t.Helper()
	for i := from; i < from+n; i += batch {
		var recs []logstore.Record
		for j := i; j < min(i+batch, from+n); j++ {
			recs = append(recs, logstore.Record{Key: []byte(fmt.Sprintf("k%d", j)), Value: value(j, valueLen), Timestamp: ts(j)})
		}
		base, err := s.Append(ctx, topic, 0, recs)
		require.NoError(t, err)
		require.Equal(t, int64(i), base)
	}
}

func tsIdentity(i int) int64 { return int64(i) }

// checkRecords reads [from, to) one page at a time starting at every
// offset in turn and checks each record.
func checkRecords(t *testing.T, s logstore.Store, topic string, from, to, valueLen int, ts func(int) int64) {
	t.Helper()
	for start := from; start < to; start++ {
		recs, err := s.Read(ctx, topic, 0, int64(start), 5, 1<<20)
		require.NoError(t, err, "read at %d", start)
		require.Len(t, recs, min(5, to-start), "read at %d", start)
		for i, r := range recs {
			off := start + i
			require.Equal(t, int64(off), r.Offset)
			require.Equal(t, fmt.Sprintf("k%d", off), string(r.Key))
			require.Equal(t, value(off, valueLen), r.Value)
			require.Equal(t, ts(off), r.Timestamp)
		}
	}
}

func partDir(dir string, info logstore.TopicInfo, part int) string {
	return filepath.Join(dir, "topics", info.ID, strconv.Itoa(part))
}

// segmentBases lists the base offsets of the .log files in a partition
// directory.
func segmentBases(t *testing.T, pdir string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(pdir)
	require.NoError(t, err)
	var bases []int64
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".log"); ok {
			b, err := strconv.ParseInt(name, 10, 64)
			require.NoError(t, err)
			require.Len(t, name, 20, "zero-padded base offset")
			bases = append(bases, b)
		}
	}
	return bases
}

func filesWithSuffix(t *testing.T, dir, suffix string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(d.Name(), suffix) {
			out = append(out, path)
		}
		return nil
	}))
	return out
}

func TestParseFsyncMode(t *testing.T) {
	for _, m := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncInterval, logstore.FsyncNever} {
		got, err := logstore.ParseFsyncMode(m.String())
		require.NoError(t, err)
		assert.Equal(t, m, got)
	}
	for _, bad := range []string{"", "Always", "sometimes"} {
		_, err := logstore.ParseFsyncMode(bad)
		assert.ErrorIs(t, err, logstore.ErrInvalidArgument, bad)
	}
	assert.Equal(t, logstore.FsyncAlways, logstore.Options{}.Fsync, "the zero value is the safe default")
}

func TestDirectoryLayout(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{})
	info, err := s.CreateTopic(ctx, "layout", 2, logstore.TopicConfig{SegmentBytes: 4096, RetentionMs: 60000, CleanupPolicy: logstore.CleanupCompactDelete})
	require.NoError(t, err)
	_, err = s.Append(ctx, "layout", 1, []logstore.Record{{Key: []byte("k"), Value: []byte("x")}}) // compacted: keyed only
	require.NoError(t, err)

	b, err := os.ReadFile(filepath.Join(dir, "topics", info.ID, "meta.json"))
	require.NoError(t, err)
	var meta map[string]any
	require.NoError(t, json.Unmarshal(b, &meta))
	assert.Equal(t, "layout", meta["name"])
	assert.Equal(t, info.ID, meta["id"])
	assert.EqualValues(t, 2, meta["partitions"])
	assert.Equal(t, map[string]any{"segment_bytes": 4096.0, "retention_ms": 60000.0, "cleanup_policy": "compact,delete",
		"delete_retention_ms": 86400000.0, "min_cleanable_dirty_ratio": 0.5}, meta["config"])
	assert.Equal(t, []int64{0}, segmentBases(t, partDir(dir, info, 1)))
	assert.DirExists(t, partDir(dir, info, 0))
	assert.Empty(t, filesWithSuffix(t, dir, ".tmp"))

	_, err = logstore.Open(dir, logstore.Options{})
	assert.Error(t, err, "a second Open of a directory in use fails")
}

func TestReopenKeepsEverything(t *testing.T) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncNever} {
		t.Run("fsync="+mode.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			opts := logstore.Options{Fsync: mode}
			s := openStore(t, dir, opts)
			// "a" takes a keyless record, which a compacted topic refuses.
			a, err := s.CreateTopic(ctx, "a", 3, logstore.TopicConfig{SegmentBytes: 2048, RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete})
			require.NoError(t, err)
			b, err := s.CreateTopic(ctx, "b", 1, logstore.TopicConfig{RetentionMs: 1234, CleanupPolicy: logstore.CleanupCompact, DeleteRetentionMs: 77, MinCleanableDirtyRatio: 0.3})
			require.NoError(t, err)
			appendN(t, s, "a", 0, 40, 3, 100, tsIdentity)
			special := []logstore.Record{
				{Key: nil, Value: nil, Timestamp: 5},
				{Key: []byte{}, Value: []byte{}, Timestamp: 6, Headers: []logstore.Header{{Key: "h", Value: nil}, {Key: "e", Value: []byte{}}}},
			}
			_, err = s.Append(ctx, "a", 2, special)
			require.NoError(t, err)
			_, err = s.DeleteRecordsBefore(ctx, "a", 0, 3)
			require.NoError(t, err)
			_, beforeParts, err := s.Topic(ctx, "a")
			require.NoError(t, err)

			s = reopen(t, s, dir, opts)
			topics, err := s.Topics(ctx)
			require.NoError(t, err)
			assert.Equal(t, []logstore.TopicInfo{a, b}, topics, "names, ids and configs survive")
			_, afterParts, err := s.Topic(ctx, "a")
			require.NoError(t, err)
			assert.Equal(t, beforeParts, afterParts, "bounds, sizes and segment counts survive")
			checkRecords(t, s, "a", 3, 40, 100, tsIdentity)
			got, err := s.Read(ctx, "a", 2, 0, 10, 1<<20)
			require.NoError(t, err)
			require.Len(t, got, 2)
			assert.Nil(t, got[0].Key)
			assert.Nil(t, got[0].Value)
			assert.NotNil(t, got[1].Key)
			assert.NotNil(t, got[1].Value)
			assert.Nil(t, got[1].Headers[0].Value)
			assert.NotNil(t, got[1].Headers[1].Value)
			appendN(t, s, "a", 40, 5, 2, 100, tsIdentity) // continues at offset 40
			checkRecords(t, s, "a", 3, 45, 100, tsIdentity)
		})
	}
}

func TestRollingSegments(t *testing.T) {
	dir := t.TempDir()
	opts := logstore.Options{}
	s := openStore(t, dir, opts)
	info, err := s.CreateTopic(ctx, "roll", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	const n, vlen = 200, 150
	ts := func(i int) int64 { return 1000 + int64(i)*10 }
	appendN(t, s, "roll", 0, n, 3, vlen, ts)

	pdir := partDir(dir, info, 0)
	check := func(t *testing.T, s *logstore.FileStore) {
		// Reads first: a sealed segment's damaged or missing indexes are
		// rebuilt when it is first used.
		checkRecords(t, s, "roll", 0, n, vlen, ts)
		bases := segmentBases(t, pdir)
		require.Greater(t, len(bases), 30, "tiny segments roll often")
		var total int64
		for i, base := range bases {
			st, err := os.Stat(filepath.Join(pdir, fmt.Sprintf("%020d.log", base)))
			require.NoError(t, err)
			total += st.Size()
			if i < len(bases)-1 {
				assert.LessOrEqual(t, st.Size(), int64(1024), "a segment holds at most segment_bytes (batches are smaller)")
				assert.FileExists(t, filepath.Join(pdir, fmt.Sprintf("%020d.index", base)))
				assert.FileExists(t, filepath.Join(pdir, fmt.Sprintf("%020d.timeindex", base)))
			}
		}
		_, parts, err := s.Topic(ctx, "roll")
		require.NoError(t, err)
		assert.Equal(t, int32(len(bases)), parts[0].SegmentCount)
		assert.Equal(t, total, parts[0].SizeBytes)
		checkRecords(t, s, "roll", 0, n, vlen, ts)
		for _, q := range []struct{ query, off int64 }{{0, 0}, {1000, 0}, {1005, 1}, {1500, 50}, {2990, 199}, {2991, -1}} {
			off, _, err := s.OffsetForTimestamp(ctx, "roll", 0, q.query)
			require.NoError(t, err)
			assert.Equal(t, q.off, off, "timestamp %d", q.query)
		}
	}
	t.Run("live", func(t *testing.T) { check(t, s) })
	s = reopen(t, s, dir, opts)
	t.Run("reopened", func(t *testing.T) { check(t, s) })

	// Sealed segments' indexes are rebuilt when missing or damaged.
	require.NoError(t, s.Close())
	bases := segmentBases(t, pdir)
	require.NoError(t, os.Remove(filepath.Join(pdir, fmt.Sprintf("%020d.index", bases[1]))))
	require.NoError(t, os.Remove(filepath.Join(pdir, fmt.Sprintf("%020d.timeindex", bases[2]))))
	require.NoError(t, os.WriteFile(filepath.Join(pdir, fmt.Sprintf("%020d.index", bases[3])), []byte("garbage!"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(pdir, fmt.Sprintf("%020d.timeindex", bases[4])), []byte("abc"), 0o644))
	s = openStore(t, dir, opts)
	t.Run("indexes rebuilt", func(t *testing.T) { check(t, s) })
	assert.FileExists(t, filepath.Join(pdir, fmt.Sprintf("%020d.index", bases[1])))
	assert.FileExists(t, filepath.Join(pdir, fmt.Sprintf("%020d.timeindex", bases[2])))
}

func TestBigRecords(t *testing.T) {
	// Records larger than the read buffer and than a segment.
	s := openStore(t, t.TempDir(), logstore.Options{Fsync: logstore.FsyncNever})
	_, err := s.CreateTopic(ctx, "big", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	sizes := []int{10, 600 << 10, 5, 2 << 20, 1000}
	for i, n := range sizes {
		_, err := s.Append(ctx, "big", 0, []logstore.Record{{Value: value(i, n)}})
		require.NoError(t, err)
	}
	for i, n := range sizes {
		recs, err := s.Read(ctx, "big", 0, int64(i), 1, 1)
		require.NoError(t, err)
		require.Len(t, recs, 1)
		assert.Equal(t, value(i, n), recs[0].Value)
	}
	recs, err := s.Read(ctx, "big", 0, 0, 100, 4<<20)
	require.NoError(t, err)
	assert.Len(t, recs, 5)
}

func TestPurgeReclaimsSegments(t *testing.T) {
	dir := t.TempDir()
	opts := logstore.Options{}
	s := openStore(t, dir, opts)
	info, err := s.CreateTopic(ctx, "purge", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	appendN(t, s, "purge", 0, 100, 2, 150, tsIdentity)
	pdir := partDir(dir, info, 0)
	bases := segmentBases(t, pdir)
	require.Greater(t, len(bases), 10)
	_, before, err := s.Topic(ctx, "purge")
	require.NoError(t, err)

	ls, err := s.DeleteRecordsBefore(ctx, "purge", 0, 50)
	require.NoError(t, err)
	require.Equal(t, int64(50), ls)
	// The segment holding offset 50 stays; every one before it goes.
	keep := slices.IndexFunc(bases, func(b int64) bool { return b > 50 }) - 1
	require.Positive(t, keep)
	require.Eventually(t, func() bool {
		return slices.Equal(segmentBases(t, pdir), bases[keep:]) && len(filesWithSuffix(t, pdir, ".deleted")) == 0
	}, pollFor, pollTick, "segments below the log start are deleted")
	assert.NoFileExists(t, filepath.Join(pdir, fmt.Sprintf("%020d.index", bases[0])))
	_, after, err := s.Topic(ctx, "purge")
	require.NoError(t, err)
	assert.Equal(t, int32(len(bases)-keep), after[0].SegmentCount)
	assert.Less(t, after[0].SizeBytes, before[0].SizeBytes)
	checkRecords(t, s, "purge", 50, 100, 150, tsIdentity)
	_, err = s.Read(ctx, "purge", 0, 49, 1, 1)
	assert.ErrorIs(t, err, logstore.ErrOffsetOutOfRange)

	// Purging everything keeps the active segment.
	_, err = s.DeleteRecordsBefore(ctx, "purge", 0, 100)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.Equal(segmentBases(t, pdir), bases[len(bases)-1:])
	}, pollFor, pollTick, "only the active segment remains")
	recs, err := s.Read(ctx, "purge", 0, 100, 10, 1<<20)
	require.NoError(t, err)
	assert.Empty(t, recs)
	appendN(t, s, "purge", 100, 10, 3, 150, tsIdentity)
	checkRecords(t, s, "purge", 100, 110, 150, tsIdentity)

	// The log start survives a restart, also once its segments are gone.
	s = reopen(t, s, dir, opts)
	ls, hw, err := s.Bounds("purge", 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{100, 110}, [2]int64{ls, hw})
}

func TestLogStartSurvivesReopen(t *testing.T) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncInterval, logstore.FsyncNever} {
		t.Run("fsync="+mode.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			opts := logstore.Options{Fsync: mode}
			s := openStore(t, dir, opts)
			info, err := s.CreateTopic(ctx, "ls", 1, logstore.TopicConfig{RetentionMs: -1})
			require.NoError(t, err)
			appendN(t, s, "ls", 0, 20, 4, 10, tsIdentity)
			_, err = s.DeleteRecordsBefore(ctx, "ls", 0, 7)
			require.NoError(t, err)
			b, err := os.ReadFile(filepath.Join(partDir(dir, info, 0), "log-start-offset"))
			require.NoError(t, err, "persisted before DeleteRecordsBefore returns")
			assert.Equal(t, "7", strings.TrimSpace(string(b)))
			s = reopen(t, s, dir, opts)
			ls, hw, err := s.Bounds("ls", 0)
			require.NoError(t, err)
			assert.Equal(t, [2]int64{7, 20}, [2]int64{ls, hw})
			_, err = s.Read(ctx, "ls", 0, 6, 1, 1)
			assert.ErrorIs(t, err, logstore.ErrOffsetOutOfRange, "purged records stay purged")
		})
	}
}

func TestTimeRetention(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	opts := logstore.Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }, ReclaimInterval: 5 * time.Millisecond}
	s := openStore(t, dir, opts)
	cfg := logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: 1000}
	info, err := s.CreateTopic(ctx, "ret", 1, cfg)
	require.NoError(t, err)
	keepCfg := cfg
	keepCfg.RetentionMs = -1
	keepInfo, err := s.CreateTopic(ctx, "forever", 1, keepCfg)
	require.NoError(t, err)
	compactCfg := cfg
	compactCfg.CleanupPolicy = logstore.CleanupCompact
	compactInfo, err := s.CreateTopic(ctx, "compacted", 1, compactCfg)
	require.NoError(t, err)
	ts := func(i int) int64 { return int64(i) * 10 } // 0 .. 990
	for _, name := range []string{"ret", "forever", "compacted"} {
		appendN(t, s, name, 0, 100, 2, 150, ts)
	}
	pdir := partDir(dir, info, 0)
	bases := segmentBases(t, pdir)
	require.Greater(t, len(bases), 10)

	// now = 1000: cutoff 0, nothing is older.
	now.Store(1000)
	time.Sleep(10 * opts.ReclaimInterval) // a few reclaimer rounds
	ls, _, err := s.Bounds("ret", 0)
	require.NoError(t, err)
	assert.Zero(t, ls, "nothing expired yet")

	// now = 1500: records with ts < 500 (offsets < 50) expire, but only in
	// whole sealed segments: the log start becomes the base of the segment
	// holding offset 50.
	now.Store(1500)
	want := bases[slices.IndexFunc(bases, func(b int64) bool { return b > 50 })-1]
	require.Eventually(t, func() bool {
		ls, _, err := s.Bounds("ret", 0)
		return err == nil && ls == want && segmentBases(t, pdir)[0] == want
	}, pollFor, pollTick)
	checkRecords(t, s, "ret", int(want), 100, 150, ts)

	// Far future: everything sealed expires, the active segment stays.
	now.Store(1 << 40)
	active := bases[len(bases)-1]
	require.Eventually(t, func() bool {
		ls, _, err := s.Bounds("ret", 0)
		return err == nil && ls == active && slices.Equal(segmentBases(t, pdir), []int64{active})
	}, pollFor, pollTick)
	checkRecords(t, s, "ret", int(active), 100, 150, ts)

	for _, other := range []logstore.TopicInfo{keepInfo, compactInfo} {
		ls, _, err := s.Bounds(other.Name, 0)
		require.NoError(t, err)
		assert.Zero(t, ls, "%s: no time retention", other.Name)
		assert.Equal(t, len(bases), len(segmentBases(t, partDir(dir, other, 0))), other.Name)
	}

	s = reopen(t, s, dir, opts)
	ls, _, err = s.Bounds("ret", 0)
	require.NoError(t, err)
	assert.Equal(t, active, ls, "the retention log start was persisted")
}

func TestCorruptSealedSegmentRead(t *testing.T) {
	// Frame size: 37 bytes of framing + key "k<i>" + 100-byte value.
	const frame = 37 + 2 + 100
	tests := []struct {
		name string
		pos  int64 // byte to damage, in record 1's frame
		mask byte
	}{
		{"value byte", frame + frame/2, 0xff},
		// Offset 1 becomes 0: a reader skipping to offset 1 would pass over
		// this frame unchecked; the density check must notice the gap.
		{"offset field", frame + 8 + 1 + 7, 0x01},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, logstore.Options{})
			info, err := s.CreateTopic(ctx, "crc", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
			require.NoError(t, err)
			appendN(t, s, "crc", 0, 30, 1, 100, tsIdentity)
			path := filepath.Join(partDir(dir, info, 0), fmt.Sprintf("%020d.log", 0))
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			b := make([]byte, 1)
			_, err = f.ReadAt(b, tc.pos)
			require.NoError(t, err)
			b[0] ^= tc.mask
			_, err = f.WriteAt(b, tc.pos)
			require.NoError(t, err)
			require.NoError(t, f.Close())

			recs, err := s.Read(ctx, "crc", 0, 0, 10, 1<<20)
			require.NoError(t, err, "the records before the damage are returned")
			require.Len(t, recs, 1)
			_, err = s.Read(ctx, "crc", 0, 1, 10, 1<<20)
			require.ErrorIs(t, err, logstore.ErrCorrupt)
			assert.Contains(t, err.Error(), `"crc"`, "the error names the topic")
			_, _, err = s.OffsetForTimestamp(ctx, "crc", 0, 1)
			assert.ErrorIs(t, err, logstore.ErrCorrupt)
			checkRecords(t, s, "crc", 2, 30, 100, tsIdentity) // later records are unaffected
		})
	}
}

func TestPurgeWhileReading(t *testing.T) {
	// Readers race with purges and segment deletion: every read either
	// returns the right records or ErrOffsetOutOfRange, never garbage.
	s := openStore(t, t.TempDir(), logstore.Options{Fsync: logstore.FsyncNever, ReclaimInterval: time.Millisecond})
	_, err := s.CreateTopic(ctx, "race", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	const n, vlen = 400, 100
	appendN(t, s, "race", 0, n, 2, vlen, tsIdentity)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ls, _, err := s.Bounds("race", 0)
				if !assert.NoError(t, err) {
					return
				}
				recs, err := s.Read(ctx, "race", 0, ls, 50, 1<<20)
				if errors.Is(err, logstore.ErrOffsetOutOfRange) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				for i, r := range recs {
					if !assert.Equal(t, ls+int64(i), r.Offset) || !assert.Equal(t, value(int(r.Offset), vlen), r.Value) {
						return
					}
				}
				_, _, err = s.OffsetForTimestamp(ctx, "race", 0, ls+3)
				if !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	for off := int64(0); off <= n; off += 7 {
		_, err := s.DeleteRecordsBefore(ctx, "race", 0, off)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

func TestDeleteTopicRemovesFiles(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{})
	info, err := s.CreateTopic(ctx, "del", 2, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	appendN(t, s, "del", 0, 50, 5, 100, tsIdentity)
	require.NoError(t, s.DeleteTopic(ctx, "del"))
	assert.NoDirExists(t, filepath.Join(dir, "topics", info.ID))
	assert.NoDirExists(t, filepath.Join(dir, "topics", info.ID+".deleted"))
	s = reopen(t, s, dir, logstore.Options{})
	_, _, err = s.Topic(ctx, "del")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic, "a deleted topic stays deleted")
}

func TestAppendDuringDeleteAndClose(t *testing.T) {
	// Appends racing DeleteTopic and Close either succeed or fail with the
	// documented errors; nothing deadlocks or leaks.
	for _, op := range []string{"delete", "close"} {
		t.Run(op, func(t *testing.T) {
			s := openStore(t, t.TempDir(), logstore.Options{})
			_, err := s.CreateTopic(ctx, "busy", 1, logstore.TopicConfig{RetentionMs: -1})
			require.NoError(t, err)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for {
						_, err := s.Append(ctx, "busy", 0, []logstore.Record{{Value: []byte("x")}})
						if err != nil {
							assert.True(t, errors.Is(err, logstore.ErrUnknownTopic) || errors.Is(err, logstore.ErrClosed), "unexpected %v", err)
							return
						}
					}
				})
			}
			time.Sleep(20 * time.Millisecond)
			if op == "delete" {
				require.NoError(t, s.DeleteTopic(ctx, "busy"))
			} else {
				require.NoError(t, s.Close())
			}
			wg.Wait()
		})
	}
}
