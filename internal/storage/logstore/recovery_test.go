package logstore_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Records of the torn-tail tests have a fixed frame size: 37 bytes of
// framing, a 3-byte key and a 20-byte value.
const (
	tornFrame   = 37 + 3 + 20
	tornBatch   = 3
	tornBatches = 5
	tornRecords = tornBatch * tornBatches
)

func tornRecord(i int) logstore.Record {
	return logstore.Record{Key: []byte(fmt.Sprintf("k%02d", i)), Value: []byte(fmt.Sprintf("value-%014d", i)), Timestamp: int64(i)}
}

func appendTorn(t *testing.T, s logstore.Store, from, n int) {
	t.Helper()
	for i := from; i < from+n; i += tornBatch {
		var recs []logstore.Record
		for j := i; j < i+tornBatch; j++ {
			recs = append(recs, tornRecord(j))
		}
		base, err := s.Append(ctx, "torn", 0, recs)
		require.NoError(t, err)
		require.Equal(t, int64(i), base)
	}
}

func checkTorn(t *testing.T, s logstore.Store, n int) {
	t.Helper()
	_, hw, err := s.Bounds("torn", 0)
	require.NoError(t, err)
	require.Equal(t, int64(n), hw)
	if n == 0 {
		return
	}
	recs, err := s.Read(ctx, "torn", 0, 0, 1000, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, n)
	for i, r := range recs {
		want := tornRecord(i)
		want.Offset = int64(i)
		require.Equal(t, want, r)
	}
}

func TestTornTailRecovery(t *testing.T) {
	end := int64(tornRecords * tornFrame)
	flip := func(at int64) func(t *testing.T, f *os.File) {
		return func(t *testing.T, f *os.File) {
			b := make([]byte, 1)
			_, err := f.ReadAt(b, at)
			require.NoError(t, err)
			b[0] ^= 0xff
			_, err = f.WriteAt(b, at)
			require.NoError(t, err)
		}
	}
	appendBytes := func(b []byte) func(t *testing.T, f *os.File) {
		return func(t *testing.T, f *os.File) {
			_, err := f.WriteAt(b, end)
			require.NoError(t, err)
		}
	}
	truncate := func(size int64) func(t *testing.T, f *os.File) {
		return func(t *testing.T, f *os.File) { require.NoError(t, f.Truncate(size)) }
	}
	garbage := make([]byte, 100)
	for i := range garbage {
		garbage[i] = byte(rand.N(256))
	}
	lastBatch := tornRecords - tornBatch
	tests := []struct {
		name   string
		damage func(t *testing.T, f *os.File)
		keep   int // records that survive
	}{
		{"clean", func(*testing.T, *os.File) {}, tornRecords},
		{"half a frame appended", func(t *testing.T, f *os.File) {
			half := make([]byte, tornFrame/2)
			_, err := f.ReadAt(half, 0) // the start of a real frame: a plausible length and CRC
			require.NoError(t, err)
			appendBytes(half)(t, f)
		}, tornRecords},
		{"random garbage appended", appendBytes(garbage), tornRecords},
		{"zeros appended (preallocated tail)", appendBytes(make([]byte, 4096)), tornRecords},
		{"byte flipped in the last frame's value", flip(end - 5), lastBatch},
		{"byte flipped in the last frame's length", flip(end - tornFrame + 1), lastBatch},
		{"byte flipped in the last frame's checksum", flip(end - tornFrame + 5), lastBatch},
		{"byte flipped mid last batch: the whole batch goes", flip(end - 2*tornFrame + 20), lastBatch},
		{"last frame missing: the batch is incomplete", truncate(end - tornFrame), lastBatch},
		{"cut inside the last frame", truncate(end - 10), lastBatch},
		{"cut inside a frame header", truncate(end - tornFrame + 3), lastBatch},
		{"damage in an earlier batch cuts from there", flip(4*tornFrame + 30), tornBatch},
		{"first frame damaged", flip(10), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			opts := logstore.Options{}
			s := openStore(t, dir, opts)
			info, err := s.CreateTopic(ctx, "torn", 1, logstore.TopicConfig{RetentionMs: -1})
			require.NoError(t, err)
			appendTorn(t, s, 0, tornRecords)
			// A torn tail is what a crash leaves: no clean close, so the
			// checkpoint does not vouch for the active segment's tail.
			require.NoError(t, s.Crash())

			path := filepath.Join(partDir(dir, info, 0), fmt.Sprintf("%020d.log", 0))
			st, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, end, st.Size(), "frame size assumption")
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			tc.damage(t, f)
			require.NoError(t, f.Close())

			s = openStore(t, dir, opts)
			checkTorn(t, s, tc.keep)
			st, err = os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, int64(tc.keep*tornFrame), st.Size(), "the torn tail was cut from the file")

			// Appends continue right after the surviving records, and a
			// second recovery finds everything intact.
			appendTorn(t, s, tc.keep, 2*tornBatch)
			checkTorn(t, s, tc.keep+2*tornBatch)
			s = reopen(t, s, dir, opts)
			checkTorn(t, s, tc.keep+2*tornBatch)
		})
	}
}

func TestLeftoversRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{})
	info, err := s.CreateTopic(ctx, "keep", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	appendN(t, s, "keep", 0, 30, 2, 100, tsIdentity)
	require.NoError(t, s.Close())

	pdir := partDir(dir, info, 0)
	bases := segmentBases(t, pdir)
	require.Greater(t, len(bases), 2)
	leftovers := []string{
		filepath.Join(pdir, "00000000000000099999.log.deleted"),
		filepath.Join(pdir, "00000000000000099999.index.deleted"),
		filepath.Join(pdir, "log-start-offset.tmp"),
		filepath.Join(pdir, "00000000000000077777.index"), // orphan index: its log is gone
		filepath.Join(dir, "topics", "0f0f0f0f-0000-4000-8000-000000000000.deleted", "0", "00000000000000000000.log"),
		filepath.Join(dir, "topics", "22222222-0000-4000-8000-000000000000.tmp", "0", "00000000000000000000.log"), // interrupted creation
	}
	noMeta := filepath.Join(dir, "topics", "11111111-0000-4000-8000-000000000000") // not a creation: quarantined, not removed
	require.NoError(t, os.MkdirAll(filepath.Join(noMeta, "0"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(noMeta, "0", "00000000000000000000.log"), []byte("data"), 0o644))
	for _, p := range leftovers {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("leftover"), 0o644))
	}
	s = openStore(t, dir, logstore.Options{})
	for _, p := range leftovers {
		assert.NoFileExists(t, p)
	}
	assert.NoDirExists(t, filepath.Join(dir, "topics", "0f0f0f0f-0000-4000-8000-000000000000.deleted"))
	assert.NoDirExists(t, noMeta)
	q, err := filepath.Glob(filepath.Join(dir, "quarantine", "*", "topics", "11111111-0000-4000-8000-000000000000", "0", "00000000000000000000.log"))
	require.NoError(t, err)
	require.Len(t, q, 1, "the topic directory without meta.json was moved to quarantine")
	b, err := os.ReadFile(q[0])
	require.NoError(t, err)
	assert.Equal(t, "data", string(b))
	assert.Equal(t, bases, segmentBases(t, pdir))
	topics, err := s.Topics(ctx)
	require.NoError(t, err)
	assert.Equal(t, []logstore.TopicInfo{info}, topics)
	checkRecords(t, s, "keep", 0, 30, 100, tsIdentity)
}

func TestLogStartBeyondRecoveredData(t *testing.T) {
	// With fsync interval a crash can lose appended records whose purge was
	// persisted. Offsets below the log start must never be reused.
	dir := t.TempDir()
	opts := logstore.Options{Fsync: logstore.FsyncInterval}
	s := openStore(t, dir, opts)
	info, err := s.CreateTopic(ctx, "torn", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	appendTorn(t, s, 0, tornRecords)
	require.NoError(t, s.Crash())
	pdir := partDir(dir, info, 0)
	require.NoError(t, os.WriteFile(filepath.Join(pdir, "log-start-offset"), []byte("100"), 0o644))

	s = openStore(t, dir, opts)
	ls, hw, err := s.Bounds("torn", 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{100, 100}, [2]int64{ls, hw})
	recs, err := s.Read(ctx, "torn", 0, 100, 10, 1<<20)
	require.NoError(t, err)
	assert.Empty(t, recs)
	// A clean restart before any append keeps the skipped-to offsets.
	s = reopen(t, s, dir, opts)
	ls, hw, err = s.Bounds("torn", 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{100, 100}, [2]int64{ls, hw})
	base, err := s.Append(ctx, "torn", 0, []logstore.Record{tornRecord(100)})
	require.NoError(t, err)
	assert.Equal(t, int64(100), base)
	require.Eventually(t, func() bool {
		return slices.Equal(segmentBases(t, pdir), []int64{100})
	}, pollFor, pollTick, "the old segment is reclaimed")
	s = reopen(t, s, dir, opts)
	recs, err = s.Read(ctx, "torn", 0, 100, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, int64(100), recs[0].Offset)
}

func TestOpenQuarantinesDamagedMetadata(t *testing.T) {
	// Damaged metadata is never ignored and never deleted: a bad meta.json
	// moves the topic to quarantine, a bad log start takes the partition
	// offline; the store opens either way.
	tests := []struct {
		name    string
		file    string // relative to the topic directory
		data    string
		offline bool // else quarantined
	}{
		{"meta.json not JSON", "meta.json", "{", false},
		{"meta.json invalid topic", "meta.json", `{"version":1,"name":"__bad","id":"ID","partitions":1,"config":{"segment_bytes":1024,"retention_ms":-1,"cleanup_policy":"delete"}}`, false},
		{"log start not a number", "0/log-start-offset", "seven", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, logstore.Options{})
			info, err := s.CreateTopic(ctx, "meta", 1, logstore.TopicConfig{RetentionMs: -1})
			require.NoError(t, err)
			_, err = s.Append(ctx, "meta", 0, []logstore.Record{{Value: []byte("x")}})
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.NoError(t, os.WriteFile(filepath.Join(dir, "topics", info.ID, tc.file), []byte(tc.data), 0o644))
			s = openStore(t, dir, logstore.Options{})
			if tc.offline {
				_, err := s.Read(ctx, "meta", 0, 0, 10, 1<<20)
				require.ErrorIs(t, err, logstore.ErrOffline)
				assert.Contains(t, err.Error(), "log-start-offset")
				require.Len(t, s.Offline(), 1)
				return
			}
			_, err = s.TopicInfo(ctx, "meta")
			require.ErrorIs(t, err, logstore.ErrUnknownTopic)
			q, err := filepath.Glob(filepath.Join(dir, "quarantine", "*", "topics", info.ID, "0", "00000000000000000000.log"))
			require.NoError(t, err)
			assert.Len(t, q, 1, "the data is kept in quarantine")
		})
	}
}
