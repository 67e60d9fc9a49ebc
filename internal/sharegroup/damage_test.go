package sharegroup

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/storage/sharestate/statelog"
)

// logBuf is a concurrency-safe log sink for checking what was logged.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func withLog(lb *logBuf, mut func(*testOpts)) func(*testOpts) {
	return func(o *testOpts) {
		o.Logger = slog.New(slog.NewTextHandler(lb, nil))
		if mut != nil {
			mut(o)
		}
	}
}

// frames splits a state-log file into its frames.
func frames(t *testing.T, b []byte) []statelog.Frame {
	t.Helper()
	fs, err := statelog.Frames(b)
	require.NoError(t, err)
	return fs
}

// damageSetup leaves a state directory where group g acknowledged t/0
// 0-4, then t/1 0-9, then t/0 5-6 (the last entry), and returns the store
// and directory. crash: the files as a kill -9 leaves them (the manifest's
// checkpoint is older than the last entries); otherwise after Close.
func damageSetup(t *testing.T, crash bool) (logstore.Store, string, string) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	e := newEnvOn(t, store, t.TempDir(), nil)
	e.topic("t", 2)
	x, y := tp("t", 0), tp("t", 1)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.produce("t", 0, 10, 10)
	e.produce("t", 1, 10, 10)
	resp := e.open("m", x, y)
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, resp, x))
	require.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, resp, y))
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 4, AckAccept))).Partitions[0].ErrorCode)
	require.Equal(t, apierr.None, e.ack("m", ackEntry(y, batch(0, 9, AckAccept))).Partitions[0].ErrorCode)
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(5, 6, AckAccept))).Partitions[0].ErrorCode)
	dir := e.opts.Dir
	if crash {
		dir = copyDir(t, e.opts.Dir)
	} else {
		require.NoError(t, e.m.Close())
	}
	files, err := listGenerations(dir)
	require.NoError(t, err)
	require.Len(t, files, 1)
	return store, dir, filepath.Join(dir, files[0].name)
}

// Clean recovery of damageSetup: nothing acknowledged comes back.
const (
	intactX = "spso=7"
	intactY = "spso=10"
)

// offlineCheck asserts that x is offline everywhere (fetch, ack, admin)
// with KAFKA_STORAGE_ERROR and a message naming the repair.
func offlineCheck(t *testing.T, e *env, x TopicPartition) {
	t.Helper()
	resp := e.open("m", x)
	p := part(t, resp, x)
	assert.Equal(t, apierr.KafkaStorageError, p.ErrorCode)
	assert.Contains(t, p.ErrorMessage, "--repair-share-state")
	assert.Empty(t, p.Records, "nothing delivered from lost state")
	r := e.ack("m", ackEntry(x, batch(7, 7, AckAccept)))
	assert.Equal(t, apierr.KafkaStorageError, r.Partitions[0].ErrorCode)
	offs, err := e.m.DescribeOffsets(context.Background(), testGroup, []TopicPartitions{{Topic: x.Topic, Partitions: []int32{x.Partition}}})
	require.NoError(t, err)
	assert.Equal(t, apierr.KafkaStorageError, offs[0].Partitions[0].ErrorCode)
	res, err := e.m.AlterOffsets(context.Background(), testGroup, []TopicStartOffsets{{Topic: x.Topic, Partitions: []PartitionStartOffset{{x.Partition, 0}}}})
	require.NoError(t, err)
	assert.Equal(t, apierr.KafkaStorageError, res[0].Partitions[0].ErrorCode)
}

func isOffline(e *env, x TopicPartition) bool {
	for _, o := range e.m.Offline() {
		if o.Group == testGroup && o.Topic == x.Topic && o.Partition == x.Partition {
			return true
		}
	}
	return false
}

