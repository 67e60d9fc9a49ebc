package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/storage/sharestate/statelog"
)

// copyDir copies the state files, as a crash would leave them (the
// manager keeps running: nothing of its in-memory state is carried over).
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, de.Name()), b, 0o644))
	}
	return dst
}

// Example 8: after a crash, ACQUIRED records are AVAILABLE with their last
// durable count and acknowledged ones are never redelivered.
func TestExample8Crash(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.produce("t", 0, 50, 10)
	for _, m := range []string{"a", "b", "c"} {
		e.open(m, x)
	}
	e.produce("t", 0, 50, 10) // 50..99
	require.Equal(t, []AcquiredRange{rng(50, 99, 1)}, acquired(t, e.fetch("a", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("a", ackEntry(x, batch(80, 89, AckRelease), batch(90, 99, AckAccept))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(80, 89, 2)}, acquired(t, e.fetch("b", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("b", ackEntry(x, batch(80, 89, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(80, 89, 3)}, acquired(t, e.fetch("b", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("a", ackEntry(x, batch(50, 59, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(50, 59, 2)}, acquired(t, e.fetch("c", FetchRequest{}), x))
	require.Equal(t, apierr.None, e.ack("c", ackEntry(x, batch(50, 59, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, "spso=50 [50-59 AVAILABLE(2)] [60-79 ACQUIRED(1)] [80-89 ACQUIRED(3)] [90-99 ACKNOWLEDGED(0)]", e.state(x))

	crashed := copyDir(t, e.opts.Dir) // kill -9
	e2 := newEnvOn(t, e.store, crashed, nil)
	resp := e2.open("a", x)
	assert.Equal(t, []AcquiredRange{rng(50, 59, 3), rng(60, 79, 1), rng(80, 89, 3)}, acquired(t, resp, x))
	e2.produce("t", 0, 1, 10)
	assert.Equal(t, []AcquiredRange{rng(100, 100, 1)}, acquired(t, e2.fetch("a", FetchRequest{}), x))
}

// Restart after a clean Close and after a crash: acknowledged records are
// never redelivered; acquired ones come back with their durable count.
func TestRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "close"
		if crash {
			name = "crash"
		}
		t.Run(name, func(t *testing.T) {
			store := logstore.NewMem()
			defer store.Close()
			dir := t.TempDir()
			e := newEnvOn(t, store, dir, func(o *testOpts) { o.DeliveryCountLimit = 4 })
			e.topic("t", 1)
			x := tp("t", 0)
			e.update(GroupConfig{AutoOffsetReset: str("earliest"), PartitionMaxRecordLocks: i32(300)})
			e.produce("t", 0, 1000, 10)
			// 0..99 accepted, 100..199 released once (count 1), 200..299 acquired.
			require.Equal(t, []AcquiredRange{rng(0, 299, 1)}, acquired(t, e.open("m", x), x))
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 99, AckAccept), batch(100, 199, AckRelease))).Partitions[0].ErrorCode)
			require.Equal(t, "spso=100 [100-199 AVAILABLE(1)] [200-299 ACQUIRED(1)]", e.state(x))
			if crash {
				dir = copyDir(t, dir)
			} else {
				require.NoError(t, e.m.Close())
			}
			e2 := newEnvOn(t, store, dir, nil)
			cfg, err := e2.m.GetConfig(context.Background(), testGroup)
			require.NoError(t, err)
			assert.Equal(t, "earliest", *cfg.AutoOffsetReset)
			assert.Equal(t, int32(300), *cfg.PartitionMaxRecordLocks)
			assert.Equal(t, int32(5), *cfg.DeliveryCountLimit, "an unset field follows the (new) default")
			assert.Equal(t, "spso=100 [100-199 AVAILABLE(1)]", e2.state(x))
			resp := e2.open("m", x)
			assert.Equal(t, []AcquiredRange{rng(100, 199, 2), rng(200, 399, 1)}, acquired(t, resp, x))
		})
	}
}

// Initialisation is durable: a restart never re-evaluates "latest".
func TestInitialisationDurable(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.produce("t", 0, 10, 10)
	e.open("m", x)
	e.produce("t", 0, 5, 10)
	e2 := newEnvOn(t, e.store, copyDir(t, e.opts.Dir), nil)
	assert.Equal(t, []AcquiredRange{rng(10, 14, 1)}, acquired(t, e2.open("m", x), x))
}

// At startup SPSO is clamped to the log start and state of deleted topics
// is dropped.
func TestStartupClampAndDrop(t *testing.T) {
	store := logstore.NewMem()
	defer store.Close()
	dir := t.TempDir()
	ctx := context.Background()
	e := newEnvOn(t, store, dir, nil)
	e.topic("keep", 1)
	e.topic("gone", 1)
	k, gn := tp("keep", 0), tp("gone", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.open("m", k, gn)
	e.produce("keep", 0, 100, 10)
	e.produce("gone", 0, 100, 10)
	require.Equal(t, []AcquiredRange{rng(0, 99, 1)}, acquired(t, e.fetch("m", FetchRequest{}), k))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(k, batch(0, 9, AckAccept), batch(10, 19, AckRelease))).Partitions[0].ErrorCode)
	require.NoError(t, e.m.Close())

	_, err := store.DeleteRecordsBefore(ctx, "keep", 0, 50)
	require.NoError(t, err)
	require.NoError(t, store.DeleteTopic(ctx, "gone"))
	e.topic("gone", 1) // re-created: a new topic id

	e2 := newEnvOn(t, store, dir, nil)
	assert.Equal(t, "spso=50", e2.state(k))
	g := e2.m.groupFor(testGroup, false)
	g.mu.Lock()
	assert.Len(t, g.parts, 1)
	g.mu.Unlock()
	e2.produce("gone", 0, 3, 10)
	resp := e2.open("m", k, gn)
	assert.Equal(t, []AcquiredRange{rng(50, 99, 1)}, acquired(t, resp, k))
	// The re-created topic starts with no share state: initialised again.
	assert.Equal(t, []AcquiredRange{rng(0, 2, 1)}, acquired(t, resp, gn))
}

// A torn last entry is discarded.
func TestRecoveryCorruption(t *testing.T) {
	setup := func(t *testing.T) (*env, string) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.produce("t", 0, 10, 10)
		e.open("m", x)
		e.produce("t", 0, 30, 10)
		e.fetch("m", FetchRequest{})
		for i := int64(10); i < 40; i += 10 {
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(i, i+4, AckAccept), batch(i+5, i+9, AckRelease))).Partitions[0].ErrorCode)
		}
		files, err := listGenerations(e.opts.Dir)
		require.NoError(t, err)
		require.Len(t, files, 1)
		return e, filepath.Join(e.opts.Dir, files[0].name)
	}
	t.Run("torn tail", func(t *testing.T) {
		e, file := setup(t)
		dir := copyDir(t, e.opts.Dir)
		path := filepath.Join(dir, filepath.Base(file))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		// The last entry cut in the middle.
		require.NoError(t, os.WriteFile(path, b[:len(b)-3], 0o644))
		e2 := newEnvOn(t, e.store, dir, nil)
		assert.Equal(t, "spso=15 [15-19 AVAILABLE(1)] [20-24 ACKNOWLEDGED(0)] [25-29 AVAILABLE(1)]", e2.state(tp("t", 0)))
	})
	t.Run("zeroed tail", func(t *testing.T) {
		e, file := setup(t)
		dir := copyDir(t, e.opts.Dir)
		path := filepath.Join(dir, filepath.Base(file))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(b, make([]byte, 100)...), 0o644))
		e2 := newEnvOn(t, e.store, dir, nil)
		assert.Contains(t, e2.state(tp("t", 0)), "spso=15")
	})
	// Damage before the tail: see damage_test.go.
}

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

