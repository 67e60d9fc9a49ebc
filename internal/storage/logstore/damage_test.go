package logstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// The damage table: a store with several sealed segments, key-index runs
// and a purged prefix is closed cleanly, one file is damaged, and the store
// is reopened. Every row states the outcome; every row also checks what
// must never happen: a panic, a silent gap, a reused offset, deleted data,
// or damage to one partition spreading to the others.

const (
	dmgN       = 60  // records in the damaged partition
	dmgVlen    = 100 // value size: ~7 records per 1 KiB segment
	dmgLogHead = 2   // purged prefix: the log start offset
)

// syncBuffer is a log sink shared by the store's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type damageEnv struct {
	dir, pdir string
	info      logstore.TopicInfo
	bases     []int64 // segment bases; the last is the active segment
	keys      []logstore.KeyEntry
}

func (e *damageEnv) seg(i int, suffix string) string {
	if i < 0 {
		i += len(e.bases)
	}
	return filepath.Join(e.pdir, fmt.Sprintf("%020d%s", e.bases[i], suffix))
}

// frames returns the byte position of every frame of a segment file.
func frames(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []int64
	for pos := 0; pos+8 <= len(b); pos += 8 + int(binary.BigEndian.Uint32(b[pos:])) {
		out = append(out, int64(pos))
	}
	return out
}

func flipAt(t *testing.T, path string, at int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Less(t, at, int64(len(b)))
	b[at] ^= 0x5a
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

func truncateBy(t *testing.T, path string, n int64) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, max(0, st.Size()-n)))
}

func setupDamage(t *testing.T) *damageEnv {
	t.Helper()
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{})
	info, err := s.CreateTopic(ctx, "dmg", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	appendN(t, s, "dmg", 0, dmgN, 1, dmgVlen, tsIdentity)
	_, err = s.DeleteRecordsBefore(ctx, "dmg", 0, dmgLogHead)
	require.NoError(t, err)
	_, err = s.CreateTopic(ctx, "other", 2, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
	require.NoError(t, err)
	for p := range int32(2) {
		for i := range 10 {
			_, err := s.Append(ctx, "other", p, []logstore.Record{{Key: []byte("o"), Value: []byte(strconv.Itoa(i))}})
			require.NoError(t, err)
		}
	}
	env := &damageEnv{dir: dir, pdir: partDir(dir, info, 0), info: info}
	env.keys = scanKeysEventually(t, s, "dmg", nil)
	require.NoError(t, s.Close())
	env.bases = segmentBases(t, env.pdir)
	require.GreaterOrEqual(t, len(env.bases), 6, "several sealed segments")
	for _, b := range env.bases[:len(env.bases)-1] {
		for _, suf := range []string{".index", ".timeindex", ".keys"} {
			require.FileExists(t, filepath.Join(env.pdir, fmt.Sprintf("%020d%s", b, suf)))
		}
	}
	return env
}

// scanKeysEventually scans the whole key index once it is ready (runs
// being rebuilt make scans fail with ErrIndexNotReady for a while).
func scanKeysEventually(t *testing.T, s *logstore.FileStore, topic string, want []logstore.KeyEntry) []logstore.KeyEntry {
	t.Helper()
	var got []logstore.KeyEntry
	var last error
	require.Eventually(t, func() bool {
		got, last = nil, nil
		c, err := s.ScanKeys(ctx, topic, 0, nil, dmgN)
		if err != nil {
			last = err
			return false
		}
		defer c.Close()
		for c.Next() {
			e := c.Entry()
			got = append(got, logstore.KeyEntry{Key: bytes.Clone(e.Key), Offset: e.Offset, Tombstone: e.Tombstone})
		}
		if err := c.Err(); err != nil {
			last = err
			return false
		}
		return want == nil || assert.ObjectsAreEqual(want, got)
	}, pollFor, pollTick, "key index scan: last error %v", last)
	return got
}

// snapshot lists every file under dir with its size.
func snapshot(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a background index rebuild renamed its temp file meanwhile
		}
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(path, ".tmp") {
			st, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			out[rel] = st.Size()
		}
		return nil
	}))
	return out
}

// outcome is what a row expects after reopening.
type outcome struct {
	corrupt    bool   // reads of [from, to] fail with that *CorruptError; the rest reads fine
	from, to   int64  // (corrupt)
	offline    string // the partition is offline and the error names this file
	quarantine bool   // the topic moved to quarantine
	// otherwise: everything reads back intact (indexes rebuilt)
}

