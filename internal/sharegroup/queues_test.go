package sharegroup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Key ordering, redelivery backoff and delayed delivery (docs/queues.md).

// produceKeyed appends one record per key (nil = keyless) and returns the
// first offset.
func (e *env) produceKeyed(topic string, part int32, keys ...string) int64 {
	e.t.Helper()
	recs := make([]logstore.Record, len(keys))
	for i, k := range keys {
		if k != "" {
			recs[i].Key = []byte(k)
		}
		recs[i].Value = []byte(fmt.Sprintf("v%d", i))
	}
	base, err := e.store.Append(context.Background(), topic, part, recs)
	require.NoError(e.t, err)
	return base
}

// join opens member's session on parts (epoch 0) acquiring nothing.
func (e *env) join(member string, parts ...TopicPartition) {
	e.t.Helper()
	_, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: member, Epoch: 0, MaxRecords: i32(0), Partitions: entries(parts...)})
	require.NoError(e.t, err)
	e.setEpoch(member, 1)
}

// got returns the acquired ranges of x, none when the response has no
// entry for it (nothing acquired).
func got(resp FetchResponse, x TopicPartition) []AcquiredRange {
	for _, p := range resp.Partitions {
		if p.TopicPartition == x {
			return p.Acquired
		}
	}
	return nil
}

func offsetsOf(rs []AcquiredRange) []int64 {
	var out []int64
	for _, r := range rs {
		for o := r.FirstOffset; o <= r.LastOffset; o++ {
			out = append(out, o)
		}
	}
	return out
}

// One record per key in flight, in offset order; keys in parallel;
// keyless records unordered.
func TestKeyOrdering(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{Ordering: str(OrderingKey), AutoOffsetReset: str("earliest")})
	//               0    1    2    3    4   5    6    7
	e.produceKeyed("t", 0, "a", "b", "a", "c", "", "b", "a", "")
	e.join("m1", x)
	e.join("m2", x)
	assert.Equal(t, []int64{0, 1, 3, 4, 7}, offsetsOf(got(e.fetch("m1", FetchRequest{}), x)), "the heads of a, b, c and the keyless records")
	assert.Empty(t, got(e.fetch("m2", FetchRequest{}), x), "every key is busy")

	// ACCEPT a's head: the next a goes, to any member.
	require.Equal(t, apierr.None, e.ack("m1", ackEntry(x, batch(0, 0, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, []int64{2}, offsetsOf(got(e.fetch("m2", FetchRequest{}), x)))

	// RELEASE b's head: it comes back before the later b.
	require.Equal(t, apierr.None, e.ack("m1", ackEntry(x, batch(1, 1, AckRelease))).Partitions[0].ErrorCode)
	assert.Equal(t, []AcquiredRange{rng(1, 1, 2)}, got(e.fetch("m2", FetchRequest{}), x))
	assert.Empty(t, got(e.fetch("m1", FetchRequest{}), x))

	// REJECT it: 5 becomes b's head.
	require.Equal(t, apierr.None, e.ack("m2", ackEntry(x, batch(1, 1, AckReject))).Partitions[0].ErrorCode)
	assert.Equal(t, []int64{5}, offsetsOf(got(e.fetch("m1", FetchRequest{}), x)))

	// m2's session ends holding 2 (a): it is a's head again, 6 still waits.
	_, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "m2", Epoch: -1})
	require.NoError(t, err)
	assert.Equal(t, []AcquiredRange{rng(2, 2, 1)}, got(e.fetch("m1", FetchRequest{}), x), "not charged: the session ended")
	require.Equal(t, apierr.None, e.ack("m1", ackEntry(x, batch(2, 2, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, []int64{6}, offsetsOf(got(e.fetch("m1", FetchRequest{}), x)))
}

// A record archived by the delivery-count limit frees its key.
func TestKeyOrderingArchiveFreesKey(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{Ordering: str(OrderingKey), AutoOffsetReset: str("earliest"), DeliveryCountLimit: i32(2)})
	e.produceKeyed("t", 0, "a", "a")
	e.join("m", x)
	for range 2 {
		assert.Equal(t, []int64{0}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)))
		require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckRelease))).Partitions[0].ErrorCode)
	}
	assert.Equal(t, []int64{1}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)), "0 archived at the limit")
}