func (f *faultHooks) hooks() *statelog.IOHooks {
	return &statelog.IOHooks{
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

// A failed state write (ENOSPC on write or fsync) rolls the
// acknowledgement back and reports KAFKA_STORAGE_ERROR; the failure is not
// sticky: once the fault is gone the next acknowledgement succeeds, with no
// restart, and other groups are never affected beyond the failed batch.
func TestStateWriteFailure(t *testing.T) {
	for _, which := range []string{"fsync", "write", "short write"} {
		t.Run(which, func(t *testing.T) {
			var f faultHooks
			e := newEnv(t, func(o *testOpts) { o.testHooks = f.hooks() })
			e.topic("t", 1)
			x := tp("t", 0)
			e.produce("t", 0, 10, 10)
			e.open("m", x)
			e.produce("t", 0, 20, 10)
			require.Equal(t, []AcquiredRange{rng(10, 29, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(10, 11, AckAccept))).Partitions[0].ErrorCode)
			before := e.state(x)
			f.set(which, true)
			r := e.ack("m", ackEntry(x, batch(12, 14, AckAccept), batch(15, 16, AckRelease), batch(17, 17, AckReject)))
			assert.Equal(t, apierr.KafkaStorageError, r.Partitions[0].ErrorCode)
			assert.Contains(t, r.Partitions[0].ErrorMessage, "no space left on device")
			assert.Equal(t, before, e.state(x), "rolled back: still ACQUIRED by the session")
			// Still failing: the retry fails the same way, state unchanged.
			resp := e.fetch("m", FetchRequest{Partitions: []PartitionEntry{ackEntry(x, batch(12, 12, AckAccept))}})
			assert.Equal(t, apierr.KafkaStorageError, part(t, resp, x).AckErrorCode)
			assert.Equal(t, before, e.state(x))
			_, err := e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{DeliveryCountLimit: i32(3)})
			require.Error(t, err)
			assert.Equal(t, apierr.KafkaStorageError, reqErr(err).Reason)
			assert.NotEmpty(t, e.m.Offline(), "the share-partition's durable state is unknown while the fault lasts")

			// Space is back: the next acknowledgement succeeds, no reopen.
			f.set(which, false)
			r = e.ack("m", ackEntry(x, batch(12, 14, AckAccept), batch(15, 16, AckRelease), batch(17, 17, AckReject)))
			require.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
			assert.Equal(t, "spso=15 [15-16 AVAILABLE(1)] [17-17 ARCHIVED(0)] [18-29 ACQUIRED(1)]", e.state(x))
			assert.Empty(t, e.m.Offline())
			_, err = e.m.UpdateConfig(context.Background(), testGroup, GroupConfig{DeliveryCountLimit: i32(3)})
			require.NoError(t, err)
			require.NoError(t, e.m.Close())

			// What was reported NONE is durable, and nothing half written
			// was left in the file: a restart has it all, with no damage.
			var lb logBuf
			e2 := newEnvOn(t, e.store, e.opts.Dir, withLog(&lb, nil))
			assert.Equal(t, "spso=15 [15-16 AVAILABLE(1)] [17-17 ARCHIVED(0)]", e2.state(x))
			assert.Empty(t, e2.m.Offline())
			assert.NotContains(t, lb.String(), "level=ERROR")
		})
	}
}

// A write failure affects only the entries in flight: another group's
// acknowledgement after the fault is cleared succeeds, and a partition
// whose background entry was lost rewrites its full state first.
func TestStateWriteFailureScoped(t *testing.T) {
	var f faultHooks
	e := newEnv(t, func(o *testOpts) { o.testHooks = f.hooks() })
	e.topic("t", 2)
	x, y := tp("t", 0), tp("t", 1)
	e.produce("t", 0, 10, 10)
	e.produce("t", 1, 10, 10)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	_, err := e.m.UpdateConfig(context.Background(), "other", GroupConfig{AutoOffsetReset: str("earliest")})
	require.NoError(t, err)
	open := func(group, member string, parts ...TopicPartition) FetchResponse {
		resp, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: group, MemberID: member, Partitions: entries(parts...)})
		require.NoError(t, err)
		return resp
	}
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, open("other", "o", y), y))
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, e.open("m", x), x))

	f.set("write", true)
	r := e.ack("m", ackEntry(x, batch(0, 4, AckAccept)))
	require.Equal(t, apierr.KafkaStorageError, r.Partitions[0].ErrorCode)
	f.set("write", false)
	// The other group was not part of the failed batch: its ack works.
	ro, err := e.m.ShareAcknowledge(context.Background(), AckRequest{GroupID: "other", MemberID: "o", Epoch: 1,
		Partitions: []PartitionEntry{ackEntry(y, batch(0, 9, AckAccept))}})
	require.NoError(t, err)
	require.Equal(t, apierr.None, ro.Partitions[0].ErrorCode)
	// The failed partition rewrites its full state, then acks normally.
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 4, AckAccept))).Partitions[0].ErrorCode)
	require.NoError(t, e.m.Close())
	e2 := newEnvOn(t, e.store, e.opts.Dir, nil)
	assert.Equal(t, "spso=5", e2.state(x), "0-4 acknowledged; 5-9 were only acquired")
}

