package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/sessioncache"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/storage/sharestate/statelog"
)

// env is one test's store and manager.
type env struct {
	t     testing.TB
	store logstore.Store
	m     *Manager
	opts  testOpts

	mu     sync.Mutex
	epochs map[string]int32 // member -> next epoch (for helpers)
}

// testOpts are a test's manager options and those of its file share-state
// store (statelog), which the server builds from the same flags.
type testOpts struct {
	Options
	Dir              string
	Fsync            logstore.FsyncMode
	FsyncInterval    time.Duration
	CompactBytes     int64
	RepairShareState bool
	testHooks        *statelog.IOHooks // fault injection
	checkpointBytes  int64             // manifest checkpoint period
}

// openWith opens the file share-state store in o.Dir and a manager on it.
func openWith(store logstore.Store, o testOpts) (*Manager, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	st, err := statelog.Open(statelog.Options{Dir: o.Dir, Fsync: o.Fsync, FsyncInterval: o.FsyncInterval, Logger: logger,
		CompactBytes: o.CompactBytes, RepairShareState: o.RepairShareState, CheckpointBytes: o.checkpointBytes, Hooks: o.testHooks})
	if err != nil {
		return nil, err
	}
	return Open(store, st, o.Options)
}

// newEnv opens a manager on a fresh MemStore in a temporary directory.
// mut adjusts the options before Open.
func newEnv(t testing.TB, mut func(*testOpts)) *env {
	t.Helper()
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	return newEnvOn(t, store, t.TempDir(), mut)
}

func newEnvOn(t testing.TB, store logstore.Store, dir string, mut func(*testOpts)) *env {
	t.Helper()
	opts := testOpts{Options: Options{Logger: slog.New(slog.DiscardHandler)}, Dir: dir}
	if mut != nil {
		mut(&opts)
	}
	m, err := openWith(store, opts)
	require.NoError(t, err)
	e := &env{t: t, store: store, m: m, opts: opts, epochs: map[string]int32{}}
	t.Cleanup(func() { _ = m.Close() })
	return e
}

const testGroup = "g"

func (e *env) topic(name string, partitions int32) logstore.TopicInfo {
	e.t.Helper()
	info, err := e.store.CreateTopic(context.Background(), name, partitions, logstore.TopicConfig{})
	require.NoError(e.t, err)
	return info
}

// produce appends n records of size bytes (value only) and returns the
// first offset.
func (e *env) produce(topic string, part int32, n, size int) int64 {
	e.t.Helper()
	recs := make([]logstore.Record, n)
	for i := range recs {
		recs[i].Value = make([]byte, size)
	}
	base, err := e.store.Append(context.Background(), topic, part, recs)
	require.NoError(e.t, err)
	return base
}

func tp(topic string, part int32) TopicPartition {
	return TopicPartition{Topic: topic, Partition: part}
}

func entries(tps ...TopicPartition) []PartitionEntry {
	out := make([]PartitionEntry, len(tps))
	for i, x := range tps {
		out[i] = PartitionEntry{TopicPartition: x}
	}
	return out
}

func batch(first, last int64, t AckType) AckBatch {
	return AckBatch{FirstOffset: first, LastOffset: last, Types: []AckType{t}}
}

func ackEntry(x TopicPartition, bs ...AckBatch) PartitionEntry {
	return PartitionEntry{TopicPartition: x, Batches: bs}
}

// open opens member's session on parts (epoch 0, no wait) and returns the
// response.
func (e *env) open(member string, parts ...TopicPartition) FetchResponse {
	e.t.Helper()
	resp, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: member, Epoch: 0, Partitions: entries(parts...)})
	require.NoError(e.t, err)
	e.setEpoch(member, 1)
	return resp
}

func (e *env) setEpoch(member string, next int32) {
	e.mu.Lock()
	e.epochs[member] = next
	e.mu.Unlock()
}

// next returns and consumes member's next epoch.
func (e *env) next(member string) int32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	ep := e.epochs[member]
	e.epochs[member] = ep + 1
	return ep
}

