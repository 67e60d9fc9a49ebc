package sharestatetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Medium is where an implementation keeps share state across opens: a
// directory, a bucket, a memory image.
type Medium interface {
	// Open opens a store on the medium, recovering what stores opened on it
	// before wrote. The suite closes every store it opens.
	Open(t *testing.T) sharestate.Store
	// Crash returns a medium holding what a crash of the process at this
	// instant would leave: at least every entry whose Wait returned nil.
	// Stores open on the receiver stay open.
	Crash(t *testing.T) Medium
	// SetFailing makes the writes of stores open on the medium fail (on)
	// or succeed again (off), as a full disk would. It returns false if
	// the implementation cannot inject failures: those cases are skipped.
	SetFailing(on bool) bool
}

// Run runs the conformance suite; newMedium returns a fresh, empty medium
// for one subtest. Subtests run in parallel.
func Run(t *testing.T, newMedium func(t *testing.T) Medium) {
	cases := []struct {
		name string
		fn   func(t *testing.T, m Medium)
	}{
		{"Empty", testEmpty},
		{"RoundTrip", testRoundTrip},
		{"WaitSettlesEarlierTickets", testWaitSettles},
		{"SnapshotReplaces", testSnapshotReplaces},
		{"OfflineSurvives", testOfflineSurvives},
		{"CrashKeepsWaited", testCrash},
		{"WriteFailureNotSticky", testWriteFailure},
		{"ConcurrentWriters", testConcurrent},
		{"Closed", testClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newMedium(t))
		})
	}
}

// owner plays the share-group manager: it writes through the store, keeps
// the state it considers live (entries applied once waited for) and writes
// it in full when the store asks for a snapshot.
type owner struct {
	t  *testing.T
	st sharestate.Store
	mu sync.Mutex
	im *sharestate.Image
}

func open(t *testing.T, m Medium) *owner {
	t.Helper()
	st := m.Open(t)
	t.Cleanup(func() { _ = st.Close() })
	o := &owner{t: t, st: st, im: sharestate.NewImage()}
	rec := st.Recovered()
	require.NotNil(t, rec)
	replay(o.im, rec)
	return o
}

func (o *owner) start() {
	o.t.Helper()
	require.NoError(o.t, o.st.Start(o.snapshot))
}

// snapshot writes the owner's live state in full.
func (o *owner) snapshot() error {
	o.mu.Lock()
	st := o.im.State()
	o.mu.Unlock()
	for _, e := range fullEntries(st) {
		if _, err := o.st.Write(e); err != nil {
			return err
		}
	}
	return nil
}

// write writes e and applies it to the owner's state in one step (as the
// manager does under its locks), so a snapshot never misses an entry
// written before it.
func (o *owner) write(e *sharestate.Entry) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	tk, err := o.st.Write(*e)
	if err == nil {
		o.im.Apply(e)
	}
	return tk, err
}

// put writes e and waits for it; if it fails the owner's state is rolled
// back (as the manager rolls back a failed acknowledgement). The owner's
// lock is held from the write to the rollback, so a snapshot never reads a
// change whose write failed (the Store.Start contract). puts must not run
// concurrently.
func (o *owner) put(e sharestate.Entry) (uint64, error) {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	prev := o.im.State()
	tk, err := o.st.Write(e)
	require.NoError(o.t, err)
	require.NotZero(o.t, tk, "0 is never a ticket")
	o.im.Apply(&e)
	if err := o.st.Wait(tk); err != nil {
		o.im = sharestate.NewImage()
		replay(o.im, prev)
		return tk, err
	}
	return tk, nil
}

func (o *owner) mustPut(e sharestate.Entry) uint64 {
	o.t.Helper()
	tk, err := o.put(e)
	require.NoError(o.t, err)
	return tk
}

func (o *owner) close() {
	o.t.Helper()
	require.NoError(o.t, o.st.Close())
}

func fullEntries(st *sharestate.State) []sharestate.Entry {
	var out []sharestate.Entry
	for _, g := range st.Groups {
		out = append(out, sharestate.Entry{Kind: sharestate.KindGroup, Group: g.ID, GroupEpoch: g.GroupEpoch, Config: g.Config})
		for _, p := range g.Partitions {
			if p.Initialized {
				out = append(out, sharestate.Entry{Kind: sharestate.KindPartFull, Group: g.ID, Topic: p.Topic, TopicID: p.TopicID,
					Partition: p.Partition, SPSO: p.SPSO, Ranges: p.Ranges})
			}
			if p.Offline != "" {
				out = append(out, sharestate.Entry{Kind: sharestate.KindPartOffline, Group: g.ID, Topic: p.Topic, TopicID: p.TopicID,
					Partition: p.Partition, Reason: p.Offline})
			}
		}
	}
	return out
}

