package logstore

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/fsutil"
)

func TestGroupCommitSharesFsyncs(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Fsync: FsyncAlways})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.CreateTopic(context.Background(), "gc", 1, TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	const producers, each = 16, 20
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for range each {
				_, err := s.Append(context.Background(), "gc", 0, []Record{{Value: []byte("x")}})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	p, err := s.partition("gc", 0)
	require.NoError(t, err)
	commits := p.commits.Load()
	t.Logf("%d appends in %d commits", producers*each, commits)
	assert.Less(t, commits, int64(producers*each/2), "concurrent appends share writes and fsyncs")
	assert.Equal(t, int64(producers*each), p.hw.Load())
}

func TestStorageErrorDisablesAppends(t *testing.T) {
	for _, fail := range []string{"write", "fsync"} {
		t.Run(fail, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			s, err := Open(dir, Options{Fsync: FsyncAlways})
			require.NoError(t, err)
			_, err = s.CreateTopic(ctx, "f", 1, TopicConfig{RetentionMs: -1})
			require.NoError(t, err)
			_, err = s.Append(ctx, "f", 0, []Record{{Value: []byte("ok")}})
			require.NoError(t, err)

			injected := errors.New("injected I/O error")
			switch fail {
			case "write":
				s.io.writeAt = func(*os.File, []byte, int64) (int, error) { return 0, injected }
			case "fsync":
				s.io.datasync = func(*os.File) error { return injected }
			}
			_, err = s.Append(ctx, "f", 0, []Record{{Value: []byte("lost")}})
			require.ErrorIs(t, err, injected)
			_, hw, err := s.Bounds("f", 0)
			require.NoError(t, err)
			assert.Equal(t, int64(1), hw, "a failed append is not visible")
			s.io = ioHooks{writeAt: (*os.File).WriteAt, datasync: fsutil.Fdatasync}
			_, err = s.Append(ctx, "f", 0, []Record{{Value: []byte("after")}})
			require.ErrorIs(t, err, injected, "the partition stays failed: its file state is unknown")
			recs, err := s.Read(ctx, "f", 0, 0, 10, 1<<20)
			require.NoError(t, err, "reads still work")
			require.Len(t, recs, 1)
			require.NoError(t, s.Close())

			// Reopening recovers from the disk and takes appends again.
			s, err = Open(dir, Options{Fsync: FsyncAlways})
			require.NoError(t, err)
			defer s.Close()
			_, hw, err = s.Bounds("f", 0)
			require.NoError(t, err)
			want := int64(1) // a failed write left nothing
			if fail == "fsync" {
				want = 2 // written but never acknowledged: recovery may keep it
			}
			assert.Equal(t, want, hw)
			base, err := s.Append(ctx, "f", 0, []Record{{Value: []byte("again")}})
			require.NoError(t, err)
			assert.Equal(t, want, base)
		})
	}
}