// fetch sends an incremental ShareFetch (no wait) with the member's next
// epoch; req's group, member and epoch are filled in.
func (e *env) fetch(member string, req FetchRequest) FetchResponse {
	e.t.Helper()
	req.GroupID, req.MemberID, req.Epoch = testGroup, member, e.next(member)
	resp, err := e.m.ShareFetch(context.Background(), req)
	require.NoError(e.t, err)
	return resp
}

// ack sends a ShareAcknowledge with the member's next epoch.
func (e *env) ack(member string, es ...PartitionEntry) AckResponse {
	e.t.Helper()
	resp, err := e.m.ShareAcknowledge(context.Background(), AckRequest{GroupID: testGroup, MemberID: member, Epoch: e.next(member), Partitions: es})
	require.NoError(e.t, err)
	return resp
}

// update sets group config fields.
func (e *env) update(c GroupConfig) {
	e.t.Helper()
	_, err := e.m.UpdateConfig(context.Background(), testGroup, c)
	require.NoError(e.t, err)
}

func i32(v int32) *int32 { return &v }

// opt is nil for 0 (the default), else &v.
func opt(v int32) *int32 {
	if v == 0 {
		return nil
	}
	return &v
}
func str(v string) *string   { return &v }
func f64(v float64) *float64 { return &v }
func reqErr(err error) *apierr.Error {
	var e *apierr.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// part returns the response entry for x (failing if absent).
func part(t testing.TB, resp FetchResponse, x TopicPartition) PartitionFetchResult {
	t.Helper()
	for _, p := range resp.Partitions {
		if p.TopicPartition == x {
			return p
		}
	}
	t.Fatalf("no response entry for %s/%d in %+v", x.Topic, x.Partition, resp.Partitions)
	return PartitionFetchResult{}
}

func hasPart(resp FetchResponse, x TopicPartition) bool {
	for _, p := range resp.Partitions {
		if p.TopicPartition == x {
			return true
		}
	}
	return false
}

// acquired returns the acquired ranges of x.
func acquired(t testing.TB, resp FetchResponse, x TopicPartition) []AcquiredRange {
	t.Helper()
	return part(t, resp, x).Acquired
}

func rng(first, last int64, count int32) AcquiredRange {
	return AcquiredRange{FirstOffset: first, LastOffset: last, DeliveryCount: count}
}

// sp returns the live share-partition of x in the test group.
func (e *env) sp(x TopicPartition) *sharePartition {
	e.t.Helper()
	info, _, err := e.store.Topic(context.Background(), x.Topic)
	require.NoError(e.t, err)
	g := e.m.groupFor(testGroup, false)
	require.NotNil(e.t, g)
	s := g.partition(info.ID, x.Topic, x.Partition, false)
	require.NotNil(e.t, s, "no share-partition %v", x)
	return s
}

// state renders a share-partition: "spso=N [a-b STATE(count)] ..." with
// ACQUIRED runs showing their owner's member via owners (session ID ->
// name) when known.
func (e *env) state(x TopicPartition) string {
	e.t.Helper()
	s := e.sp(x)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls, _, err := e.store.Bounds(x.Topic, x.Partition); err == nil && s.status == spLive {
		s.prepare(ls, e.m.now())
	}
	require.NoError(e.t, s.invariants())
	return renderState(s)
}

func renderState(s *sharePartition) string {
	var b strings.Builder
	fmt.Fprintf(&b, "spso=%d", s.spso)
	for _, r := range s.runs {
		fmt.Fprintf(&b, " [%d-%d %s(%d)]", r.first, r.last, r.state, r.count)
	}
	for _, r := range s.below {
		fmt.Fprintf(&b, " below[%d-%d %s(%d)]", r.first, r.last, r.state, r.count)
	}
	return b.String()
}

// spso returns x's SPSO.
func (e *env) spso(x TopicPartition) int64 {
	s := e.sp(x)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spso
}

func keyOf(member string) sessioncache.Key { return sessioncache.Key{Group: testGroup, Member: member} }

// hookStore wraps a store to fail reads or hide offsets (as compaction
// would remove records).
type hookStore struct {
	logstore.Store
	mu      sync.Mutex
	readErr error
	hidden  map[int64]bool
}

func (h *hookStore) setReadErr(err error) {
	h.mu.Lock()
	h.readErr = err
	h.mu.Unlock()
}

func (h *hookStore) hide(offs ...int64) {
	h.mu.Lock()
	if h.hidden == nil {
		h.hidden = map[int64]bool{}
	}
	for _, o := range offs {
		h.hidden[o] = true
	}
	h.mu.Unlock()
}

func (h *hookStore) Read(ctx context.Context, topic string, part int32, off int64, n, maxBytes int) ([]logstore.Record, error) {
	h.mu.Lock()
	err, hidden := h.readErr, h.hidden
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	recs, err := h.Store.Read(ctx, topic, part, off, n, maxBytes)
	if err != nil || len(hidden) == 0 {
		return recs, err
	}
	out := recs[:0]
	for _, r := range recs {
		if !hidden[r.Offset] {
			out = append(out, r)
		}
	}
	return out, nil
}

// invariants checks the run list: sorted, gap-free, exactly [SPSO, SPEO],
// no terminal run first, states' fields normalised; below under SPSO and
// ACQUIRED. mu is held.
func (p *sharePartition) invariants() error {
	if p.status != spLive {
		return nil
	}
	if p.speo < p.spso-1 {
		return fmt.Errorf("speo %d < spso %d - 1", p.speo, p.spso)
	}
	next := p.spso
	for i, r := range p.runs {
		if r.first != next || r.last < r.first {
			return fmt.Errorf("run %d [%d-%d]: expected to start at %d: %s", i, r.first, r.last, next, renderState(p))
		}
		if i == 0 && r.state.terminal() {
			return fmt.Errorf("terminal first run: %s", renderState(p))
		}
		if r.state != stAcquired && (r.owner != 0 || r.deadline != 0) || r.state.terminal() && r.count != 0 {
			return fmt.Errorf("run %d not normalised: %+v", i, r)
		}
		if r.availAt != 0 && (r.state != stAvailable || r.availAt < p.nextAvail) {
			return fmt.Errorf("run %d waits (%d) but is %s or before nextAvail %d", i, r.availAt, r.state, p.nextAvail)
		}
		if r.state == stAcquired && r.deadline < p.nextDeadline {
			return fmt.Errorf("run %d deadline %d before nextDeadline %d", i, r.deadline, p.nextDeadline)
		}
		next = r.last + 1
	}
	if next != p.speo+1 {
		return fmt.Errorf("runs end at %d, speo %d: %s", next-1, p.speo, renderState(p))
	}
	for _, r := range p.below {
		if r.last >= p.spso || r.state != stAcquired {
			return fmt.Errorf("bad below run %+v: %s", r, renderState(p))
		}
	}
	return nil
}

// State directory inspection (the file share-state store's).

type genFile struct {
	gen  uint64
	name string
}

func listGenerations(dir string) ([]genFile, error) {
	fs, err := statelog.Files(dir)
	out := make([]genFile, len(fs))
	for i, f := range fs {
		out[i] = genFile{f.Gen, f.Name}
	}
	return out, err
}

const (
	manifestName = statelog.ManifestName
	fileMagic    = statelog.FileMagic
)

var (
	readManifest = statelog.ReadManifest
	genFileName  = statelog.FileName
)

// newEnvState opens a manager on a given share-state store (not the file
// one); e.opts.Dir is unused.
func newEnvState(t testing.TB, store logstore.Store, st sharestate.Store) *env {
	t.Helper()
	opts := testOpts{Options: Options{Logger: slog.New(slog.DiscardHandler)}}
	m, err := Open(store, st, opts.Options)
	require.NoError(t, err)
	e := &env{t: t, store: store, m: m, opts: opts, epochs: map[string]int32{}}
	t.Cleanup(func() { _ = m.Close() })
	return e
}