// In an ORDERING_KEY group the record-lock limit counts only acquired
// records: a held record at SPSO does not stop new offsets past SPSO + L
// once the records after it are acknowledged. The window still ends
// (waitingFactor+1) x L offsets past SPSO.
func TestKeyOrderingLimitCountsAcquired(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	const L = 100
	e.update(GroupConfig{Ordering: str(OrderingKey), AutoOffsetReset: str("earliest"), PartitionMaxRecordLocks: i32(L)})
	keys := make([]string, (waitingFactor+2)*L)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	e.produceKeyed("t", 0, keys...)
	e.join("m", x)
	assert.Equal(t, []AcquiredRange{rng(0, L-1, 1)}, got(e.fetch("m", FetchRequest{}), x), "L acquired")
	// Keep 0 held (the SPSO stays 0) and ACCEPT everything else as it comes.
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(1, L-1, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, []AcquiredRange{rng(L, 2*L-2, 1)}, got(e.fetch("m", FetchRequest{}), x), "L-1 more: 0 is still acquired")
	first, last := int64(L), int64(2*L-2)
	for {
		require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(first, last, AckAccept))).Partitions[0].ErrorCode)
		rs := got(e.fetch("m", FetchRequest{}), x)
		if len(rs) == 0 {
			break
		}
		require.Len(t, rs, 1)
		require.Equal(t, last+1, rs[0].FirstOffset)
		require.LessOrEqual(t, rs[0].LastOffset-rs[0].FirstOffset, int64(L-2), "L-1 at a time at most")
		first, last = rs[0].FirstOffset, rs[0].LastOffset
	}
	assert.Equal(t, int64((waitingFactor+1)*L-1), last, "the window ends (waitingFactor+1) x L past the SPSO")
	// ACCEPT 0: the SPSO moves and the rest comes.
	require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, []AcquiredRange{rng(last+1, last+L, 1)}, got(e.fetch("m", FetchRequest{}), x))
}

// A waiting record becomes acquirable on every path that makes its key's
// head terminal, at the next fetch: an acknowledgement names the key, the
// others (lock expiry at the limit, a log start move) make the scan wake
// every waiting key.
func TestKeyOrderingWakePaths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{Ordering: str(OrderingKey), AutoOffsetReset: str("earliest"), DeliveryCountLimit: i32(2), RecordLockDurationMs: i32(1000)})
		//               0    1    2    3    4    5
		e.produceKeyed("t", 0, "a", "a", "a", "b", "b", "c")
		e.join("m", x)
		assert.Equal(t, []int64{0, 3, 5}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)))
		assert.Empty(t, got(e.fetch("m", FetchRequest{}), x), "1, 2 and 4 wait")

		// ACCEPT: c's head is named; a and b still wait.
		require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(5, 5, AckAccept))).Partitions[0].ErrorCode)
		assert.Empty(t, got(e.fetch("m", FetchRequest{}), x))

		// A purge past a's head and its next: 2 is a's head.
		_, err := e.store.DeleteRecordsBefore(context.Background(), "t", 0, 2)
		require.NoError(t, err)
		assert.Equal(t, []int64{2}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)), "after the log start move")

		// The locks of 2 and 3 expire twice: the second time to ARCHIVED
		// (the limit is 2), and 4 goes.
		time.Sleep(1100 * time.Millisecond)
		assert.Equal(t, []AcquiredRange{rng(2, 3, 2)}, got(e.fetch("m", FetchRequest{}), x), "expired, AVAILABLE: still the heads")
		time.Sleep(1100 * time.Millisecond)
		assert.Equal(t, []int64{4}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)), "after expiry to ARCHIVED")
	})
}

// The waiting records do not count toward the record-lock limit, and the
// index is rebuilt from the window after a restart (acquired records are
// AVAILABLE again, the first of each key its head).
func TestKeyOrderingWindowAndRestart(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	dir := t.TempDir()
	e := newEnvOn(t, store, dir, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{Ordering: str(OrderingKey), AutoOffsetReset: str("earliest"), PartitionMaxRecordLocks: i32(100)})
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = "busy"
	}
	keys = append(keys, "free")
	e.produceKeyed("t", 0, keys...)
	e.join("m", x)
	assert.Equal(t, []int64{0, 300}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)), "299 waiting records are looked past")

	require.NoError(t, e.m.Close())
	e2 := newEnvOn(t, store, dir, nil)
	e2.join("m", x)
	assert.Equal(t, []int64{0, 300}, offsetsOf(got(e2.fetch("m", FetchRequest{}), x)), "after the restart: the same heads")
	require.Equal(t, apierr.None, e2.ack("m", ackEntry(x, batch(0, 0, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, []int64{1}, offsetsOf(got(e2.fetch("m", FetchRequest{}), x)))
}

// Turning ordering on with records in flight: those keep their locks and
// the later records of their keys wait for them.
func TestKeyOrderingTurnedOn(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.produceKeyed("t", 0, "a", "b")
	e.join("m", x)
	assert.Equal(t, []int64{0, 1}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)))
	e.update(GroupConfig{Ordering: str(OrderingKey)})
	e.produceKeyed("t", 0, "a", "c")
	assert.Equal(t, []int64{3}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)), "2 waits for 0")
	e.update(GroupConfig{Ordering: str(OrderingNone)})
	assert.Equal(t, []int64{2}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)), "ordering off: nothing waits")
}

