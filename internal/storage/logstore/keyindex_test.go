package logstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/logstore/logstoretest"
)

// keyTopic makes a topic with tiny segments and n records "k<i%keys>" so
// that sealed segments have runs and the active segment has entries.
func keyTopic(t *testing.T, s *logstore.FileStore, n, keys int) logstore.TopicInfo {
	t.Helper()
	info, err := s.CreateTopic(ctx, "keys", 1, logstore.TopicConfig{SegmentBytes: logstore.MinSegmentBytes, RetentionMs: -1})
	require.NoError(t, err)
	for i := 0; i < n; i += 4 {
		var recs []logstore.Record
		for j := i; j < min(i+4, n); j++ {
			r := logstore.Record{Key: []byte(fmt.Sprintf("k%03d", j%keys)), Value: []byte(fmt.Sprint(j)), Timestamp: 1}
			if j%7 == 3 {
				r.Value = nil
			}
			recs = append(recs, r)
		}
		_, err := s.Append(ctx, "keys", 0, recs)
		require.NoError(t, err)
	}
	return info
}

// wantLatest is the model: per key its latest offset below n.
func wantLatest(n, keys int) []logstore.KeyEntry {
	var out []logstore.KeyEntry
	for k := range min(keys, n) {
		last := k + (n-1-k)/keys*keys
		out = append(out, logstore.KeyEntry{Key: []byte(fmt.Sprintf("k%03d", k)), Offset: int64(last), Tombstone: last%7 == 3})
	}
	return out
}

func TestKeyIndexRunsPersist(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever})
	info := keyTopic(t, s, 500, 60)
	pdir := partDir(dir, info, 0)
	bases := segmentBases(t, pdir)
	require.Greater(t, len(bases), 5)
	runs := filesWithSuffix(t, pdir, ".keys")
	assert.Len(t, runs, len(bases)-1, "one run per sealed segment, none for the active one")
	assert.Equal(t, wantLatest(500, 60), logstoretest.ScanAll(t, s, "keys", 0, nil, 500))

	s = reopen(t, s, dir, logstore.Options{Fsync: logstore.FsyncNever})
	assert.Equal(t, wantLatest(500, 60), logstoretest.ScanAll(t, s, "keys", 0, nil, 500),
		"sealed runs are read back and the active segment is re-indexed at Open")
	assert.Equal(t, wantLatest(300, 60), logstoretest.ScanAll(t, s, "keys", 0, nil, 300))
}

// TestKeyIndexRebuild: a missing or damaged run is rebuilt from its segment
// in the background, and scans fail with ErrIndexNotReady meanwhile.
func TestKeyIndexRebuild(t *testing.T) {
	damage := map[string]func(path string) error{
		"missing": os.Remove,
		"truncated": func(path string) error {
			st, err := os.Stat(path)
			if err != nil {
				return err
			}
			return os.Truncate(path, st.Size()-3)
		},
		"flipped index byte": func(path string) error { return flipByte(path, -33) }, // the block index ends just before the 32-byte footer
	}
	for name, fn := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever})
			info := keyTopic(t, s, 400, 50)
			require.NoError(t, s.Close())
			runs := filesWithSuffix(t, partDir(dir, info, 0), ".keys")
			require.NotEmpty(t, runs)
			require.NoError(t, fn(runs[len(runs)/2]))

			release := make(chan struct{})
			entered := make(chan struct{}, 1)
			logstore.SetRebuildHook(func() {
				select {
				case entered <- struct{}{}:
				default:
				}
				<-release
			})
			t.Cleanup(func() { logstore.SetRebuildHook(nil) })
			s = openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever})
			<-entered
			_, err := s.ScanKeys(ctx, "keys", 0, nil, 400)
			require.ErrorIs(t, err, logstore.ErrIndexNotReady, "no OSO while a run is rebuilt")
			close(release)
			require.Eventually(t, func() bool {
				c, err := s.ScanKeys(ctx, "keys", 0, nil, 400)
				if err == nil {
					c.Close()
				}
				return err == nil
			}, pollFor, pollTick)
			assert.Equal(t, wantLatest(400, 50), logstoretest.ScanAll(t, s, "keys", 0, nil, 400))
			assert.Len(t, filesWithSuffix(t, partDir(dir, info, 0), ".keys"), len(runs), "the run file is written again")
		})
	}
}

// TestKeyIndexCorruptBlock: a run whose block fails its checksum fails the
// scan with ErrCorrupt and is rebuilt.
func TestKeyIndexCorruptBlock(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever})
	info := keyTopic(t, s, 400, 50)
	require.NoError(t, s.Close())
	runs := filesWithSuffix(t, partDir(dir, info, 0), ".keys")
	require.NoError(t, flipByte(runs[0], 12)) // inside the first block's payload
	s = openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever})
	c, err := s.ScanKeys(ctx, "keys", 0, nil, 400)
	require.NoError(t, err, "the index block is intact, so the damage shows only when read")
	for c.Next() {
	}
	require.ErrorIs(t, c.Err(), logstore.ErrCorrupt)
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool {
		c, err := s.ScanKeys(ctx, "keys", 0, nil, 400)
		if err != nil {
			return false
		}
		defer c.Close()
		for c.Next() {
		}
		return c.Err() == nil
	}, pollFor, pollTick)
	assert.Equal(t, wantLatest(400, 50), logstoretest.ScanAll(t, s, "keys", 0, nil, 400))
}