// Rollback after the ack's effects were built upon (SPSO advanced by two
// acks in the same failed batch) restores every record.
func TestRollbackInterleaved(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.produce("t", 0, 10, 10)
	e.open("a", x)
	e.open("b", x)
	e.produce("t", 0, 20, 10)
	require.Equal(t, []AcquiredRange{rng(10, 19, 1)}, acquired(t, e.fetch("a", FetchRequest{MaxRecords: i32(10)}), x))
	require.Equal(t, []AcquiredRange{rng(20, 29, 1)}, acquired(t, e.fetch("b", FetchRequest{MaxRecords: i32(10)}), x))
	sp := e.sp(x)
	sa, _, _ := e.m.sessions.Lookup(keyOf("a"))
	sb, _, _ := e.m.sessions.Lookup(keyOf("b"))
	ra := sp.ack(sa, []AckBatch{batch(10, 19, AckAccept)})
	rb := sp.ack(sb, []AckBatch{batch(20, 24, AckAccept), batch(25, 29, AckRelease)})
	require.Equal(t, apierr.None, ra.code)
	require.Equal(t, apierr.None, rb.code)
	require.Equal(t, "spso=25 [25-29 AVAILABLE(1)]", e.state(x))
	// Both writes "failed": roll back a first, then b.
	sp.rollback(ra.undo, sa)
	sp.rollback(rb.undo, sb)
	assert.Equal(t, "spso=10 [10-19 ACQUIRED(1)] [20-29 ACQUIRED(1)]", e.state(x))
	// Owners are right: each session can acknowledge its own records.
	assert.Equal(t, apierr.None, e.ack("b", ackEntry(x, batch(20, 29, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, apierr.None, e.ack("a", ackEntry(x, batch(10, 19, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, "spso=30", e.state(x))
}

// Compaction keeps the state log's size O(live state) and loses nothing.
func TestCompaction(t *testing.T) {
	store := logstore.NewMem()
	defer store.Close()
	dir := t.TempDir()
	e := newEnvOn(t, store, dir, func(o *testOpts) { o.CompactBytes = 4096 })
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.open("m", x)
	e.produce("t", 0, 5000, 1)
	for off := int64(0); off < 4000; off += 10 {
		resp := e.fetch("m", FetchRequest{MaxRecords: i32(10)})
		require.Equal(t, []AcquiredRange{rng(off, off+9, 1)}, acquired(t, resp, x))
		r := e.ack("m", ackEntry(x, batch(off, off+9, AckAccept)))
		require.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
	}
	var total int64
	files, err := listGenerations(dir)
	require.NoError(t, err)
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f.name))
		require.NoError(t, err)
		total += st.Size()
	}
	assert.Less(t, total, int64(3*4096), "the state log was compacted (%d files, %d bytes)", len(files), total)
	assert.LessOrEqual(t, len(files), 2)
	require.NoError(t, e.m.Close())
	e2 := newEnvOn(t, store, dir, nil)
	assert.Equal(t, "spso=4000", e2.state(x))
}

// Concurrent acknowledgements share fsyncs (group commit) and each is
// durable before it returns NONE.
func TestGroupCommit(t *testing.T) {
	var syncs atomic.Int32
	hooks := &statelog.IOHooks{
		Write: func(f *os.File, b []byte) (int, error) { return f.Write(b) },
		Sync: func(f *os.File) error {
			syncs.Add(1)
			time.Sleep(5 * time.Millisecond) // a slow disk
			return fsutil.Fdatasync(f)
		},
	}
	e := newEnv(t, func(o *testOpts) { o.testHooks = hooks })
	e.topic("t", 1)
	x := tp("t", 0)
	const members = 16
	for i := range members {
		e.open(fmt.Sprint("m", i), x)
	}
	e.produce("t", 0, members*10, 1)
	for i := range members {
		require.Len(t, acquired(t, e.fetch(fmt.Sprint("m", i), FetchRequest{MaxRecords: i32(10)}), x), 1)
	}
	before := syncs.Load()
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() {
			// assert, not require (e.fetch, part): this is not the test's goroutine.
			m := fmt.Sprint("m", i)
			resp, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: m, Epoch: e.next(m),
				Partitions: []PartitionEntry{ackEntry(x, batch(int64(i*10), int64(i*10+9), AckAccept))}})
			if assert.NoError(t, err) && assert.True(t, hasPart(resp, x)) {
				for _, p := range resp.Partitions {
					if p.TopicPartition == x {
						assert.Equal(t, apierr.None, p.AckErrorCode)
					}
				}
			}
		})
	}
	wg.Wait()
	n := syncs.Load() - before
	t.Logf("%d acknowledgements, %d fsyncs", members, n)
	assert.Less(t, n, int32(members))
	assert.Equal(t, fmt.Sprintf("spso=%d", members*10), e.state(x))
}