func replay(im *sharestate.Image, st *sharestate.State) {
	for _, e := range fullEntries(st) {
		im.Apply(&e)
	}
}

// dump renders a state, one line per group and share-partition.
func dump(st *sharestate.State) []string {
	var out []string
	for _, g := range st.Groups {
		c := g.Config
		cfg := ""
		if c.RecordLockDurationMs != nil {
			cfg += fmt.Sprintf(" lock=%d", *c.RecordLockDurationMs)
		}
		if c.DeliveryCountLimit != nil {
			cfg += fmt.Sprintf(" limit=%d", *c.DeliveryCountLimit)
		}
		if c.PartitionMaxRecordLocks != nil {
			cfg += fmt.Sprintf(" locks=%d", *c.PartitionMaxRecordLocks)
		}
		if c.AutoOffsetReset != nil {
			cfg += " reset=" + *c.AutoOffsetReset
		}
		if c.SessionTimeoutMs != nil {
			cfg += fmt.Sprintf(" session=%d", *c.SessionTimeoutMs)
		}
		if c.HeartbeatIntervalMs != nil {
			cfg += fmt.Sprintf(" heartbeat=%d", *c.HeartbeatIntervalMs)
		}
		if c.DeadLetterTopic != nil {
			cfg += " dlq=" + *c.DeadLetterTopic
		}
		if c.Ordering != nil {
			cfg += " ordering=" + *c.Ordering
		}
		if c.RedeliveryBackoffInitialMs != nil {
			cfg += fmt.Sprintf(" backoff=%d", *c.RedeliveryBackoffInitialMs)
		}
		if c.RedeliveryBackoffMaxMs != nil {
			cfg += fmt.Sprintf(" backoff-max=%d", *c.RedeliveryBackoffMaxMs)
		}
		if c.RedeliveryBackoffMultiplier != nil {
			cfg += fmt.Sprintf(" backoff-x=%g", *c.RedeliveryBackoffMultiplier)
		}
		if c.IsolationLevel != nil {
			cfg += " isolation=" + *c.IsolationLevel
		}
		out = append(out, fmt.Sprintf("group %s epoch=%d%s", g.ID, g.GroupEpoch, cfg))
		for _, p := range g.Partitions {
			s := fmt.Sprintf("  %s/%d(%s)", p.Topic, p.Partition, p.TopicID)
			if p.Initialized {
				s += fmt.Sprintf(" spso=%d", p.SPSO)
				for _, r := range p.Ranges {
					s += fmt.Sprintf(" [%d-%d %v(%d)]", r.First, r.Last, r.State, r.Count)
				}
			} else {
				s += " uninitialised"
			}
			if p.Offline != "" {
				s += " offline=" + p.Offline
			}
			out = append(out, s)
		}
	}
	return out
}

func i32(v int32) *int32   { return &v }
func str(v string) *string { return &v }

func group(id string, epoch int32) sharestate.Entry {
	return sharestate.Entry{Kind: sharestate.KindGroup, Group: id, GroupEpoch: epoch}
}

func part(k sharestate.Kind, g, topic string, p int32, spso int64, rs ...sharestate.Range) sharestate.Entry {
	return sharestate.Entry{Kind: k, Group: g, Topic: topic, TopicID: "id-" + topic, Partition: p, SPSO: spso, Ranges: rs}
}

func rng(first, last int64, st sharestate.RecState, count int16) sharestate.Range {
	return sharestate.Range{First: first, Last: last, State: st, Count: count}
}

const (
	avail = sharestate.Available
	ack   = sharestate.Acknowledged
	arch  = sharestate.Archived
)

func testEmpty(t *testing.T, m Medium) {
	o := open(t, m)
	assert.Empty(t, o.st.Recovered().Groups)
	o.start()
	assert.Zero(t, o.st.Failures())
	o.close()
	o2 := open(t, m)
	assert.Empty(t, o2.st.Recovered().Groups)
}

