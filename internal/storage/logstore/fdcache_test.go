package logstore_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/logstore/logstoretest"
)

// The conformance suites pass with a descriptor budget of one segment
// file: nearly every use of a segment opens its file again, so a handle
// the cache closed under a reader or writer, or a reopened file missing
// data, fails them.
func TestFileStoreConformanceOneOpenSegment(t *testing.T) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncInterval, logstore.FsyncNever} {
		t.Run("fsync="+mode.String(), func(t *testing.T) {
			t.Parallel()
			opts := logstore.Options{Fsync: mode, FsyncInterval: 10 * time.Millisecond, MaxOpenSegments: 1}
			logstoretest.Run(t, func(t *testing.T) logstore.Store {
				return openStore(t, t.TempDir(), opts)
			})
			logstoretest.RunKeyIndex(t, func(t *testing.T) (logstore.Store, logstore.KeyIndexer) {
				s := openStore(t, t.TempDir(), opts)
				return s, s
			})
		})
	}
}

// procFDs counts this process's open descriptors.
func procFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// Many written partitions hold no more segment files open than the
// budget, while every one stays readable and writable, also after a
// reopen; concurrent readers and writers of more partitions than the
// budget never see a handle closed under them.
func TestOpenSegmentsBounded(t *testing.T) {
	const (
		parts  = 300
		budget = 16
	)
	for _, mode := range []logstore.FsyncMode{logstore.FsyncAlways, logstore.FsyncInterval, logstore.FsyncNever} {
		t.Run("fsync="+mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := logstore.Options{Fsync: mode, FsyncInterval: 5 * time.Millisecond, MaxOpenSegments: budget}
			before := procFDs(t)
			s, err := logstore.Open(dir, opts)
			require.NoError(t, err)
			// Small segments: partitions roll, so sealed segments are
			// opened and closed as well as active ones.
			_, err = s.CreateTopic(ctx, "many", parts, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
			require.NoError(t, err)

			const rounds = 6
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 4 {
				wg.Go(func() {
					for r := range rounds {
						for p := w; p < parts; p += 4 {
							val := fmt.Appendf(nil, "p%d-r%d-%0200d", p, r, 0)
							if _, err := s.Append(ctx, "many", int32(p), []logstore.Record{{Value: val}}); err != nil {
								errs <- err
								return
							}
							// Read back an older record: another segment file.
							if _, err := s.Read(ctx, "many", int32((p+7)%parts), 0, 10, 1<<20); err != nil {
								errs <- err
								return
							}
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			files := s.SegmentFiles()
			assert.LessOrEqual(t, files.Open, budget, "idle segment files are closed")
			assert.Positive(t, files.Evictions)
			assert.LessOrEqual(t, procFDs(t)-before, budget+8, "descriptors stay within the budget")

			check := func(s *logstore.FileStore) {
				t.Helper()
				for p := range parts {
					recs, err := s.Read(ctx, "many", int32(p), 0, 100, 1<<20)
					require.NoError(t, err)
					require.Len(t, recs, rounds, "partition %d", p)
					for r, rec := range recs {
						require.Equal(t, int64(r), rec.Offset)
						require.Equal(t, fmt.Sprintf("p%d-r%d-%0200d", p, r, 0), string(rec.Value))
					}
				}
			}
			check(s)
			require.NoError(t, s.Close())
			assert.LessOrEqual(t, procFDs(t), before, "Close closes every file")

			s, err = logstore.Open(dir, opts)
			require.NoError(t, err)
			defer s.Close()
			assert.LessOrEqual(t, s.SegmentFiles().Open, budget, "Open recovers within the budget")
			check(s)
			// Still writable after the reopen, offsets continue.
			for p := range parts {
				base, err := s.Append(ctx, "many", int32(p), []logstore.Record{{Value: []byte("after")}})
				require.NoError(t, err)
				require.Equal(t, int64(rounds), base)
			}
			assert.LessOrEqual(t, s.SegmentFiles().Open, budget)
		})
	}
}

func TestMaxOpenSegmentsNegative(t *testing.T) {
	_, err := logstore.Open(t.TempDir(), logstore.Options{MaxOpenSegments: -1})
	require.ErrorIs(t, err, logstore.ErrInvalidArgument)
}