func flipByte(path string, at int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if at < 0 {
		at += st.Size()
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		return err
	}
	b[0] ^= 0x5a
	_, err = f.WriteAt(b, at)
	return err
}

// TestKeyIndexPurgeDropsRuns: reclaimed segments take their runs with them,
// and scans keep working on what is left.
func TestKeyIndexPurgeDropsRuns(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever, ReclaimInterval: 5 * time.Millisecond})
	info := keyTopic(t, s, 400, 50)
	pdir := partDir(dir, info, 0)
	before := len(filesWithSuffix(t, pdir, ".keys"))
	_, err := s.DeleteRecordsBefore(ctx, "keys", 0, 300)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return len(filesWithSuffix(t, pdir, ".keys")) < before/2
	}, pollFor, pollTick)
	for _, f := range filesWithSuffix(t, pdir, ".keys") {
		assert.False(t, strings.HasSuffix(f, ".deleted"))
	}
	for _, e := range logstoretest.ScanAll(t, s, "keys", 0, nil, 400) {
		if e.Offset >= 300 {
			continue
		}
		// Entries of segments not yet reclaimed may still show below the log start.
		assert.GreaterOrEqual(t, e.Offset, int64(200))
	}
	got := 0
	for _, e := range logstoretest.ScanAll(t, s, "keys", 0, nil, 400) {
		if e.Offset >= 300 {
			got++
		}
	}
	assert.Equal(t, 50, got)
	// Renamed files are unlinked once their last reader lets go: soon, not
	// necessarily by the time the live .keys count dropped.
	require.Eventually(t, func() bool {
		entries, err := os.ReadDir(pdir)
		require.NoError(t, err)
		for _, e := range entries {
			if strings.Contains(filepath.Ext(e.Name()), "deleted") {
				return false
			}
		}
		return true
	}, pollFor, pollTick, "no .deleted leftovers remain")
}

// TestKeyIndexTornTail: entries of a torn (cut) batch never reach the index.
func TestKeyIndexTornTail(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever})
	_, err := s.CreateTopic(ctx, "torn", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	_, err = s.Append(ctx, "torn", 0, []logstore.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}})
	require.NoError(t, err)
	_, err = s.Append(ctx, "torn", 0, []logstore.Record{{Key: []byte("c"), Value: []byte("3")}, {Key: []byte("a"), Value: []byte("4")}})
	require.NoError(t, err)
	info, _, err := s.Topic(ctx, "torn")
	require.NoError(t, err)
	require.NoError(t, s.Crash()) // a torn tail comes from a crash
	logs := filesWithSuffix(t, partDir(dir, info, 0), ".log")
	require.Len(t, logs, 1)
	st, err := os.Stat(logs[0])
	require.NoError(t, err)
	require.NoError(t, os.Truncate(logs[0], st.Size()-5)) // cut the second batch's last frame
	s = openStore(t, dir, logstore.Options{Fsync: logstore.FsyncNever})
	got := logstoretest.ScanAll(t, s, "torn", 0, nil, 10)
	assert.Equal(t, []logstore.KeyEntry{
		{Key: []byte("a"), Offset: 0}, {Key: []byte("b"), Offset: 1},
	}, got, "the cut batch (c@2, a@3) is not indexed")
}

func TestReadEntryStaleLocationFallsBack(t *testing.T) {
	s, err := logstore.Open(t.TempDir(), logstore.Options{Fsync: logstore.FsyncNever})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.CreateTopic(ctx, "stale", 1, logstore.TopicConfig{SegmentBytes: logstore.MinSegmentBytes, RetentionMs: -1})
	require.NoError(t, err)
	for i := range 100 {
		_, err = s.Append(ctx, "stale", 0, []logstore.Record{{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte(fmt.Sprint(i))}})
		require.NoError(t, err)
	}
	c, err := s.ScanKeys(ctx, "stale", 0, nil, 100)
	require.NoError(t, err)
	defer c.Close()
	for c.Next() {
		e := c.Entry()
		for _, bad := range []logstore.KeyEntry{logstore.WithLoc(e, 0, 60), logstore.WithLoc(e, 3, 1<<20), logstore.WithLoc(e, 1<<30, 60)} {
			rec, err := s.ReadEntry(ctx, "stale", 0, bad)
			require.NoError(t, err)
			assert.Equal(t, e.Offset, rec.Offset)
			assert.Equal(t, fmt.Sprint(e.Offset), string(rec.Value))
		}
	}
	require.NoError(t, c.Err())
}