// The interval and never modes acknowledge without waiting for fsync; a
// clean Close syncs everything.
func TestFsyncModes(t *testing.T) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncInterval, logstore.FsyncNever} {
		t.Run(mode.String(), func(t *testing.T) {
			store := logstore.NewMem()
			defer store.Close()
			dir := t.TempDir()
			e := newEnvOn(t, store, dir, func(o *testOpts) { o.Fsync, o.FsyncInterval = mode, 10*time.Millisecond })
			e.topic("t", 1)
			x := tp("t", 0)
			e.open("m", x)
			e.produce("t", 0, 10, 1)
			e.fetch("m", FetchRequest{})
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 4, AckAccept))).Partitions[0].ErrorCode)
			require.NoError(t, e.m.Close()) // at once: Close alone must make the ack durable
			e2 := newEnvOn(t, store, dir, nil)
			assert.Equal(t, "spso=5", e2.state(x))
		})
	}
}

// End to end on the file log store: consume, purge, restart both.
func TestFileStoreRestart(t *testing.T) {
	logDir, stateDir := t.TempDir(), t.TempDir()
	ctx := context.Background()
	store, err := logstore.Open(logDir, logstore.Options{Fsync: logstore.FsyncAlways})
	require.NoError(t, err)
	e := newEnvOn(t, store, stateDir, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.produce("t", 0, 100, 100)
	resp := e.open("m", x)
	require.Equal(t, []AcquiredRange{rng(0, 99, 1)}, acquired(t, resp, x))
	require.Len(t, part(t, resp, x).Records, 100)
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 39, AckAccept), batch(40, 49, AckRelease))).Partitions[0].ErrorCode)
	_, err = store.DeleteRecordsBefore(ctx, "t", 0, 45)
	require.NoError(t, err)
	require.NoError(t, e.m.Close())
	require.NoError(t, store.Close())

	store, err = logstore.Open(logDir, logstore.Options{Fsync: logstore.FsyncAlways})
	require.NoError(t, err)
	defer store.Close()
	e2 := newEnvOn(t, store, stateDir, nil)
	assert.Equal(t, "spso=45 [45-49 AVAILABLE(1)]", e2.state(x))
	resp = e2.open("m", x)
	assert.Equal(t, []AcquiredRange{rng(45, 49, 2), rng(50, 99, 1)}, acquired(t, resp, x))
	require.NoError(t, e2.m.Close())
}

