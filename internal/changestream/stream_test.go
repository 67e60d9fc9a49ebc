package changestream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/principal"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(cleanupM{m}) }

// cleanupM closes the benchmarks' shared store before the leak check.
type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	code := c.m.Run()
	closeBenchStore()
	return code
}

var ctx = context.Background()

// call runs Stream in a goroutine and exposes its events on a channel.
type call struct {
	events chan string
	done   chan error
	cancel context.CancelFunc
}

func start(t *testing.T, m *changestream.Manager, req changestream.Request) *call {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	c := &call{events: make(chan string, 1024), done: make(chan error, 1), cancel: cancel}
	started := make(chan struct{})
	req.Started = func() { close(started) }
	go func() {
		c.done <- m.Stream(cctx, req, changestream.SendFunc(func(ev *changestream.Event) error {
			c.events <- ev.String()
			return nil
		}))
	}()
	t.Cleanup(func() {
		cancel()
		<-c.done
	})
	select {
	case <-started:
	case err := <-c.done:
		c.done <- err
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not start")
	}
	return c
}

func (c *call) next(t *testing.T) string {
	t.Helper()
	select {
	case e := <-c.events:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
		return ""
	}
}

func (c *call) take(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, c.next(t))
	}
	return out
}

func (c *call) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case e := <-c.events:
		t.Fatalf("unexpected event %s", e)
	case <-time.After(d):
	}
}

func newStore(t *testing.T) *logstore.MemStore {
	s := logstore.NewMem()
	t.Cleanup(func() { s.Close() })
	return s
}

func appendKV(t *testing.T, s logstore.Store, topic string, kvs ...string) {
	t.Helper()
	var recs []logstore.Record
	for i := 0; i+1 < len(kvs); i += 2 {
		r := logstore.Record{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])}
		if kvs[i+1] == "" {
			r.Value = nil
		}
		recs = append(recs, r)
	}
	_, err := s.Append(ctx, topic, 0, recs)
	require.NoError(t, err)
}

// TestHoldBack: a live-tail range where nothing matches is held back up to
// HoldBack and merged with the next; a matching record is never held.
func TestHoldBack(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.CreateTopic(ctx, "h", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	m, err := changestream.New(st, st, changestream.Config{HoldBack: 300 * time.Millisecond})
	require.NoError(t, err)
	c := start(t, m, changestream.Request{Topic: "h", KeyPrefix: []byte("u/")})
	appendKV(t, st, "h", "x/1", "a")
	c.none(t, 50*time.Millisecond) // held
	appendKV(t, st, "h", "x/2", "b")
	appendKV(t, st, "h", "u/1", "c") // a match: sent at once, merged with the held range
	assert.Equal(t, []string{"marker(0..2, MEMORY)", "mut(u/1@2)"}, c.take(t, 2))
	appendKV(t, st, "h", "x/3", "d")
	began := time.Now()
	assert.Equal(t, []string{"marker(3..3, MEMORY)", "adv(3)"}, c.take(t, 2), "released after the hold-back")
	assert.GreaterOrEqual(t, time.Since(began), 200*time.Millisecond)
	assert.Less(t, time.Since(began), 3*time.Second)

	// With end_offset, the last range is never held.
	c2 := start(t, m, changestream.Request{Topic: "h", StartOffset: 4, EndOffset: ptr(int64(5)), KeyPrefix: []byte("u/")})
	appendKV(t, st, "h", "x/4", "e")
	assert.Equal(t, []string{"marker(4..4, MEMORY)", "adv(4)", "end(OK)"}, c2.take(t, 3))
}

func ptr[T any](v T) *T { return &v }

// notReady is a key index that is always rebuilding.
type notReady struct{ logstore.KeyIndexer }

func (notReady) ScanKeys(context.Context, string, int32, []byte, int64) (logstore.KeyCursor, error) {
	return nil, fmt.Errorf("rebuilding: %w", logstore.ErrIndexNotReady)
}

// TestIndexNotReady: while the key index is rebuilt, OSO is ineligible and
// the call is ordered (a cold index makes a call ineligible).
func TestIndexNotReady(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.CreateTopic(ctx, "r", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	appendKV(t, st, "r", "a", "1", "b", "2")
	m, err := changestream.New(st, notReady{st}, changestream.Config{Backfill: changestream.BackfillEnabled})
	require.NoError(t, err)
	c := start(t, m, changestream.Request{Topic: "r", EndOffset: ptr(int64(2)), OSO: changestream.OSOWithOffsetAdvanced})
	assert.Equal(t, []string{"marker(0..1, DISK)", "mut(a@0)", "mut(b@1)", "end(OK)"}, c.take(t, 4))
}

// TestShutdown: open streams end with SHUTDOWN, new calls fail UNAVAILABLE.
func TestShutdown(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.CreateTopic(ctx, "s", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	m, err := changestream.New(st, st, changestream.Config{})
	require.NoError(t, err)
	c := start(t, m, changestream.Request{Topic: "s"})
	m.Shutdown()
	assert.Equal(t, "end(SHUTDOWN)", c.next(t))
	require.NoError(t, <-c.done)
	c.done <- nil
	err = m.Stream(ctx, changestream.Request{Topic: "s"}, changestream.SendFunc(func(*changestream.Event) error { return nil }))
	var ce *apierr.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, apierr.Unavailable, ce.Reason)
}

// TestBatchBounds: reads are bounded by BatchRecords / BatchBytes whatever
// the backlog; events are sent one by one and a blocked send blocks reads.
func TestBatchBounds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newStore(t)
		_, err := st.CreateTopic(ctx, "b", 1, logstore.TopicConfig{RetentionMs: -1})
		require.NoError(t, err)
		var kvs []string
		for i := range 1000 {
			kvs = append(kvs, fmt.Sprintf("k%d", i), "v")
		}
		appendKV(t, st, "b", kvs...)
		cs := &countingStore{Store: st}
		m, err := changestream.New(cs, st, changestream.Config{BatchRecords: 100})
		require.NoError(t, err)
		release := make(chan struct{})
		var sent int
		done := make(chan error, 1)
		go func() {
			done <- m.Stream(ctx, changestream.Request{Topic: "b", EndOffset: ptr(int64(1000))}, changestream.SendFunc(func(*changestream.Event) error {
				sent++
				if sent == 50 {
					<-release // a full flow-control window
				}
				return nil
			}))
		}()
		synctest.Wait() // the stream is blocked in its 50th send
		assert.Equal(t, 1, cs.reads(), "nothing is read ahead while a send blocks")
		close(release)
		require.NoError(t, <-done)
		assert.Equal(t, 1+1000+1, sent)
		assert.LessOrEqual(t, cs.maxBatch(), 100)
	})
}