// Every kind of entry, read back after a reopen, with the replay rules: a
// delta builds on the state, SPSO moves past leading terminal ranges,
// AVAILABLE with count 0 is implicit, terminal counts are not kept,
// deletes remove, a later group entry replaces the earlier.
func testRoundTrip(t *testing.T, m Medium) {
	o := open(t, m)
	o.start()
	g1 := group("g1", 3)
	g1.Config = sharestate.GroupConfig{RecordLockDurationMs: i32(1000), AutoOffsetReset: str("earliest"), HeartbeatIntervalMs: i32(500)}
	o.mustPut(g1)
	o.mustPut(group("g2", 0))
	o.mustPut(part(sharestate.KindPartFull, "g1", "t", 0, 10, rng(10, 12, avail, 1), rng(13, 13, ack, 0), rng(20, 25, arch, 0)))
	o.mustPut(part(sharestate.KindPartDelta, "g1", "t", 0, 10, rng(10, 10, ack, 0)))
	o.mustPut(part(sharestate.KindPartDelta, "g1", "t", 0, 11, rng(11, 12, arch, 0), rng(30, 31, avail, 0), rng(40, 40, avail, 4)))
	o.mustPut(part(sharestate.KindPartFull, "g1", "t", 1, 5, rng(7, 8, avail, 2)))
	o.mustPut(part(sharestate.KindPartFull, "g1", "t", 2, 0))
	o.mustPut(part(sharestate.KindPartDelete, "g1", "t", 2, 0))
	off := part(sharestate.KindPartOffline, "g1", "u", 0, 0)
	off.Reason = "lost in a test"
	o.mustPut(off)
	o.mustPut(part(sharestate.KindPartFull, "g2", "t", 0, 0))
	o.mustPut(sharestate.Entry{Kind: sharestate.KindGroupDelete, Group: "g2"})
	g1.GroupEpoch = 4
	g1.Config.DeliveryCountLimit = i32(7)
	ord, mult := "key", 1.5
	g1.Config.DeadLetterTopic, g1.Config.Ordering, g1.Config.RedeliveryBackoffInitialMs = str("dlq.g1"), &ord, i32(250)
	g1.Config.RedeliveryBackoffMaxMs, g1.Config.RedeliveryBackoffMultiplier = i32(9000), &mult
	g1.Config.IsolationLevel = str("read_committed")
	o.mustPut(g1)
	o.mustPut(group("g3", 1))
	want := []string{
		"group g1 epoch=4 lock=1000 limit=7 reset=earliest heartbeat=500 dlq=dlq.g1 ordering=key backoff=250 backoff-max=9000 backoff-x=1.5 isolation=read_committed",
		"  t/0(id-t) spso=14 [20-25 ARCHIVED(0)] [40-40 AVAILABLE(4)]",
		"  t/1(id-t) spso=5 [7-8 AVAILABLE(2)]",
		"  u/0(id-u) uninitialised offline=lost in a test",
		"group g3 epoch=1",
	}
	o.close()
	assert.Equal(t, want, dump(open(t, m).st.Recovered()), "after a clean close")
}

// Waiting for a ticket settles every earlier one; tickets grow.
func testWaitSettles(t *testing.T, m Medium) {
	o := open(t, m)
	o.start()
	var tickets []uint64
	for i := range 50 {
		e := part(sharestate.KindPartFull, "g", "t", int32(i), int64(i))
		tk, err := o.st.Write(e)
		require.NoError(t, err)
		tickets = append(tickets, tk)
	}
	assert.True(t, slices.IsSorted(tickets) && !slices.Contains(tickets, 0), "tickets grow from 1: %v", tickets)
	assert.Len(t, slices.Compact(slices.Clone(tickets)), len(tickets), "tickets are distinct")
	require.NoError(t, o.st.Wait(tickets[len(tickets)-1]))
	for _, tk := range tickets {
		assert.False(t, o.st.Lost(tk))
		assert.NoError(t, o.st.Wait(tk))
	}
	assert.False(t, o.st.Lost(0))
}

// What the snapshot of Start writes replaces everything older: state the
// owner no longer holds is gone after the next open.
func testSnapshotReplaces(t *testing.T, m Medium) {
	o := open(t, m)
	o.start()
	o.mustPut(group("keep", 1))
	o.mustPut(part(sharestate.KindPartFull, "keep", "t", 0, 100, rng(101, 101, ack, 0)))
	o.mustPut(group("drop", 1))
	o.mustPut(part(sharestate.KindPartFull, "drop", "t", 0, 5))
	o.close()

	o2 := open(t, m)
	require.Len(t, o2.st.Recovered().Groups, 2)
	// The owner settles what it recovered (the "drop" group is gone, e.g.
	// its topic was deleted) before the startup snapshot.
	o2.mu.Lock()
	o2.im.Apply(&sharestate.Entry{Kind: sharestate.KindGroupDelete, Group: "drop"})
	o2.mu.Unlock()
	o2.start()
	o2.mustPut(part(sharestate.KindPartDelta, "keep", "t", 0, 100, rng(100, 100, arch, 0)))
	o2.close()
	assert.Equal(t, []string{"group keep epoch=1", "  t/0(id-t) spso=102"}, dump(open(t, m).st.Recovered()))
}