// The manager depends on the share-state store only through its interface:
// on the memory store too, acknowledged records survive a restart (and a
// crash) and acquired ones come back with their durable count; a write
// failure rolls the acknowledgement back and is not sticky.
func TestRestartOnMemoryState(t *testing.T) {
	store := logstore.NewMem()
	defer store.Close()
	med := sharestate.NewMemMedium()
	e := newEnvState(t, store, sharestate.OpenMem(med))
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.produce("t", 0, 30, 10)
	require.Equal(t, []AcquiredRange{rng(0, 29, 1)}, acquired(t, e.open("m", x), x))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 9, AckAccept), batch(10, 19, AckRelease))).Partitions[0].ErrorCode)
	med.SetFailing(errors.New("injected"))
	r := e.ack("m", ackEntry(x, batch(20, 24, AckAccept)))
	assert.Equal(t, apierr.KafkaStorageError, r.Partitions[0].ErrorCode)
	med.SetFailing(nil)
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(20, 21, AckAccept))).Partitions[0].ErrorCode)
	require.Equal(t, "spso=10 [10-19 AVAILABLE(1)] [20-21 ACKNOWLEDGED(0)] [22-29 ACQUIRED(1)]", e.state(x))

	crashed := med.Crash()
	e2 := newEnvState(t, store, sharestate.OpenMem(crashed))
	assert.Equal(t, "spso=10 [10-19 AVAILABLE(1)] [20-21 ACKNOWLEDGED(0)]", e2.state(x))
	require.NoError(t, e2.m.Close())
	e3 := newEnvState(t, store, sharestate.OpenMem(crashed))
	assert.Equal(t, []AcquiredRange{rng(10, 19, 2), rng(22, 29, 1)}, acquired(t, e3.open("m", x), x))
}