// The backoff schedule: min(initial x multiplier^(n-1), max) after every
// release path, and waiting fetches are woken when it passes.
func TestRedeliveryBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{AutoOffsetReset: str("earliest"), DeliveryCountLimit: i32(10), RecordLockDurationMs: i32(5000),
			RedeliveryBackoffInitialMs: i32(100), RedeliveryBackoffMultiplier: f64(3), RedeliveryBackoffMaxMs: i32(500)})
		e.produce("t", 0, 1, 1)
		e.join("m", x)
		require.Equal(t, []AcquiredRange{rng(0, 0, 1)}, got(e.fetch("m", FetchRequest{}), x))
		for n, want := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond} {
			start := time.Now()
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckRelease))).Partitions[0].ErrorCode)
			assert.Empty(t, got(e.fetch("m", FetchRequest{}), x), "in its backoff")
			// A fetch that waits is answered when the backoff passes.
			r := e.fetch("m", FetchRequest{MaxWaitMs: 5000})
			assert.Equal(t, []AcquiredRange{rng(0, 0, int32(n+2))}, got(r, x))
			assert.Equal(t, want, time.Since(start), "release %d", n+1)
		}
		// Lock expiry: the backoff counts from the expiry.
		start := time.Now()
		r := e.fetch("m", FetchRequest{MaxWaitMs: 10000})
		assert.Equal(t, []AcquiredRange{rng(0, 0, 5)}, got(r, x))
		assert.Equal(t, 5500*time.Millisecond, time.Since(start), "5 s lock, then 500 ms")
		// The session's end: count 5-1 = 4, backoff min(100 x 3^3, 500).
		_, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: -1})
		require.NoError(t, err)
		start = time.Now()
		e.join("o", x)
		r = e.fetch("o", FetchRequest{MaxWaitMs: 10000})
		assert.Equal(t, []AcquiredRange{rng(0, 0, 5)}, got(r, x))
		assert.Equal(t, 500*time.Millisecond, time.Since(start))
	})
}

// After a restart the backoff starts again from the recovery.
func TestRedeliveryBackoffRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := logstore.NewMem()
		defer store.Close()
		dir := t.TempDir()
		e := newEnvOn(t, store, dir, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{AutoOffsetReset: str("earliest"), RedeliveryBackoffInitialMs: i32(1000)})
		e.produce("t", 0, 2, 1)
		e.join("m", x)
		require.Equal(t, []AcquiredRange{rng(0, 1, 1)}, got(e.fetch("m", FetchRequest{}), x))
		require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckRelease), batch(1, 1, AckAccept))).Partitions[0].ErrorCode)
		time.Sleep(600 * time.Millisecond)
		require.NoError(t, e.m.Close())
		e2 := newEnvOn(t, store, dir, nil)
		start := time.Now()
		e2.join("m", x)
		r := e2.fetch("m", FetchRequest{MaxWaitMs: 5000})
		assert.Equal(t, []AcquiredRange{rng(0, 0, 2)}, got(r, x))
		assert.Equal(t, time.Second, time.Since(start))
		require.NoError(t, e2.m.Close())
	})
}

