package logstore_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// faults is a switchable fault injector: while armed, operation op on a
// path containing match fails with errno.
type faults struct {
	mu    sync.Mutex
	op    string
	match string
	errno syscall.Errno
	hits  int
}

func (f *faults) arm(op, match string, errno syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op, f.match, f.errno = op, match, errno
}

func (f *faults) clear() { f.arm("", "", 0) }

func (f *faults) fn(op, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.op == op && strings.Contains(path, f.match) {
		f.hits++
		return f.errno
	}
	return nil
}

// storageErrs records OnStorageError calls.
type storageErrs struct {
	mu  sync.Mutex
	ops []string
}

func (s *storageErrs) hook(op string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, op)
}

func (s *storageErrs) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ops...)
}

func requireStorageErr(t *testing.T, err error, errno syscall.Errno) {
	t.Helper()
	require.ErrorIs(t, err, logstore.ErrStorage)
	var got syscall.Errno
	require.ErrorAs(t, err, &got, "the errno stays reachable")
	assert.Equal(t, errno, got)
}

func TestDiskFullAppendRecovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    string
		match string
		fsync logstore.FsyncMode
	}{
		// A full disk fails every file: also the background probe's.
		{"write", "write", "", logstore.FsyncAlways},
		{"fsync", "fsync", "", logstore.FsyncAlways},
		{"write, fsync never", "write", "", logstore.FsyncNever},
		{"roll: segment create", "create", "", logstore.FsyncAlways},
		{"roll: directory fsync", "fsync", "", logstore.FsyncInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var se storageErrs
			opts := logstore.Options{Fsync: tc.fsync, OnStorageError: se.hook}
			s := openStore(t, dir, opts)
			var f faults
			s.InjectFault(f.fn)
			info, err := s.CreateTopic(ctx, "full", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
			require.NoError(t, err)
			// Fill the first segment almost to the brim: the next append rolls.
			appendN(t, s, "full", 0, 7, 1, 100, tsIdentity)
			require.Len(t, segmentBases(t, partDir(dir, info, 0)), 1)

			f.arm(tc.op, tc.match, syscall.ENOSPC)
			for i := 0; i < 3; i++ { // keeps failing while the disk is full
				_, err = s.Append(ctx, "full", 0, []logstore.Record{{Key: []byte("lost"), Value: make([]byte, 100)}})
				requireStorageErr(t, err, syscall.ENOSPC)
			}
			assert.Contains(t, se.seen(), tc.op)
			_, hw, err := s.Bounds("full", 0)
			require.NoError(t, err)
			assert.Equal(t, int64(7), hw, "a failed append is not visible")
			checkRecords(t, s, "full", 0, 7, 100, tsIdentity) // reads keep working
			off := s.Offline()
			require.Len(t, off, 1)
			assert.ErrorIs(t, off[0].Err, logstore.ErrStorage)

			// Space is back: the next append succeeds without a restart,
			// at the next dense offset.
			f.clear()
			appendN(t, s, "full", 7, 13, 1, 100, tsIdentity)
			assert.Empty(t, s.Offline())
			checkRecords(t, s, "full", 0, 20, 100, tsIdentity)
			assert.Greater(t, len(segmentBases(t, partDir(dir, info, 0))), 1, "it rolled")

			// Whatever the failed writes left in the files was cut.
			s = reopen(t, s, dir, opts)
			assert.Empty(t, s.Offline())
			checkRecords(t, s, "full", 0, 20, 100, tsIdentity)
			base, err := s.Append(ctx, "full", 0, []logstore.Record{{Value: []byte("x")}})
			require.NoError(t, err)
			assert.Equal(t, int64(20), base)
		})
	}
}