// The damage table of the share-state log: every case either recovers
// cleanly (torn tail) or puts exactly the affected share-partitions
// offline with an ERROR naming them; the server always starts, accepted
// records are never delivered again, and --repair-share-state brings them
// online with the loss logged and the damaged file in quarantine.
func TestShareStateDamage(t *testing.T) {
	x, y := tp("t", 0), tp("t", 1)
	type damageCase struct {
		name    string
		crash   bool
		damage  func(t *testing.T, dir, file string)
		offline []TopicPartition // nil: clean recovery
		// after a repair (offline cases): the states kept
		repairedX, repairedY string
		quarantined          bool // the damaged file is in quarantine after the first start
	}
	flipIn := func(pick func([]statelog.Frame) statelog.Frame) func(t *testing.T, dir, file string) {
		return func(t *testing.T, _, file string) {
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			f := pick(frames(t, b))
			b[f.Pos+f.Len-1] ^= 0xff // a byte of the body: the key stays readable
			require.NoError(t, os.WriteFile(file, b, 0o644))
		}
	}
	firstDeltaOfX := func(fs []statelog.Frame) statelog.Frame {
		for _, f := range fs {
			if f.Kind == byte(sharestate.KindPartDelta) && f.Key.Partition == 0 {
				return f
			}
		}
		panic("no delta of t/0")
	}
	last := func(fs []statelog.Frame) statelog.Frame { return fs[len(fs)-1] }
	truncateTo := func(size func(b []byte) int) func(t *testing.T, dir, file string) {
		return func(t *testing.T, _, file string) {
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(file, int64(size(b))))
		}
	}
	cases := []damageCase{
		{name: "flipped byte mid-file", damage: flipIn(firstDeltaOfX), offline: []TopicPartition{x},
			repairedX: intactX, repairedY: intactY, quarantined: true},
		{name: "flipped byte in the last frame after a clean shutdown", damage: flipIn(last), offline: []TopicPartition{x},
			repairedX: "spso=5", repairedY: intactY, quarantined: true},
		{name: "torn last frame after a crash", crash: true, damage: func(t *testing.T, _, file string) {
			// An entry whose write never completed (so never acknowledged):
			// a copy of the last frame with a flipped byte, appended.
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			f := last(frames(t, b))
			torn := bytes.Clone(b[f.Pos : f.Pos+f.Len])
			torn[len(torn)-1] ^= 0xff
			require.NoError(t, os.WriteFile(file, append(b, torn...), 0o644))
		}},
		{name: "truncated mid-file", damage: truncateTo(func(b []byte) int { return len(b) / 2 }), offline: []TopicPartition{x, y},
			repairedX: "spso=0", repairedY: "spso=0", quarantined: true},
		{name: "truncated to the magic", damage: truncateTo(func([]byte) int { return len(fileMagic) }), offline: []TopicPartition{x, y},
			quarantined: true},
		{name: "emptied", damage: truncateTo(func([]byte) int { return 0 }), offline: []TopicPartition{x, y}, quarantined: true},
		{name: "deleted", damage: func(t *testing.T, _, file string) { require.NoError(t, os.Remove(file)) },
			offline: []TopicPartition{x, y}},
		{name: "manifest deleted", damage: func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Remove(filepath.Join(dir, manifestName)))
		}},
		{name: "manifest damaged", damage: func(t *testing.T, dir, _ string) {
			path := filepath.Join(dir, manifestName)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			b[len(b)/2] ^= 0x01
			require.NoError(t, os.WriteFile(path, b, 0o644))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store, dir, file := damageSetup(t, c.crash)
			c.damage(t, dir, file)
			var lb logBuf
			e := newEnvOn(t, store, dir, withLog(&lb, nil)) // never refuses to start
			if c.offline == nil {
				assert.Equal(t, intactX, e.state(x))
				assert.Equal(t, intactY, e.state(y))
				assert.Empty(t, e.m.Offline())
				if c.name == "manifest damaged" {
					assert.Contains(t, lb.String(), "level=ERROR")
					assert.Contains(t, lb.String(), "share state manifest damaged")
				}
				require.NoError(t, e.m.Close())
				_, err := readManifest(dir)
				require.NoError(t, err, "a new manifest is written")
				return
			}
			logs := lb.String()
			assert.Contains(t, logs, "level=ERROR")
			assert.Contains(t, logs, "acknowledged share state lost")
			assert.Contains(t, logs, "g t/0", "the ERROR names the group and share-partition")
			for _, z := range []TopicPartition{x, y} {
				want := false
				for _, o := range c.offline {
					want = want || o == z
				}
				assert.Equal(t, want, isOffline(e, z), "offline %v", z)
			}
			offlineCheck(t, e, x)
			if len(c.offline) == 1 {
				assert.Equal(t, intactY, e.state(y), "the unaffected share-partition keeps working")
			}
			// An unaffected group works.
			resp, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: "fresh", MemberID: "f", Partitions: entries(x)})
			require.NoError(t, err)
			assert.Equal(t, apierr.None, part(t, resp, x).ErrorCode)
			q, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", filepath.Base(file)))
			assert.Equal(t, c.quarantined, len(q) == 1, "damaged file in quarantine: %v", q)
			require.NoError(t, e.m.Close())

			// Still offline at the next start without a repair.
			e2 := newEnvOn(t, store, dir, nil)
			for _, z := range c.offline {
				assert.True(t, isOffline(e2, z), "still offline %v", z)
			}
			require.NoError(t, e2.m.Close())

			// The repair brings them online, logging what was dropped.
			var lr logBuf
			e3 := newEnvOn(t, store, dir, withLog(&lr, func(o *testOpts) { o.RepairShareState = true }))
			assert.Empty(t, e3.m.Offline())
			assert.Contains(t, lr.String(), "level=WARN")
			assert.Contains(t, lr.String(), "share state loss accepted")
			assert.Contains(t, lr.String(), "group=g topic=t partition=0")
			if c.repairedX != "" {
				assert.Equal(t, c.repairedX, e3.state(x))
				assert.Equal(t, c.repairedY, e3.state(y))
			}
			p := part(t, e3.open("m", x), x)
			assert.Equal(t, apierr.None, p.ErrorCode, p.ErrorMessage)
			require.NoError(t, e3.m.Close())
			e4 := newEnvOn(t, store, dir, nil)
			assert.Empty(t, e4.m.Offline(), "the repair is durable")
		})
	}
}

// Truncation below a periodic checkpoint (not only the clean-shutdown
// one) is detected after a crash.
func TestShareStateTruncatedBelowCheckpoint(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	e := newEnvOn(t, store, t.TempDir(), func(o *testOpts) { o.checkpointBytes = 64 })
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.produce("t", 0, 40, 10)
	require.Equal(t, []AcquiredRange{rng(0, 39, 1)}, acquired(t, e.open("m", x), x))
	for i := int64(0); i < 40; i += 2 {
		require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(i, i, AckAccept))).Partitions[0].ErrorCode)
	}
	dir := copyDir(t, e.opts.Dir) // crash
	mf, err := readManifest(dir)
	require.NoError(t, err)
	cp := mf.Files[len(mf.Files)-1]
	path := filepath.Join(dir, genFileName(cp.Gen))
	require.NoError(t, os.Truncate(path, cp.Size-1))
	var lb logBuf
	e2 := newEnvOn(t, store, dir, withLog(&lb, nil))
	assert.True(t, isOffline(e2, x))
	assert.Contains(t, lb.String(), "below its checkpoint")
}
