package txn

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	"github.com/sharelog/sharelog/internal/storage/txnstate"
)

type marker struct {
	topic  string
	part   int32
	pid    int64
	epoch  int16
	commit bool
}

type fakeLog struct {
	mu      sync.Mutex
	next    int64
	markers []marker
	fail    error
}

func (f *fakeLog) InitProducer(context.Context) (int64, int16, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	return f.next, 0, nil
}

func (f *fakeLog) WriteTxnMarker(_ context.Context, topic string, part int32, pid int64, epoch int16, commit bool, _ int32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.markers = append(f.markers, marker{topic, part, pid, epoch, commit})
	return nil
}

func (f *fakeLog) took() []marker {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.markers
	f.markers = nil
	return out
}

type fakeGroups struct {
	mu        sync.Mutex
	committed map[string][]groupoffsets.Offset
}

func (g *fakeGroups) CommitTransaction(_ context.Context, group string, offs []groupoffsets.Offset) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.committed == nil {
		g.committed = map[string][]groupoffsets.Offset{}
	}
	g.committed[group] = append(g.committed[group], offs...)
	return nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newCoord(t *testing.T, st txnstate.Store, lg *fakeLog, gs *fakeGroups, clk *clock) *Coordinator {
	t.Helper()
	c, err := New(Options{Store: st, Log: lg, Groups: gs, Now: clk.now, CheckInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestCommitWritesMarkersThenOffsets(t *testing.T) {
	ctx := context.Background()
	lg, gs, clk := &fakeLog{}, &fakeGroups{}, &clock{t: time.UnixMilli(1000)}
	c := newCoord(t, txnstate.NewMem(), lg, gs, clk)

	pid, epoch, err := c.InitProducer(ctx, "tx", 60000, -1, -1)
	require.NoError(t, err)
	assert.Equal(t, int16(0), epoch)
	p0, p1 := Partition{Topic: "t", Partition: 0}, Partition{Topic: "t", Partition: 1}
	assert.Equal(t, apierr.InvalidTxnState, apierr.ReasonOf(c.InTransaction("tx", pid, epoch, "t", 0)))
	require.NoError(t, c.AddPartitions(ctx, "tx", pid, epoch, []Partition{p0, p1}))
	require.NoError(t, c.InTransaction("tx", pid, epoch, "t", 1))
	assert.Equal(t, apierr.InvalidTxnState, apierr.ReasonOf(c.InTransaction("tx", pid, epoch, "t", 2)))

	// Offsets need the group added first.
	offs := []Offset{{Topic: "in", Partition: 3, Offset: 42, LeaderEpoch: -1}}
	assert.Equal(t, apierr.InvalidTxnState, apierr.ReasonOf(c.TxnOffsetCommit(ctx, "tx", pid, epoch, "g", offs)))
	require.NoError(t, c.AddOffsets(ctx, "tx", pid, epoch, "g"))
	require.NoError(t, c.TxnOffsetCommit(ctx, "tx", pid, epoch, "g", offs))
	assert.Equal(t, map[Partition]bool{{Topic: "in", Partition: 3}: true}, c.PendingOffsets("g"))
	assert.Empty(t, gs.committed)

	d, err := c.Describe("tx")
	require.NoError(t, err)
	assert.Equal(t, Description{ID: "tx", State: "Ongoing", ProducerID: pid, TimeoutMs: 60000, StartMs: 1000,
		Partitions: []Partition{p0, p1}}, d)

	require.NoError(t, c.EndTxn(ctx, "tx", pid, epoch, true))
	assert.Equal(t, []marker{{"t", 0, pid, 0, true}, {"t", 1, pid, 0, true}}, lg.took())
	assert.Equal(t, []groupoffsets.Offset{{Topic: "in", Partition: 3, Offset: 42, LeaderEpoch: -1}}, gs.committed["g"])
	assert.Empty(t, c.PendingOffsets("g"))
	// A retry of the same end answers the same; the other end is refused.
	require.NoError(t, c.EndTxn(ctx, "tx", pid, epoch, true))
	assert.Equal(t, apierr.InvalidTxnState, apierr.ReasonOf(c.EndTxn(ctx, "tx", pid, epoch, false)))
	assert.Empty(t, lg.took())

	// The next transaction aborts: markers, no offsets.
	require.NoError(t, c.AddOffsets(ctx, "tx", pid, epoch, "g"))
	require.NoError(t, c.AddPartitions(ctx, "tx", pid, epoch, []Partition{p1}))
	require.NoError(t, c.TxnOffsetCommit(ctx, "tx", pid, epoch, "g", []Offset{{Topic: "in", Partition: 3, Offset: 50}}))
	require.NoError(t, c.EndTxn(ctx, "tx", pid, epoch, false))
	assert.Equal(t, []marker{{"t", 1, pid, 0, false}}, lg.took())
	assert.Len(t, gs.committed["g"], 1)
	assert.Equal(t, []Description{{ID: "tx", State: "CompleteAbort", ProducerID: pid, TimeoutMs: 60000, StartMs: -1}}, c.List(nil, nil))
	assert.Empty(t, c.List([]string{"Ongoing"}, nil))
}

func TestInitProducerFencesAndAborts(t *testing.T) {
	ctx := context.Background()
	lg, gs, clk := &fakeLog{}, &fakeGroups{}, &clock{t: time.UnixMilli(1000)}
	c := newCoord(t, txnstate.NewMem(), lg, gs, clk)
	pid, e0, err := c.InitProducer(ctx, "tx", 60000, -1, -1)
	require.NoError(t, err)
	require.NoError(t, c.AddPartitions(ctx, "tx", pid, e0, []Partition{{Topic: "t", Partition: 0}}))

	// A new instance of the producer: same id, next epoch, the old
	// transaction aborted at that epoch.
	pid2, e1, err := c.InitProducer(ctx, "tx", 60000, -1, -1)
	require.NoError(t, err)
	assert.Equal(t, pid, pid2)
	assert.Equal(t, e0+1, e1)
	assert.Equal(t, []marker{{"t", 0, pid, e1, false}}, lg.took())
	// The old instance is fenced everywhere.
	assert.Equal(t, apierr.ProducerFenced, apierr.ReasonOf(c.AddPartitions(ctx, "tx", pid, e0, []Partition{{Topic: "t", Partition: 0}})))
	assert.Equal(t, apierr.ProducerFenced, apierr.ReasonOf(c.EndTxn(ctx, "tx", pid, e0, true)))
	assert.Equal(t, apierr.InvalidProducerEpoch, apierr.ReasonOf(c.InTransaction("tx", pid, e0, "t", 0)))
	// KIP-360: the producer's own id recovers; a wrong id does not.
	_, _, err = c.InitProducer(ctx, "tx", 60000, pid+100, 0)
	assert.Equal(t, apierr.InvalidProducerIDMapping, apierr.ReasonOf(err))
	_, e2, err := c.InitProducer(ctx, "tx", 60000, pid, e1)
	require.NoError(t, err)
	assert.Equal(t, e1+1, e2)
	// Timeouts are bounded.
	_, _, err = c.InitProducer(ctx, "tx", int32((DefaultMaxTimeout + time.Second).Milliseconds()), -1, -1)
	assert.Equal(t, apierr.InvalidTransactionTimeout, apierr.ReasonOf(err))
}

func TestTimeoutAbortsAndFences(t *testing.T) {
	ctx := context.Background()
	lg, gs, clk := &fakeLog{}, &fakeGroups{}, &clock{t: time.UnixMilli(1000)}
	c := newCoord(t, txnstate.NewMem(), lg, gs, clk)
	pid, e0, err := c.InitProducer(ctx, "tx", 10000, -1, -1)
	require.NoError(t, err)
	require.NoError(t, c.AddPartitions(ctx, "tx", pid, e0, []Partition{{Topic: "t", Partition: 0}}))
	clk.add(9 * time.Second)
	c.check(ctx)
	assert.Empty(t, lg.took())
	clk.add(time.Second)
	c.check(ctx)
	assert.Equal(t, []marker{{"t", 0, pid, e0 + 1, false}}, lg.took())
	assert.Equal(t, apierr.ProducerFenced, apierr.ReasonOf(c.EndTxn(ctx, "tx", pid, e0, true)))
}

func TestRecoveryCompletesDecidedTransactions(t *testing.T) {
	ctx := context.Background()
	st := txnstate.NewMem()
	lg, gs, clk := &fakeLog{}, &fakeGroups{}, &clock{t: time.UnixMilli(1000)}
	c := newCoord(t, st, lg, gs, clk)
	pid, e0, err := c.InitProducer(ctx, "tx", 60000, -1, -1)
	require.NoError(t, err)
	require.NoError(t, c.AddPartitions(ctx, "tx", pid, e0, []Partition{{Topic: "t", Partition: 0}}))
	require.NoError(t, c.AddOffsets(ctx, "tx", pid, e0, "g"))
	require.NoError(t, c.TxnOffsetCommit(ctx, "tx", pid, e0, "g", []Offset{{Topic: "in", Partition: 0, Offset: 7}}))
	// The commit is decided, but the marker write fails (as a crash
	// after the decision would leave it).
	lg.fail = apierr.New(apierr.KafkaStorageError, "disk")
	assert.Error(t, c.EndTxn(ctx, "tx", pid, e0, true))
	c.Close()
	d, err := c.Describe("tx")
	require.NoError(t, err)
	assert.Equal(t, "PrepareCommit", d.State)

	// A new coordinator over the same state completes the commit.
	lg.fail = nil
	c2 := newCoord(t, st, lg, gs, clk)
	assert.Equal(t, []marker{{"t", 0, pid, e0, true}}, lg.took())
	assert.Equal(t, []groupoffsets.Offset{{Topic: "in", Partition: 0, Offset: 7}}, gs.committed["g"])
	d, err = c2.Describe("tx")
	require.NoError(t, err)
	assert.Equal(t, "CompleteCommit", d.State)

	// An open transaction survives a restart and is aborted at its timeout.
	require.NoError(t, c2.AddPartitions(ctx, "tx", pid, e0, []Partition{{Topic: "t", Partition: 1}}))
	c2.Close()
	clk.add(61 * time.Second)
	newCoord(t, st, lg, gs, clk)
	assert.Equal(t, []marker{{"t", 1, pid, e0 + 1, false}}, lg.took())
}

// A transactional id idle for DefaultIDExpiration (Kafka's
// transactional.id.expiration.ms) is forgotten, in memory and in the
// state file: its old producer is unknown, and InitProducerID gives it a
// new producer id. An id with a transaction open is not expired (its
// timeout aborts it first, which is a change), and one used again in
// time keeps its state.
func TestIdleTransactionalIDsExpire(t *testing.T) {
	ctx := context.Background()
	lg, gs, clk := &fakeLog{}, &fakeGroups{}, &clock{t: time.UnixMilli(1000)}
	st := txnstate.Open(t.TempDir(), fsutil.NoSync)
	c := newCoord(t, st, lg, gs, clk)
	idle, ie, err := c.InitProducer(ctx, "idle", 10000, -1, -1)
	require.NoError(t, err)
	busy, be, err := c.InitProducer(ctx, "busy", 10000, -1, -1)
	require.NoError(t, err)

	clk.add(DefaultIDExpiration - time.Hour)
	c.check(ctx)
	// busy is used again in time: it stays, whatever happens to idle.
	require.NoError(t, c.AddPartitions(ctx, "busy", busy, be, []Partition{{Topic: "t", Partition: 0}}))
	require.NoError(t, c.EndTxn(ctx, "busy", busy, be, true))
	clk.add(time.Hour)
	c.check(ctx)

	ids := func() []string {
		all, err := st.Load()
		require.NoError(t, err)
		var out []string
		for _, tx := range all {
			out = append(out, tx.ID)
		}
		return out
	}
	assert.Equal(t, []string{"busy"}, ids(), "idle expired, busy kept")
	assert.Equal(t, apierr.InvalidProducerIDMapping, apierr.ReasonOf(c.AddPartitions(ctx, "idle", idle, ie, []Partition{{Topic: "t", Partition: 0}})),
		"the expired id's producer is unknown")
	again, _, err := c.InitProducer(ctx, "idle", 10000, -1, -1)
	require.NoError(t, err)
	assert.NotEqual(t, idle, again, "a new producer id for the id that came back")

	// A restart reads the state as expiry left it.
	c2 := newCoord(t, st, lg, gs, clk)
	list := c2.List(nil, nil)
	var names []string
	for _, tx := range list {
		names = append(names, tx.ID)
	}
	assert.ElementsMatch(t, []string{"busy", "idle"}, names)
}
