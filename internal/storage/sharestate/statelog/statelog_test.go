package statelog

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// faultHooks injects ENOSPC into the state log's writes or fsyncs.
type faultHooks struct {
	failSync  atomic.Bool
	failWrite atomic.Bool
	short     atomic.Bool // a failing write writes half its bytes first
}

func (f *faultHooks) set(which string, on bool) {
	switch which {
	case "fsync":
		f.failSync.Store(on)
	case "short write":
		f.short.Store(on)
		f.failWrite.Store(on)
	default:
		f.failWrite.Store(on)
	}
}

func (f *faultHooks) hooks() *IOHooks {
	return &IOHooks{
		Write: func(file *os.File, b []byte) (int, error) {
			if f.failWrite.Load() {
				n := 0
				if f.short.Load() {
					n, _ = file.Write(b[:len(b)/2])
				}
				return n, fmt.Errorf("injected write failure: %w", syscall.ENOSPC)
			}
			return file.Write(b)
		},
		Sync: func(file *os.File) error {
			if f.failSync.Load() {
				return fmt.Errorf("injected fsync failure: %w", syscall.ENOSPC)
			}
			return fsutil.Fdatasync(file)
		},
	}
}

// The state log truncates what a failed write left behind (a half frame)
// and goes on from the last good position: the file parses whole, with
// exactly the entries that succeeded; lost tickets fail, later ones work.
func TestStateLogTruncatesAfterFailure(t *testing.T) {
	for _, which := range []string{"short write", "fsync"} {
		t.Run(which, func(t *testing.T) {
			var f faultHooks
			dir := t.TempDir()
			l := &stateLog{dir: dir, mode: logstore.FsyncAlways, log: slog.New(slog.DiscardHandler), hooks: hooksOr(f.hooks())}
			require.NoError(t, l.start(1))
			put := func(group string) (uint64, error) {
				t1, err := l.write(func(b []byte) []byte { return appendGroupDelete(b, group) })
				require.NoError(t, err)
				return t1, l.ackWait(t1)
			}
			t1, err := put("a")
			require.NoError(t, err)
			f.set(which, true)
			t2, err := put("b")
			require.ErrorIs(t, err, syscall.ENOSPC)
			assert.True(t, l.lost(t2))
			assert.False(t, l.lost(t1))
			f.set(which, false)
			t3, err := put("c")
			require.NoError(t, err, "not sticky")
			assert.False(t, l.lost(t3))
			require.NoError(t, l.close())

			es, dmg := parseFile(filepath.Join(dir, genFileName(1)), 1, false, 0)
			assert.Empty(t, dmg)
			var groups []string
			for _, e := range es {
				groups = append(groups, e.Group)
			}
			assert.Equal(t, []string{"a", "c"}, groups)
		})
	}
}

// A failed fsync does not make the writer retry it in a loop: what it was
// for is lost, so nothing is left to fsync until the next request.
func TestStateLogNoFsyncRetryLoop(t *testing.T) {
	var f faultHooks
	var syncs atomic.Int64
	h := f.hooks()
	inner := h.Sync
	h.Sync = func(file *os.File) error { syncs.Add(1); return inner(file) }
	l := &stateLog{dir: t.TempDir(), mode: logstore.FsyncNever, log: slog.New(slog.DiscardHandler), hooks: hooksOr(h)}
	require.NoError(t, l.start(1))
	defer l.close()
	t1, err := l.write(func(b []byte) []byte { return appendGroupDelete(b, "a") })
	require.NoError(t, err)
	f.set("fsync", true)
	require.ErrorIs(t, l.syncTo(t1), syscall.ENOSPC)
	n := syncs.Load()
	// A write that needs no fsync goes through the writer: had the failed
	// fsync been retried in a loop, more would have happened meanwhile.
	t2, err := l.write(func(b []byte) []byte { return appendGroupDelete(b, "b") })
	require.NoError(t, err)
	require.NoError(t, l.ackWait(t2))
	assert.Equal(t, n, syncs.Load())
	f.set("fsync", false)
	require.NoError(t, l.syncTo(t2), "the next fsync works")
}