// A record with sharelog-deliver-at is acquired by no group before then;
// later records are not held back; a malformed value is delivered at
// once and counted.
func TestDelayedDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{AutoOffsetReset: str("earliest")})
		at := time.Now().Add(1500 * time.Millisecond).UnixMilli()
		_, err := e.store.Append(context.Background(), "t", 0, []logstore.Record{
			{Value: []byte("later"), Headers: []logstore.Header{{Key: deliverAtHeader, Value: []byte(strconv.FormatInt(at, 10))}}},
			{Value: []byte("now")},
			{Value: []byte("bad"), Headers: []logstore.Header{{Key: deliverAtHeader, Value: []byte("tomorrow")}}},
			{Value: []byte("past"), Headers: []logstore.Header{{Key: deliverAtHeader, Value: []byte("1")}}},
		})
		require.NoError(t, err)
		e.join("m", x)
		start := time.Now()
		assert.Equal(t, []int64{1, 2, 3}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)))
		assert.Equal(t, uint64(1), e.m.Stats().BadDeliverAt)
		r := e.fetch("m", FetchRequest{MaxWaitMs: 5000})
		assert.Equal(t, []AcquiredRange{rng(0, 0, 1)}, got(r, x))
		assert.Equal(t, 1500*time.Millisecond, time.Since(start))
	})
}

// With ORDERING_KEY a delayed record holds its key: the later records of
// the key wait for it, other keys do not.
func TestDelayedDeliveryHoldsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{AutoOffsetReset: str("earliest"), Ordering: str(OrderingKey)})
		at := time.Now().Add(time.Second).UnixMilli()
		_, err := e.store.Append(context.Background(), "t", 0, []logstore.Record{
			{Key: []byte("a"), Headers: []logstore.Header{{Key: deliverAtHeader, Value: []byte(strconv.FormatInt(at, 10))}}},
			{Key: []byte("a")},
			{Key: []byte("b")},
		})
		require.NoError(t, err)
		e.join("m", x)
		assert.Equal(t, []int64{2}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)))
		r := e.fetch("m", FetchRequest{MaxWaitMs: 5000})
		assert.Equal(t, []int64{0}, offsetsOf(got(r, x)))
		require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 0, AckAccept))).Partitions[0].ErrorCode)
		assert.Equal(t, []int64{1}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)))
	})
}