// An offline mark written in a snapshot survives restarts, with the state
// that was readable.
func testOfflineSurvives(t *testing.T, m Medium) {
	o := open(t, m)
	o.start()
	o.mustPut(group("g", 0))
	o.mustPut(part(sharestate.KindPartFull, "g", "t", 0, 7, rng(9, 9, avail, 3)))
	off := part(sharestate.KindPartOffline, "g", "t", 0, 0)
	off.Reason = "damaged"
	o.mustPut(off)
	o.close()
	for range 2 {
		o = open(t, m)
		assert.Equal(t, []string{"group g epoch=0", "  t/0(id-t) spso=7 [9-9 AVAILABLE(3)] offline=damaged"}, dump(o.st.Recovered()))
		o.start()
		o.close()
	}
}

// After a crash, everything whose Wait returned nil is recovered.
func testCrash(t *testing.T, m Medium) {
	o := open(t, m)
	o.start()
	o.mustPut(group("g", 2))
	for i := range int64(20) {
		o.mustPut(part(sharestate.KindPartDelta, "g", "t", 0, i, rng(i, i, ack, 0), rng(i+1, i+1, avail, 1)))
	}
	crashed := m.Crash(t)
	assert.Equal(t, []string{"group g epoch=2", "  t/0(id-t) spso=20 [20-20 AVAILABLE(1)]"}, dump(open(t, crashed).st.Recovered()))
}

// A failed write fails its ticket (and only the entries in flight with
// it); once the medium works again, writes succeed without a reopen, and
// what was lost is not recovered.
func testWriteFailure(t *testing.T, m Medium) {
	o := open(t, m)
	o.start()
	t1 := o.mustPut(group("before", 1))
	if !m.SetFailing(true) {
		t.Skip("the implementation cannot inject write failures")
	}
	t2, err := o.put(group("lost", 1))
	require.Error(t, err)
	assert.True(t, o.st.Lost(t2))
	assert.False(t, o.st.Lost(t1), "an earlier entry stays good")
	assert.Positive(t, o.st.Failures())
	t3, err := o.put(group("lost-too", 1))
	require.Error(t, err, "still failing")
	assert.True(t, o.st.Lost(t3))
	m.SetFailing(false)
	t4 := o.mustPut(group("after", 1))
	assert.False(t, o.st.Lost(t4), "failures are not sticky")
	o.mustPut(part(sharestate.KindPartFull, "after", "t", 0, 3))
	o.close()
	assert.Equal(t, []string{"group after epoch=1", "  t/0(id-t) spso=3", "group before epoch=1"}, dump(open(t, m).st.Recovered()))
}

// Concurrent writers each get their entries durable, in their own order.
func testConcurrent(t *testing.T, m Medium) {
	o := open(t, m)
	o.start()
	o.mustPut(group("g", 0))
	var wg sync.WaitGroup
	for p := range int32(8) {
		wg.Go(func() {
			for i := range int64(25) {
				e := part(sharestate.KindPartDelta, "g", "t", p, i, rng(i, i, ack, 0))
				tk, err := o.write(&e)
				if !assert.NoError(t, err) {
					return
				}
				if !assert.NoError(t, o.st.Wait(tk)) {
					return
				}
			}
		})
	}
	wg.Wait()
	o.close()
	want := []string{"group g epoch=0"}
	for p := range 8 {
		want = append(want, fmt.Sprintf("  t/%d(id-t) spso=25", p))
	}
	assert.Equal(t, want, dump(open(t, m).st.Recovered()))
}

func testClosed(t *testing.T, m Medium) {
	o := open(t, m)
	o.start()
	o.close()
	e := group("g", 0)
	_, err := o.st.Write(e)
	assert.True(t, errors.Is(err, sharestate.ErrClosed), "write after close: %v", err)
	assert.NoError(t, o.st.Close(), "closing twice is harmless")
}