func TestDiskFullPurgeAndCreateTopic(t *testing.T) {
	dir := t.TempDir()
	var se storageErrs
	// No background probe during the test: it would clear the failed
	// purge's offline mark before the test looks (its own probe file does
	// not match the fault); TestFailingPartitionRecoversWithoutTraffic
	// covers the probe.
	s := openStore(t, dir, logstore.Options{OnStorageError: se.hook, ReclaimInterval: time.Hour})
	var f faults
	s.InjectFault(f.fn)
	_, err := s.CreateTopic(ctx, "p", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	appendN(t, s, "p", 0, 10, 2, 10, tsIdentity)

	// Purge: the log start cannot be persisted, so it does not move.
	f.arm("create", "log-start-offset", syscall.ENOSPC)
	_, err = s.DeleteRecordsBefore(ctx, "p", 0, 5)
	requireStorageErr(t, err, syscall.ENOSPC)
	ls, _, err := s.Bounds("p", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), ls)
	checkRecords(t, s, "p", 0, 10, 10, tsIdentity)
	require.Len(t, s.Offline(), 1)
	f.clear()
	ls, err = s.DeleteRecordsBefore(ctx, "p", 0, 5)
	require.NoError(t, err)
	assert.Equal(t, int64(5), ls)
	assert.Empty(t, s.Offline())

	// CreateTopic: nothing half-created stays behind, and the name is free.
	for _, op := range []string{"mkdir", "create", "rename"} {
		f.arm(op, "", syscall.ENOSPC)
		_, err = s.CreateTopic(ctx, "t", 3, logstore.TopicConfig{})
		requireStorageErr(t, err, syscall.ENOSPC)
		_, err = s.TopicInfo(ctx, "t")
		require.ErrorIs(t, err, logstore.ErrUnknownTopic, op)
		ents, err := os.ReadDir(filepath.Join(dir, "topics"))
		require.NoError(t, err)
		assert.Len(t, ents, 1, "%s: only topic p is on disk", op)
	}
	f.clear()
	_, err = s.CreateTopic(ctx, "t", 3, logstore.TopicConfig{})
	require.NoError(t, err)
	assert.Subset(t, se.seen(), []string{"create", "mkdir", "rename"})
}

