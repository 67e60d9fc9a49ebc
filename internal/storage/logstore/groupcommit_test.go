package logstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fsyncGate holds the fsyncs of segment files while armed: each one
// announces itself on entered and returns what the test sends on release.
type fsyncGate struct {
	mu       sync.Mutex
	armed    bool
	entered  chan struct{}
	release  chan error
	stopped  chan struct{} // closed when the test ends: gated fsyncs fail at once
	stopOnce sync.Once
}

func newFsyncGate() *fsyncGate {
	return &fsyncGate{entered: make(chan struct{}), release: make(chan error), stopped: make(chan struct{})}
}

// errGateStopped fails the fsyncs still gated when a test ends (after a
// failed assertion), so that closing the store cannot hang.
var errGateStopped = errors.New("fsync gate stopped")

func (g *fsyncGate) stop() { g.stopOnce.Do(func() { close(g.stopped) }) }

func (g *fsyncGate) set(armed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = armed
}

func (g *fsyncGate) fn(op, path string) error {
	if op != opFsync || !strings.HasSuffix(path, logSuffix) {
		return nil
	}
	g.mu.Lock()
	armed := g.armed
	g.mu.Unlock()
	if armed {
		select {
		case g.entered <- struct{}{}:
		case <-g.stopped:
			return errGateStopped
		}
		select {
		case err := <-g.release:
			return err
		case <-g.stopped:
			return errGateStopped
		}
	}
	return nil
}

// gateTimeout only bounds a hang when the code under test is wrong.
const gateTimeout = 10 * time.Second

// awaitFsync waits until a gated fsync has started.
func (g *fsyncGate) awaitFsync(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(gateTimeout):
		t.Fatal("no fsync started")
	}
}

type appendResult struct {
	base int64
	err  error
}

// goAppend appends one record in a goroutine; the result arrives on the
// returned channel.
func goAppend(s *FileStore, topic, value string) <-chan appendResult {
	ch := make(chan appendResult, 1)
	go func() {
		base, err := s.Append(context.Background(), topic, 0, []Record{{Value: []byte(value)}})
		ch <- appendResult{base, err}
	}()
	return ch
}

func result(t *testing.T, ch <-chan appendResult) appendResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(gateTimeout):
		t.Fatal("append did not return")
		return appendResult{}
	}
}

func requireNotDone(t *testing.T, ch <-chan appendResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned (%d, %v) before its fsync", what, r.base, r.err)
	default:
	}
}

// awaitQueued waits until n requests are queued behind the commit in
// progress.
func awaitQueued(t *testing.T, p *partition, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		p.wmu.Lock()
		defer p.wmu.Unlock()
		return len(p.pending) == n
	}, gateTimeout, time.Millisecond)
}