type countingStore struct {
	logstore.Store
	mu    sync.Mutex
	n     int
	batch int
}

func (c *countingStore) Read(ctx context.Context, topic string, p int32, off int64, maxRecords, maxBytes int) ([]logstore.Record, error) {
	recs, err := c.Store.Read(ctx, topic, p, off, maxRecords, maxBytes)
	c.mu.Lock()
	c.n++
	c.batch = max(c.batch, len(recs))
	c.mu.Unlock()
	return recs, err
}
func (c *countingStore) reads() int    { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
func (c *countingStore) maxBatch() int { c.mu.Lock(); defer c.mu.Unlock(); return c.batch }

// TestSendErrorStops: a failing send (a broken transport) ends the call with
// that error.
func TestSendErrorStops(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.CreateTopic(ctx, "e", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	appendKV(t, st, "e", "a", "1")
	m, err := changestream.New(st, st, changestream.Config{})
	require.NoError(t, err)
	boom := errors.New("transport gone")
	err = m.Stream(ctx, changestream.Request{Topic: "e"}, changestream.SendFunc(func(*changestream.Event) error { return boom }))
	assert.ErrorIs(t, err, boom)
	assert.Zero(t, m.Open(), "the slot is released")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	for name, cfg := range map[string]changestream.Config{
		"bad backfill":   {Backfill: "sometimes"},
		"ratio above 1":  {AutoSmallRatio: 1.5},
		"negative ratio": {AutoLargeRatio: -0.1},
		"negative size":  {AutoSmallRecordBytes: -1},
	} {
		_, err := changestream.New(st, st, cfg)
		assert.Error(t, err, name)
	}
}

// TestEstimate: the auto rule at its boundary.
func TestEstimate(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.CreateTopic(ctx, "est", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	var kvs []string
	for i := range 100 {
		kvs = append(kvs, fmt.Sprintf("p%02d/%d", i%50, i), "v") // small records: r = small ratio
	}
	appendKV(t, st, "est", kvs...)
	m, err := changestream.New(st, st, changestream.Config{AutoSmallRatio: 0.1, AutoLargeRatio: 0.5, AutoSmallRecordBytes: 256})
	require.NoError(t, err)
	// 100 records, r = 0.1: OSO iff at most 10 matching keys.
	cases := []struct {
		prefix string
		oso    bool
	}{
		{"p00/", true}, // 2 keys
		{"p0", false},  // p00..p09: 20 keys
		{"p", false},   // 100 keys
		{"none", true}, // M = 0
	}
	for _, tc := range cases {
		oso, err := m.Estimate(ctx, "est", 0, []byte(tc.prefix))
		require.NoError(t, err)
		assert.Equal(t, tc.oso, oso, "prefix %q", tc.prefix)
	}
	big, err := changestream.New(st, st, changestream.Config{AutoSmallRatio: 0.1, AutoLargeRatio: 0.5, AutoSmallRecordBytes: 1})
	require.NoError(t, err)
	oso, err := big.Estimate(ctx, "est", 0, []byte("p0"))
	require.NoError(t, err)
	assert.True(t, oso, "large records: r = 0.5, 20 keys <= 50")
}

// TestPerPrincipalShare: a client at --max-change-streams-per-principal is
// refused with THROTTLING_QUOTA_EXCEEDED while another client still opens
// streams; a closed stream frees its client's slot.
func TestPerPrincipalShare(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.CreateTopic(ctx, "q", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	m, err := changestream.New(st, nil, changestream.Config{MaxStreams: 6}) // share: 3
	require.NoError(t, err)
	open := func(who string) (closeFn func(), err error) {
		cctx, cancel := context.WithCancel(principal.WithName(ctx, who))
		started, done := make(chan struct{}), make(chan error, 1)
		go func() {
			done <- m.Stream(cctx, changestream.Request{Topic: "q", Started: func() { close(started) }},
				changestream.SendFunc(func(*changestream.Event) error { return nil }))
		}()
		select {
		case <-started:
			t.Cleanup(func() { cancel(); <-done })
			return func() { cancel(); <-done; done <- nil }, nil
		case err := <-done:
			cancel()
			return nil, err
		case <-time.After(5 * time.Second):
			t.Fatal("the call neither started nor failed")
			return nil, nil
		}
	}
	var closeA []func()
	for range 3 {
		c, err := open("ip:127.0.0.2")
		require.NoError(t, err)
		closeA = append(closeA, c)
	}
	_, err = open("ip:127.0.0.2")
	var ce *apierr.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, apierr.ThrottlingQuotaExceeded, ce.Reason)
	assert.Contains(t, ce.Message, "--max-change-streams-per-principal")
	for range 3 {
		_, err := open("token-1")
		require.NoError(t, err, "client B keeps its share")
	}
	closeA[0]()
	_, err = open("ip:127.0.0.2")
	require.NoError(t, err, "a closed stream frees the client's slot")
	assert.EqualValues(t, 6, m.Open())
}

// holdingSender holds every event until Flush, as a batching transport
// does, and publishes what each Flush handed over.
type holdingSender struct {
	held    []string
	flushed chan []string
}

func (h *holdingSender) Send(ev *changestream.Event) error {
	h.held = append(h.held, ev.String())
	return nil
}

func (h *holdingSender) Flush() error {
	if len(h.held) > 0 {
		h.flushed <- h.held
		h.held = nil
	}
	return nil
}

// TestFlushPoints: a Sender may hold events, and the stream flushes it
// wherever it would otherwise keep them while it waits: before waiting for
// the partition to change (so the live tail is not delayed) and after
// stream_end. With a Sender that flushes nothing by itself, every event
// still arrives.
func TestFlushPoints(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	_, err := st.CreateTopic(ctx, "f", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	appendKV(t, st, "f", "a", "1", "b", "2")
	m, err := changestream.New(st, st, changestream.Config{HoldBack: -1})
	require.NoError(t, err)
	h := &holdingSender{flushed: make(chan []string, 16)}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Stream(cctx, changestream.Request{Topic: "f"}, h) }()
	t.Cleanup(func() { cancel(); <-done })
	next := func() []string {
		t.Helper()
		select {
		case evs := <-h.flushed:
			return evs
		case <-time.After(5 * time.Second):
			t.Fatal("nothing flushed")
			return nil
		}
	}

	assert.Equal(t, []string{"marker(0..1, DISK)", "mut(a@0)", "mut(b@1)"}, next(), "flushed before waiting at the HW")
	appendKV(t, st, "f", "c", "3")
	assert.Equal(t, []string{"marker(2..2, MEMORY)", "mut(c@2)"}, next(), "each tail snapshot before the next wait")
	m.Shutdown()
	assert.Equal(t, []string{"end(SHUTDOWN)"}, next(), "stream_end is flushed")
	require.NoError(t, <-done)
	done <- nil
}
