package statelog_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/storage/sharestate/sharestatetest"
	"github.com/sharelog/sharelog/internal/storage/sharestate/statelog"
)

// fileMedium is a state directory; failures are injected into the writes.
type fileMedium struct {
	dir  string
	mode logstore.FsyncMode
	fail *atomic.Bool
}

func newFileMedium(t *testing.T, mode logstore.FsyncMode) fileMedium {
	return fileMedium{dir: t.TempDir(), mode: mode, fail: new(atomic.Bool)}
}

func (m fileMedium) Open(t *testing.T) sharestate.Store {
	t.Helper()
	fail := m.fail
	st, err := statelog.Open(statelog.Options{
		Dir: m.dir, Fsync: m.mode, FsyncInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		// Small enough that the suite's writes also go through compactions.
		CompactBytes: 2048,
		Hooks: &statelog.IOHooks{Write: func(f *os.File, b []byte) (int, error) {
			if fail.Load() {
				return 0, fmt.Errorf("injected write failure: %w", syscall.ENOSPC)
			}
			return f.Write(b)
		}},
	})
	require.NoError(t, err)
	return st
}

// Crash copies the directory's files as they are (what the kernel has; a
// power loss could lose more of what was not fsynced, which only FsyncAlways
// promises to keep).
func (m fileMedium) Crash(t *testing.T) sharestatetest.Medium {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(m.dir)
	require.NoError(t, err)
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.dir, de.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, de.Name()), b, 0o644))
	}
	return fileMedium{dir: dst, mode: m.mode, fail: new(atomic.Bool)}
}

func (m fileMedium) SetFailing(on bool) bool {
	m.fail.Store(on)
	return true
}

func TestFileStoreConformance(t *testing.T) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncInterval, logstore.FsyncNever} {
		t.Run("fsync="+mode.String(), func(t *testing.T) {
			t.Parallel()
			sharestatetest.Run(t, func(t *testing.T) sharestatetest.Medium { return newFileMedium(t, mode) })
		})
	}
}