// gatedStore opens a store in fsync mode always with topic "pl" holding
// three records w0..w2 (committed before the gate is armed).
func gatedStore(t *testing.T, dir string, g *fsyncGate) (*FileStore, *partition) {
	t.Helper()
	s, err := Open(dir, Options{Fsync: FsyncAlways})
	require.NoError(t, err)
	t.Cleanup(func() {
		g.stop()
		_ = s.Close() // ErrClosed if the test closed or crashed it
	})
	s.InjectFault(g.fn)
	_, err = s.CreateTopic(context.Background(), "pl", 1, TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	for i := range 3 {
		base, err := s.Append(context.Background(), "pl", 0, []Record{{Value: fmt.Appendf(nil, "w%d", i)}})
		require.NoError(t, err)
		require.Equal(t, int64(i), base)
	}
	p, err := s.partition("pl", 0)
	require.NoError(t, err)
	return s, p
}

// requireLog checks that the partition holds exactly values, from offset 0.
func requireLog(t *testing.T, s *FileStore, values ...string) {
	t.Helper()
	_, hw, err := s.Bounds("pl", 0)
	require.NoError(t, err)
	require.Equal(t, int64(len(values)), hw)
	recs, err := s.Read(context.Background(), "pl", 0, 0, 100, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, len(values))
	for i, r := range recs {
		assert.Equal(t, int64(i), r.Offset)
		assert.Equal(t, values[i], string(r.Value))
	}
}

func TestGroupCommitFsyncFailureFailsQueue(t *testing.T) {
	dir := t.TempDir()
	g := newFsyncGate()
	s, p := gatedStore(t, dir, g)

	g.set(true)
	a := goAppend(s, "pl", "a")
	g.awaitFsync(t) // a is written; its fsync hangs
	b := goAppend(s, "pl", "b")
	awaitQueued(t, p, 1) // b and c queue behind a's commit
	c := goAppend(s, "pl", "c")
	awaitQueued(t, p, 2)
	requireNotDone(t, a, "a")
	requireNotDone(t, b, "b")
	requireNotDone(t, c, "c")
	_, hw, err := s.Bounds("pl", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(3), hw, "nothing of a, b, c is visible before an fsync covers it")

	// a's fsync fails: a is not durable, and b and c were encoded at the
	// offsets after a's. All three fail.
	g.release <- syscall.EIO
	for name, ch := range map[string]<-chan appendResult{"a": a, "b": b, "c": c} {
		r := result(t, ch)
		require.ErrorIs(t, r.err, ErrStorage, name)
		require.ErrorIs(t, r.err, syscall.EIO, name)
	}
	_, hw, err = s.Bounds("pl", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(3), hw)
	require.Len(t, s.Offline(), 1, "failing until the next commit repairs")

	// The next append repairs (cuts a from the file) and takes the
	// first offset never acknowledged.
	g.set(false)
	base, err := s.Append(context.Background(), "pl", 0, []Record{{Value: []byte("d")}})
	require.NoError(t, err)
	assert.Equal(t, int64(3), base)
	assert.Empty(t, s.Offline())
	requireLog(t, s, "w0", "w1", "w2", "d")

	require.NoError(t, s.Crash())
	s, err = Open(dir, Options{Fsync: FsyncAlways})
	require.NoError(t, err)
	defer s.Close()
	requireLog(t, s, "w0", "w1", "w2", "d")
}

func TestGroupCommitWaitsForAnFsyncAfterItsWrite(t *testing.T) {
	dir := t.TempDir()
	g := newFsyncGate()
	s, p := gatedStore(t, dir, g)

	g.set(true)
	a := goAppend(s, "pl", "a")
	g.awaitFsync(t)
	b := goAppend(s, "pl", "b")
	awaitQueued(t, p, 1)

	// a's fsync started before b was written: it acknowledges a only.
	g.release <- nil
	r := result(t, a)
	require.NoError(t, r.err)
	assert.Equal(t, int64(3), r.base)
	g.awaitFsync(t) // b's own fsync
	requireNotDone(t, b, "b")
	_, hw, err := s.Bounds("pl", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(4), hw, "the high watermark stops after a")
	g.release <- nil
	r = result(t, b)
	require.NoError(t, r.err)
	assert.Equal(t, int64(4), r.base)
	g.set(false)
	requireLog(t, s, "w0", "w1", "w2", "a", "b")
}

// durableSizes remembers, per segment file, its size when its latest fsync
// started: an fsync covers the writes completed before it started, so a
// crash keeps at least that much.
type durableSizes struct {
	mu sync.Mutex
	m  map[string]int64
}

func (d *durableSizes) fn(op, path string) error {
	if op == opFsync && strings.HasSuffix(path, logSuffix) {
		if fi, err := os.Stat(path); err == nil {
			d.mu.Lock()
			d.m[path] = fi.Size()
			d.mu.Unlock()
		}
	}
	return nil
}

// crashImage copies the store directory as a power cut would leave it:
// each segment file cut to its durable size (0 if never synced), index and
// key-index files (rebuildable) and temp files left out. The checkpoint is
// copied before the sizes are read, so the segments it lists were synced
// before.
func (d *durableSizes) crashImage(t *testing.T, dir, to string) {
	t.Helper()
	var logs []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		dst := filepath.Join(to, rel)
		switch name := e.Name(); {
		case e.IsDir():
			return os.MkdirAll(dst, 0o755)
		case strings.HasSuffix(name, logSuffix):
			logs = append(logs, rel)
			return nil
		case name == "LOCK" || strings.HasSuffix(name, tmpSuffix) || strings.HasSuffix(name, indexSuffix) ||
			strings.HasSuffix(name, timeIndexSuffix) || strings.HasSuffix(name, keysSuffix):
			return nil
		}
		return copyPrefix(path, dst, -1)
	})
	require.NoError(t, err)
	d.mu.Lock()
	sizes := maps.Clone(d.m)
	d.mu.Unlock()
	for _, rel := range logs {
		require.NoError(t, copyPrefix(filepath.Join(dir, rel), filepath.Join(to, rel), sizes[filepath.Join(dir, rel)]))
	}
}