func TestFailingPartitionRecoversWithoutTraffic(t *testing.T) {
	// Readiness must not stay NOT_SERVING for ever once the disk has room:
	// the background probe clears the failure without an append.
	s := openStore(t, t.TempDir(), logstore.Options{})
	var f faults
	s.InjectFault(f.fn)
	_, err := s.CreateTopic(ctx, "q", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	f.arm("write", "", syscall.EMFILE)
	_, err = s.Append(ctx, "q", 0, []logstore.Record{{Value: []byte("x")}})
	requireStorageErr(t, err, syscall.EMFILE)
	s.Probe()
	require.Len(t, s.Offline(), 1, "still failing: the probe's own write fails")
	f.clear()
	// The reclaimer probes failing partitions on every pass.
	require.Eventually(t, func() bool { return len(s.Offline()) == 0 }, pollFor, pollTick)
	base, err := s.Append(ctx, "q", 0, []logstore.Record{{Value: []byte("x")}})
	require.NoError(t, err)
	assert.Equal(t, int64(0), base)
}

func TestConcurrentAppendsUnderFaultsStayDense(t *testing.T) {
	// Producers keep appending while writes fail now and then: every
	// acknowledged record is at its acknowledged offset, and the offsets
	// have no gap and no reuse.
	dir := t.TempDir()
	s := openStore(t, dir, logstore.Options{})
	var flaky atomic.Int64
	s.InjectFault(func(op, path string) error {
		if op == "write" && strings.HasSuffix(path, ".log") && flaky.Add(1)%5 == 0 {
			return syscall.ENOSPC
		}
		return nil
	})
	_, err := s.CreateTopic(ctx, "c", 1, logstore.TopicConfig{SegmentBytes: 2048, RetentionMs: -1})
	require.NoError(t, err)
	var mu sync.Mutex
	acked := map[int64]string{}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 40 {
				v := fmt.Sprintf("w%d-%d", w, i)
				base, err := s.Append(ctx, "c", 0, []logstore.Record{{Value: []byte(v)}})
				if err != nil {
					if !errors.Is(err, logstore.ErrStorage) {
						t.Errorf("unexpected error: %v", err)
					}
					failed.Add(1)
					continue
				}
				mu.Lock()
				acked[base] = v
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d appends acknowledged, %d failed", len(acked), failed.Load())
	require.Positive(t, failed.Load(), "faults were hit")
	require.Positive(t, len(acked))
	s.InjectFault(nil)
	s = reopen(t, s, dir, logstore.Options{})
	_, hw, err := s.Bounds("c", 0)
	require.NoError(t, err)
	require.Equal(t, int64(len(acked)), hw, "every offset below the HW was acknowledged once")
	recs, err := s.Read(ctx, "c", 0, 0, 1000, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, len(acked))
	for i, r := range recs {
		require.Equal(t, int64(i), r.Offset)
		require.Equal(t, acked[r.Offset], string(r.Value))
	}
}

func TestUncleanShutdownRescansUnsyncedSegments(t *testing.T) {
	// With fsync never, sealed segments are not fsynced at roll; after a
	// crash Open checks every frame of those the checkpoint does not
	// vouch for. A clean Close fsyncs them, so the next Open trusts them.
	damageLastFrame := func(t *testing.T, path string) {
		fr := frames(t, path)
		flipAt(t, path, fr[len(fr)-1]+20)
	}
	damageMidFrame := func(t *testing.T, path string) {
		fr := frames(t, path)
		flipAt(t, path, fr[1]+20)
	}
	for _, tc := range []struct {
		name    string
		crash   bool
		damage  func(t *testing.T, path string)
		offline bool
		logged  bool // an ERROR at Open names the damage
	}{
		{"crash, tail of a sealed segment damaged", true, damageLastFrame, true, true},
		{"crash, middle of a sealed segment damaged", true, damageMidFrame, false, true},
		{"clean close: trusted, found by reads", false, damageLastFrame, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := logstore.Options{Fsync: logstore.FsyncNever}
			s := openStore(t, dir, opts)
			info, err := s.CreateTopic(ctx, "u", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1})
			require.NoError(t, err)
			appendN(t, s, "u", 0, 30, 1, 100, tsIdentity)
			if tc.crash {
				require.NoError(t, s.Crash())
			} else {
				require.NoError(t, s.Close())
			}
			bases := segmentBases(t, partDir(dir, info, 0))
			require.Greater(t, len(bases), 2)
			path := filepath.Join(partDir(dir, info, 0), fmt.Sprintf("%020d.log", bases[1]))
			tc.damage(t, path)

			logs := &syncBuffer{}
			opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
			s = openStore(t, dir, opts)
			if tc.logged {
				assert.Contains(t, logs.String(), "level=ERROR")
				assert.Contains(t, logs.String(), path, "Open names the damaged file")
			} else {
				assert.NotContains(t, logs.String(), "level=ERROR")
			}
			if tc.offline {
				off := s.Offline()
				require.Len(t, off, 1)
				require.ErrorIs(t, off[0].Err, logstore.ErrOffline)
				assert.Contains(t, off[0].Err.Error(), path)
				return
			}
			assert.Empty(t, s.Offline())
			_, err = s.Read(ctx, "u", 0, 0, 100, 1<<20)
			require.NoError(t, err, "records before the damage")
			var ce *logstore.CorruptError
			found := false
			for off := bases[1]; off < bases[2]; off++ {
				if _, err := s.Read(ctx, "u", 0, off, 1, 1<<20); errors.As(err, &ce) {
					found = true
					break
				}
			}
			assert.True(t, found, "reads of the damaged record fail")
			checkRecords(t, s, "u", int(ce.To+1), 30, 100, tsIdentity)
		})
	}
}