func TestDamageTable(t *testing.T) {
	type row struct {
		name   string
		damage func(t *testing.T, e *damageEnv) outcome
	}
	rows := []row{
		{"byte flip mid sealed segment", func(t *testing.T, e *damageEnv) outcome {
			fr := frames(t, e.seg(2, ".log"))
			flipAt(t, e.seg(2, ".log"), fr[3]+60) // in record base+3's value
			return outcome{corrupt: true, from: e.bases[2] + 3, to: e.bases[2] + 3}
		}},
		{"frame header damage (length)", func(t *testing.T, e *damageEnv) outcome {
			fr := frames(t, e.seg(2, ".log"))
			flipAt(t, e.seg(2, ".log"), fr[2]+1)
			return outcome{corrupt: true, from: e.bases[2] + 2, to: e.bases[2] + 2}
		}},
		{"frame header damage (checksum), two frames", func(t *testing.T, e *damageEnv) outcome {
			fr := frames(t, e.seg(1, ".log"))
			flipAt(t, e.seg(1, ".log"), fr[1]+5)
			flipAt(t, e.seg(1, ".log"), fr[2]+1)
			return outcome{corrupt: true, from: e.bases[1] + 1, to: e.bases[1] + 2}
		}},
		{"byte flip in the last frame of a sealed segment", func(t *testing.T, e *damageEnv) outcome {
			fr := frames(t, e.seg(2, ".log"))
			flipAt(t, e.seg(2, ".log"), fr[len(fr)-1]+30)
			last := e.bases[3] - 1
			return outcome{corrupt: true, from: last, to: last}
		}},
		{"sealed segment truncated", func(t *testing.T, e *damageEnv) outcome {
			truncateBy(t, e.seg(2, ".log"), 10)
			return outcome{offline: e.seg(2, ".log")}
		}},
		{"sealed segment emptied", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.Truncate(e.seg(3, ".log"), 0))
			return outcome{offline: e.seg(3, ".log")}
		}},
		{"middle segment deleted", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.Remove(e.seg(2, ".log")))
			return outcome{offline: e.seg(2, ".log")}
		}},
		{"first segment deleted", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.Remove(e.seg(0, ".log")))
			return outcome{offline: e.seg(0, ".log")}
		}},
		{"last sealed segment deleted", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.Remove(e.seg(-2, ".log")))
			return outcome{offline: e.seg(-2, ".log")}
		}},
		{"active segment deleted", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.Remove(e.seg(-1, ".log")))
			return outcome{offline: "checkpoint"}
		}},
		{"active segment truncated", func(t *testing.T, e *damageEnv) outcome {
			truncateBy(t, e.seg(-1, ".log"), 10)
			return outcome{offline: e.seg(-1, ".log")}
		}},
		{"partition directory deleted", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.RemoveAll(e.pdir))
			return outcome{offline: e.pdir}
		}},
		{"meta.json deleted", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.Remove(filepath.Join(e.dir, "topics", e.info.ID, "meta.json")))
			return outcome{quarantine: true}
		}},
		{"meta.json garbage", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.WriteFile(filepath.Join(e.dir, "topics", e.info.ID, "meta.json"), []byte("\x00\x01"), 0o644))
			return outcome{quarantine: true}
		}},
		{"log-start file deleted", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.Remove(filepath.Join(e.pdir, "log-start-offset")))
			return outcome{offline: "log-start-offset"}
		}},
		{"log-start garbage", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.WriteFile(filepath.Join(e.pdir, "log-start-offset"), []byte("x7"), 0o644))
			return outcome{offline: "log-start-offset"}
		}},
		{"log-start negative", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.WriteFile(filepath.Join(e.pdir, "log-start-offset"), []byte("-5"), 0o644))
			return outcome{offline: "log-start-offset"}
		}},
		{"log-start moved back", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.WriteFile(filepath.Join(e.pdir, "log-start-offset"), []byte("1"), 0o644))
			return outcome{offline: "log-start-offset"}
		}},
		{"log-start above the high watermark", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.WriteFile(filepath.Join(e.pdir, "log-start-offset"), []byte(strconv.Itoa(dmgN+1)), 0o644))
			return outcome{offline: "log-start-offset"}
		}},
		{"log-start 2^63-1", func(t *testing.T, e *damageEnv) outcome {
			require.NoError(t, os.WriteFile(filepath.Join(e.pdir, "log-start-offset"), []byte("9223372036854775807"), 0o644))
			return outcome{offline: "log-start-offset"}
		}},
		{"checkpoint flipped", func(t *testing.T, e *damageEnv) outcome {
			flipAt(t, filepath.Join(e.pdir, "checkpoint"), 40)
			return outcome{offline: "checkpoint"}
		}},
	}
	for _, suf := range []string{".index", ".timeindex", ".keys"} {
		rows = append(rows,
			row{suf + " flipped", func(t *testing.T, e *damageEnv) outcome {
				for i := range e.bases[:len(e.bases)-1] {
					st, err := os.Stat(e.seg(i, suf))
					require.NoError(t, err)
					flipAt(t, e.seg(i, suf), st.Size()/2)
				}
				return outcome{}
			}},
			row{suf + " truncated", func(t *testing.T, e *damageEnv) outcome {
				for i := range e.bases[:len(e.bases)-1] {
					truncateBy(t, e.seg(i, suf), 3)
				}
				return outcome{}
			}},
			row{suf + " deleted", func(t *testing.T, e *damageEnv) outcome {
				for i := range e.bases[:len(e.bases)-1] {
					require.NoError(t, os.Remove(e.seg(i, suf)))
				}
				return outcome{}
			}},
		)
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setupDamage(t)
			want := tc.damage(t, e)
			before := snapshot(t, e.dir)
			logs := &syncBuffer{}
			s := openStore(t, e.dir, logstore.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})

			// Never: deleted data. Every file that held records is still
			// there, byte for byte in size (indexes may be rewritten).
			after := snapshot(t, e.dir)
			for name, size := range before {
				if !strings.HasSuffix(name, ".log") && !strings.HasSuffix(name, "meta.json") && !strings.HasSuffix(name, "log-start-offset") {
					continue
				}
				if want.quarantine && strings.HasPrefix(name, filepath.Join("topics", e.info.ID)) {
					got, ok := after[filepath.Join("quarantine", quarantineStamp(t, e.dir), name)]
					assert.True(t, ok, "%s is kept in quarantine", name)
					assert.Equal(t, size, got, name)
					continue
				}
				assert.Equal(t, size, after[name], "%s is kept as it was", name)
			}

			// Never: damage spreading to the other partitions.
			for p := range int32(2) {
				recs, err := s.Read(ctx, "other", p, 0, 100, 1<<20)
				require.NoError(t, err)
				require.Len(t, recs, 10)
				base, err := s.Append(ctx, "other", p, []logstore.Record{{Value: []byte("more")}})
				require.NoError(t, err)
				assert.Equal(t, int64(10), base, "no offset reused or skipped")
			}

			switch {
			case want.quarantine:
				_, err := s.TopicInfo(ctx, "dmg")
				require.ErrorIs(t, err, logstore.ErrUnknownTopic)
				assert.Contains(t, logs.String(), "level=ERROR")
				assert.Contains(t, logs.String(), e.info.ID)
				assert.Contains(t, logs.String(), "quarantine")
				assert.Empty(t, s.Offline())

			case want.offline != "":
				off := s.Offline()
				require.Len(t, off, 1)
				assert.Equal(t, "dmg", off[0].Topic)
				assert.Equal(t, int32(0), off[0].Partition)
				require.ErrorIs(t, off[0].Err, logstore.ErrOffline)
				assert.Contains(t, off[0].Err.Error(), want.offline, "the error names the file")
				_, err := s.Append(ctx, "dmg", 0, []logstore.Record{{Value: []byte("x")}})
				assert.ErrorIs(t, err, logstore.ErrOffline)
				_, err = s.Read(ctx, "dmg", 0, dmgLogHead, 10, 1<<20)
				assert.ErrorIs(t, err, logstore.ErrOffline)
				_, err = s.DeleteRecordsBefore(ctx, "dmg", 0, 5)
				assert.ErrorIs(t, err, logstore.ErrOffline)
				_, _, err = s.Bounds("dmg", 0)
				assert.ErrorIs(t, err, logstore.ErrOffline)
				// Describing the topic says so instead of showing bounds.
				_, parts, err := s.Topic(ctx, "dmg")
				require.NoError(t, err)
				assert.ErrorIs(t, parts[0].Err, logstore.ErrOffline)
				assert.Zero(t, parts[0].HighWatermark)
				assert.Contains(t, logs.String(), "level=ERROR")
				if want.offline == e.pdir {
					assert.NoDirExists(t, e.pdir, "a missing partition directory is not recreated empty")
				}
				// Still offline, and still untouched, after another restart.
				tdir := filepath.Join(e.dir, "topics", e.info.ID)
				was := snapshot(t, tdir)
				s = reopen(t, s, e.dir, logstore.Options{})
				require.Len(t, s.Offline(), 1)
				assert.Equal(t, was, snapshot(t, tdir))

			case want.corrupt:
				assert.Empty(t, s.Offline(), "damage the frame chain can step over leaves the partition online")
				ls, hw, err := s.Bounds("dmg", 0)
				require.NoError(t, err)
				assert.Equal(t, [2]int64{dmgLogHead, dmgN}, [2]int64{ls, hw})
				for off := want.from; off <= want.to; off++ {
					_, err := s.Read(ctx, "dmg", 0, off, 10, 1<<20)
					require.ErrorIs(t, err, logstore.ErrCorrupt, "offset %d", off)
					var ce *logstore.CorruptError
					require.ErrorAs(t, err, &ce)
					// From the first damaged offset, the whole range; from
					// inside it, a reader may not see the frames before.
					assert.Equal(t, want.to, ce.To, "the last unreadable offset")
					assert.LessOrEqual(t, ce.From, off)
					assert.GreaterOrEqual(t, ce.From, want.from)
					if off == want.from {
						assert.Equal(t, want.from, ce.From, "the first unreadable offset")
					}
					assert.Contains(t, ce.File, ".log")
				}
				// Up to the damage, reads return the good records first.
				recs, err := s.Read(ctx, "dmg", 0, dmgLogHead, 1000, 1<<20)
				require.NoError(t, err)
				require.Len(t, recs, int(want.from-dmgLogHead))
				// After it, everything reads back (no gap, no wrong record).
				checkRecords(t, s, "dmg", int(want.to+1), dmgN, dmgVlen, tsIdentity)
				// An operator steps past the damage with a purge.
				_, err = s.DeleteRecordsBefore(ctx, "dmg", 0, want.to+1)
				require.NoError(t, err)
				checkRecords(t, s, "dmg", int(want.to+1), dmgN, dmgVlen, tsIdentity)
				base, err := s.Append(ctx, "dmg", 0, []logstore.Record{{Key: []byte("new"), Value: []byte("v")}})
				require.NoError(t, err)
				assert.Equal(t, int64(dmgN), base, "no offset reused or skipped")

			default: // rebuilt
				assert.Empty(t, s.Offline())
				ls, hw, err := s.Bounds("dmg", 0)
				require.NoError(t, err)
				assert.Equal(t, [2]int64{dmgLogHead, dmgN}, [2]int64{ls, hw})
				checkRecords(t, s, "dmg", dmgLogHead, dmgN, dmgVlen, tsIdentity)
				for _, ts := range []int64{0, dmgLogHead, 17, 33, dmgN - 1} {
					off, gotTs, err := s.OffsetForTimestamp(ctx, "dmg", 0, ts)
					require.NoError(t, err)
					assert.Equal(t, [2]int64{max(ts, dmgLogHead), max(ts, dmgLogHead)}, [2]int64{off, gotTs}, "timestamp %d", ts)
				}
				scanKeysEventually(t, s, "dmg", e.keys)
				s = reopen(t, s, e.dir, logstore.Options{})
				checkRecords(t, s, "dmg", dmgLogHead, dmgN, dmgVlen, tsIdentity)
				base, err := s.Append(ctx, "dmg", 0, []logstore.Record{{Key: []byte("new"), Value: []byte("v")}})
				require.NoError(t, err)
				assert.Equal(t, int64(dmgN), base, "no offset reused or skipped")
			}
		})
	}
}

// quarantineStamp returns the name of the only quarantine directory.
func quarantineStamp(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "quarantine"))
	require.NoError(t, err)
	require.Len(t, ents, 1)
	return ents[0].Name()
}