// copyPrefix copies the first n bytes of src to dst (all of it if n < 0).
func copyPrefix(src, dst string, n int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	var r io.Reader = in
	if n >= 0 {
		r = io.LimitReader(in, n)
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func TestGroupCommitCrashImages(t *testing.T) {
	// Many producers, fsync always, small segments (rolls while groups
	// form). Crash images are taken while they run: every record
	// acknowledged before an image was taken is in it, at its offset.
	dir := t.TempDir()
	d := &durableSizes{m: map[string]int64{}}
	s, err := Open(dir, Options{Fsync: FsyncAlways})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() }) // after a failed assertion
	s.InjectFault(d.fn)
	_, err = s.CreateTopic(context.Background(), "ci", 1, TopicConfig{SegmentBytes: 8 << 10, RetentionMs: -1})
	require.NoError(t, err)

	const producers, each, images = 8, 60, 3
	var mu sync.Mutex
	acked := map[int64]string{}
	progress := make(chan int, producers*each)
	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			for i := range each {
				n := 1 + (w+i)%4
				recs := make([]Record, n)
				for j := range recs {
					recs[j].Value = fmt.Appendf(nil, "w%d-%d-%d", w, i, j)
				}
				base, err := s.Append(context.Background(), "ci", 0, recs)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				for j, r := range recs {
					acked[base+int64(j)] = string(r.Value)
				}
				mu.Unlock()
				progress <- 1
			}
		})
	}

	type image struct {
		dir   string
		acked map[int64]string
	}
	var imgs []image
	take := func() {
		mu.Lock()
		a := maps.Clone(acked)
		mu.Unlock()
		img := image{dir: t.TempDir(), acked: a}
		d.crashImage(t, dir, img.dir)
		imgs = append(imgs, img)
	}
	go func() {
		wg.Wait()
		close(progress)
	}()
	done, next := 0, 1
	for range progress {
		if done++; next < images && done >= next*producers*each/images {
			take() // while the producers run
			next++
		}
	}
	require.Equal(t, producers*each, done)
	take() // everything acknowledged
	require.NoError(t, s.Close())
	require.Len(t, imgs, images)

	for i, img := range imgs {
		is, err := Open(img.dir, Options{Fsync: FsyncAlways})
		require.NoError(t, err, "image %d", i)
		require.Empty(t, is.Offline(), "image %d", i)
		_, hw, err := is.Bounds("ci", 0)
		require.NoError(t, err)
		var maxAcked int64 = -1
		for off := range img.acked {
			maxAcked = max(maxAcked, off)
		}
		require.Greater(t, hw, maxAcked, "image %d: the high watermark covers every acknowledged record", i)
		for off := int64(0); off < hw; {
			recs, err := is.Read(context.Background(), "ci", 0, off, 1000, 1<<20)
			require.NoError(t, err)
			require.NotEmpty(t, recs)
			for _, r := range recs {
				require.Equal(t, off, r.Offset, "image %d: dense offsets", i)
				if v, ok := img.acked[off]; ok {
					require.Equal(t, v, string(r.Value), "image %d offset %d", i, off)
				}
				off++
			}
		}
		t.Logf("image %d: %d acknowledged, high watermark %d", i, len(img.acked), hw)
		require.NoError(t, is.Close())
	}
}