// The history checker: many consumers on several share-partitions with
// random ACCEPT, RELEASE and REJECT, sessions that end (a consumer's
// crash) and a restart of the manager. For every key the ACCEPTed offsets
// increase and no two records of a key are ever locked at once.
func TestKeyOrderingHistory(t *testing.T) {
	store := logstore.NewMem()
	t.Cleanup(func() { store.Close() })
	dir := t.TempDir()
	e := newEnvOn(t, store, dir, nil)
	const parts, keys, perPart = 3, 40, 600
	e.topic("t", parts)
	e.update(GroupConfig{Ordering: str(OrderingKey), AutoOffsetReset: str("earliest"), DeliveryCountLimit: i32(4),
		PartitionMaxRecordLocks: i32(100)})
	keyAt := map[TopicPartition]map[int64]string{}
	rnd := rand.New(rand.NewPCG(1, 2))
	for p := range int32(parts) {
		ks := make([]string, perPart)
		for i := range ks {
			ks[i] = fmt.Sprintf("k%d", rnd.IntN(keys))
		}
		e.produceKeyed("t", p, ks...)
		keyAt[tp("t", p)] = map[int64]string{}
		for i, k := range ks {
			keyAt[tp("t", p)][int64(i)] = k
		}
	}

	// The checker's view: who holds each key's record, what was accepted.
	var mu sync.Mutex
	type pk struct {
		x   TopicPartition
		key string
	}
	held := map[pk]int64{}     // key -> the offset locked now
	accepted := map[pk]int64{} // key -> last accepted offset
	done := map[TopicPartition]map[int64]bool{}
	for x := range keyAt {
		done[x] = map[int64]bool{}
	}
	var violations []string
	total := parts * perPart

	run := func(m *Manager, member string, seed uint64, stop <-chan struct{}) {
		r := rand.New(rand.NewPCG(seed, 7))
		epoch := int32(0)
		var all []PartitionEntry
		for p := range int32(parts) {
			all = append(all, PartitionEntry{TopicPartition: tp("t", p)})
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			req := FetchRequest{GroupID: testGroup, MemberID: member, Epoch: epoch, MaxRecords: i32(int32(1 + r.IntN(5))), MaxWaitMs: 20}
			if epoch == 0 {
				req.Partitions = all
			}
			resp, err := m.ShareFetch(context.Background(), req)
			if err != nil {
				return // closed (the restart)
			}
			epoch++
			mu.Lock()
			type taken struct {
				k   pk
				off int64
				t   AckType
			}
			var got []taken
			for _, pr := range resp.Partitions {
				for _, off := range offsetsOf(pr.Acquired) {
					k := pk{pr.TopicPartition, keyAt[pr.TopicPartition][off]}
					if o, busy := held[k]; busy {
						violations = append(violations, fmt.Sprintf("%v key %s: %d acquired while %d is locked", k.x, k.key, off, o))
					}
					held[k] = off
					t := AckAccept
					if v := r.IntN(10); v >= 9 {
						t = AckReject
					} else if v >= 7 {
						t = AckRelease
					}
					got = append(got, taken{k, off, t})
				}
			}
			// The checker lets go before the server does (under mu, which
			// every consumer takes to record what it acquired): nobody can
			// acquire a key's next record before this call is answered.
			for _, g := range got {
				delete(held, g.k)
			}
			if r.IntN(20) == 0 { // a crash: the session ends with its records
				mu.Unlock()
				_, _ = m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: member, Epoch: -1})
				epoch = 0
				continue
			}
			if len(got) == 0 {
				mu.Unlock()
				continue
			}
			var acks []PartitionEntry // one entry per partition
			at := map[TopicPartition]int{}
			for _, g := range got {
				i, ok := at[g.k.x]
				if !ok {
					i = len(acks)
					at[g.k.x] = i
					acks = append(acks, PartitionEntry{TopicPartition: g.k.x})
				}
				acks[i].Batches = append(acks[i].Batches, batch(g.off, g.off, g.t))
			}
			ar, err := m.ShareAcknowledge(context.Background(), AckRequest{GroupID: testGroup, MemberID: member, Epoch: epoch, Partitions: acks})
			if err != nil {
				mu.Unlock()
				return
			}
			epoch++
			ok := map[TopicPartition]bool{}
			for _, pr := range ar.Partitions {
				ok[pr.TopicPartition] = pr.ErrorCode == apierr.None
			}
			for _, g := range got {
				if !ok[g.k.x] {
					continue
				}
				switch g.t {
				case AckAccept:
					if last, ok := accepted[g.k]; ok && g.off <= last {
						violations = append(violations, fmt.Sprintf("%v key %s: accepted %d after %d", g.k.x, g.k.key, g.off, last))
					}
					accepted[g.k] = g.off
					done[g.k.x][g.off] = true
				case AckReject:
					done[g.k.x][g.off] = true
				}
			}
			mu.Unlock()
		}
	}
	_ = total
	consumed := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, d := range done {
			n += len(d)
		}
		return n
	}
	// Round 0 runs until a third is consumed, then the manager closes
	// (a restart: the consumers see errors and stop, their locks were
	// never durable); round 1 runs on the reopened manager until 90% is
	// consumed (the rest may be archived by the delivery-count limit).
	m := e.m
	for round := range 2 {
		if round == 1 {
			m = newEnvOn(t, store, dir, nil).m
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() { run(m, fmt.Sprintf("c%d-%d", round, c), uint64(round*100+c), stop) })
		}
		want := total / 3
		if round == 1 {
			want = total * 9 / 10
		}
		for deadline := time.Now().Add(30 * time.Second); consumed() < want && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if round == 0 {
			require.NoError(t, m.Close())
		}
		close(stop)
		wg.Wait()
		mu.Lock()
		clear(held) // the sessions are gone with the manager or the test
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, violations)
	n := 0
	for _, d := range done {
		n += len(d)
	}
	assert.GreaterOrEqual(t, n, total*9/10, "consumed")
	t.Logf("%d of %d records accepted or rejected in order", n, total)
}

// DescribePartitionState shows the records waiting on a busy key and when
// backed-off records become acquirable.
func TestQueueStateShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{Ordering: str(OrderingKey), AutoOffsetReset: str("earliest"), RedeliveryBackoffInitialMs: i32(2000)})
		e.produceKeyed("t", 0, "a", "a", "b", "a")
		e.join("m", x)
		assert.Equal(t, []int64{0, 2}, offsetsOf(got(e.fetch("m", FetchRequest{}), x)))
		require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(2, 2, AckRelease))).Partitions[0].ErrorCode)
		st, err := e.m.DescribePartitionState(context.Background(), testGroup, []TopicPartitions{{Topic: "t"}}, 0)
		require.NoError(t, err)
		ps := st[0].Partitions[0]
		assert.Equal(t, int64(2), ps.KeyWaiting, "1 and 3 wait for 0")
		assert.Equal(t, int64(1), ps.OldestKeyWaiting)
		var avail time.Time
		for _, r := range ps.Ranges {
			if r.FirstOffset == 2 {
				avail = r.AvailableAt
			}
		}
		assert.Equal(t, time.Now().Add(2*time.Second), avail, "b's released record: after its backoff")
	})
}
