package sharegroup

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// The max_records and max_bytes are strict across the response; the first
// record is taken even if larger; a record that does not fit stops the
// whole response.
func TestFetchBudget(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxBytes   int32
		maxRecords int32
		want0      []AcquiredRange
		want1      []AcquiredRange
	}{
		{"first record larger than max_bytes", 500, 0, []AcquiredRange{rng(0, 0, 1)}, nil},
		{"bytes stop the whole response", 2500, 0, []AcquiredRange{rng(0, 1, 1)}, nil},
		{"records budget spans partitions", 0, 4, []AcquiredRange{rng(0, 2, 1)}, []AcquiredRange{rng(0, 0, 1)}},
		{"everything fits", 0, 0, []AcquiredRange{rng(0, 2, 1)}, []AcquiredRange{rng(0, 9, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.topic("t", 2)
			x, y := tp("t", 0), tp("t", 1)
			e.open("m", x, y)
			e.fetch("m", FetchRequest{}) // k=1 starts at y: make k=2 start at x
			e.produce("t", 0, 3, 1000)
			e.produce("t", 1, 10, 10)
			resp := e.fetch("m", FetchRequest{MaxBytes: opt(tc.maxBytes), MaxRecords: opt(tc.maxRecords)})
			var got0, got1 []AcquiredRange
			if hasPart(resp, x) {
				got0 = acquired(t, resp, x)
			}
			if hasPart(resp, y) {
				got1 = acquired(t, resp, y)
			}
			assert.Equal(t, tc.want0, got0)
			assert.Equal(t, tc.want1, got1)
		})
	}
}

// Record size = key + value + every header key and value.
func TestRecordSize(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	rec := logstore.Record{Key: make([]byte, 100), Value: make([]byte, 100), Headers: []logstore.Header{{Key: string(make([]byte, 50)), Value: make([]byte, 50)}}}
	_, err := e.store.Append(context.Background(), "t", 0, []logstore.Record{rec, rec, rec})
	require.NoError(t, err)
	assert.Equal(t, []AcquiredRange{rng(0, 0, 1)}, acquired(t, e.fetch("m", FetchRequest{MaxBytes: i32(599)}), x))
	assert.Equal(t, []AcquiredRange{rng(1, 2, 1)}, acquired(t, e.fetch("m", FetchRequest{MaxBytes: i32(600)}), x))
}

// max_records 0 or max_bytes 0, given explicitly, acquire nothing and do
// not wait (as Kafka), while the acknowledgements of the request apply;
// unset they take the defaults (500, 1 MiB).
func TestFetchNothing(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	e.produce("t", 0, 3, 10)
	require.Equal(t, []AcquiredRange{rng(0, 0, 1)}, acquired(t, e.fetch("m", FetchRequest{MaxRecords: i32(1)}), x))
	for _, req := range []FetchRequest{
		{MaxRecords: i32(0), MaxWaitMs: 60000, Partitions: []PartitionEntry{ackEntry(x, batch(0, 0, AckAccept))}},
		{MaxBytes: i32(0), MaxWaitMs: 60000},
	} {
		resp := e.fetch("m", req) // answers at once despite max_wait_ms
		for _, p := range resp.Partitions {
			assert.Empty(t, p.Acquired)
			assert.Empty(t, p.Records)
		}
	}
	assert.Equal(t, "spso=1", e.state(x), "the ACCEPT applied")
	assert.Equal(t, []AcquiredRange{rng(1, 2, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x), "unset: the defaults")
}

// Partitions are visited in session order rotated by the fetch count.
func TestRotation(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 3)
	ps := []TopicPartition{tp("t", 0), tp("t", 1), tp("t", 2)}
	e.open("m", ps...) // k = 0
	for i := range 3 {
		e.produce("t", int32(i), 10, 1)
	}
	for k := 1; k <= 6; k++ {
		resp := e.fetch("m", FetchRequest{MaxRecords: i32(1)})
		require.Len(t, resp.Partitions, 1, "fetch %d", k)
		assert.Equal(t, ps[k%3], resp.Partitions[0].TopicPartition, "fetch %d", k)
	}
}

// The record-lock limit: only offsets < SPSO + L are acquired.
func TestRecordLockLimit(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{PartitionMaxRecordLocks: i32(100)})
	e.open("a", x)
	e.open("b", x)
	e.produce("t", 0, 300, 1)
	assert.Equal(t, []AcquiredRange{rng(0, 99, 1)}, acquired(t, e.fetch("a", FetchRequest{}), x))
	assert.False(t, hasPart(e.fetch("b", FetchRequest{}), x))
	e.ack("a", ackEntry(x, batch(0, 9, AckAccept)))
	assert.Equal(t, []AcquiredRange{rng(100, 109, 1)}, acquired(t, e.fetch("b", FetchRequest{}), x))
}

// Lowering the record-lock limit strands nothing: records already in
// flight (in [SPSO, SPEO]) and released stay acquirable, as in Kafka,
// whose limit bounds only what is added after SPEO; new offsets still wait
// for SPSO + L.
func TestRecordLockLimitLowered(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{PartitionMaxRecordLocks: i32(200)})
	e.open("a", x)
	e.open("b", x)
	e.produce("t", 0, 300, 1)
	require.Equal(t, []AcquiredRange{rng(0, 199, 1)}, acquired(t, e.fetch("a", FetchRequest{}), x))
	e.update(GroupConfig{PartitionMaxRecordLocks: i32(100)})
	require.Equal(t, apierr.None, e.ack("a", ackEntry(x, batch(150, 199, AckRelease))).Partitions[0].ErrorCode)
	assert.Equal(t, []AcquiredRange{rng(150, 199, 2)}, acquired(t, e.fetch("b", FetchRequest{}), x))
	assert.False(t, hasPart(e.fetch("b", FetchRequest{}), x), "nothing past SPEO while SPSO + L <= SPEO")
	require.Equal(t, apierr.None, e.ack("a", ackEntry(x, batch(0, 109, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, []AcquiredRange{rng(200, 209, 1)}, acquired(t, e.fetch("b", FetchRequest{}), x), "SPSO 110 + L 100")
}

// RELEASE at the limit archives; an AVAILABLE record over a lowered
// limit is archived by the next scan.
func TestDeliveryLimit(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	e.produce("t", 0, 2, 1)
	for i := int32(1); i <= 3; i++ {
		require.Equal(t, []AcquiredRange{rng(0, 1, i)}, acquired(t, e.fetch("m", FetchRequest{}), x))
		e.ack("m", ackEntry(x, batch(0, 1, AckRelease)))
	}
	assert.Equal(t, "spso=0 [0-1 AVAILABLE(3)]", e.state(x))
	e.update(GroupConfig{DeliveryCountLimit: i32(4)})
	require.Equal(t, []AcquiredRange{rng(0, 1, 4)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	e.ack("m", ackEntry(x, batch(0, 0, AckRelease)))
	assert.Equal(t, "spso=1 [1-1 ACQUIRED(4)]", e.state(x), "RELEASE at the limit archives")
	e.ack("m", ackEntry(x, batch(1, 1, AckRelease)))
	assert.Equal(t, "spso=2", e.state(x))

	e.produce("t", 0, 1, 1)
	require.Equal(t, []AcquiredRange{rng(2, 2, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	e.ack("m", ackEntry(x, batch(2, 2, AckRelease)))
	require.Equal(t, []AcquiredRange{rng(2, 2, 2)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	e.ack("m", ackEntry(x, batch(2, 2, AckRelease)))
	e.update(GroupConfig{DeliveryCountLimit: i32(2)})
	e.produce("t", 0, 1, 1)
	assert.Equal(t, []AcquiredRange{rng(3, 3, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
	assert.Equal(t, "spso=3 [3-3 ACQUIRED(1)]", e.state(x), "2 was archived by the scan")
}

// An offset without a record (compaction) is archived, never returned.
func TestCompactedOffsets(t *testing.T) {
	hs := &hookStore{Store: logstore.NewMem()}
	defer hs.Close()
	e := newEnvOn(t, hs, t.TempDir(), nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	e.produce("t", 0, 12, 1)
	hs.hide(0, 3, 4, 11)
	resp := e.fetch("m", FetchRequest{})
	p := part(t, resp, x)
	assert.Equal(t, []AcquiredRange{rng(1, 2, 1), rng(5, 10, 1)}, p.Acquired)
	require.Len(t, p.Records, 8)
	assert.Equal(t, int64(1), p.Records[0].Offset)
	assert.Equal(t, "spso=1 [1-2 ACQUIRED(1)] [3-4 ARCHIVED(0)] [5-10 ACQUIRED(1)] [11-11 ARCHIVED(0)]", e.state(x))
}

// Long-poll.
func TestLongPoll(t *testing.T) {
	type env2 struct {
		*env
		x TopicPartition
	}
	setup := func(t *testing.T, mut func(*testOpts)) env2 {
		e := newEnv(t, mut)
		e.topic("t", 1)
		x := tp("t", 0)
		e.open("a", x)
		e.open("b", x)
		return env2{e, x}
	}
	// waitFetch runs a fetch of member with max_wait in the background.
	waitFetch := func(e env2, member string, req FetchRequest) <-chan FetchResponse {
		ch := make(chan FetchResponse, 1)
		req.GroupID, req.MemberID, req.Epoch = testGroup, member, e.next(member)
		go func() {
			resp, err := e.m.ShareFetch(context.Background(), req)
			assert.NoError(e.t, err)
			ch <- resp
		}()
		synctest.Wait()
		return ch
	}
	t.Run("times out empty", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			start := time.Now()
			resp := <-waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			assert.Equal(t, 5*time.Second, time.Since(start))
			assert.Empty(t, resp.Partitions)
		})
	})
	t.Run("no long-poll slot free answers at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			slots := &countingSlots{free: 0}
			e := setup(t, func(o *testOpts) { o.LongPolls = slots })
			start := time.Now()
			resp := <-waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			assert.Zero(t, time.Since(start), "answered as if max_wait_ms were 0")
			assert.Empty(t, resp.Partitions)
			assert.Equal(t, 1, slots.tries)
		})
	})
	t.Run("a waiting fetch holds a slot until it answers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			slots := &countingSlots{free: 1}
			e := setup(t, func(o *testOpts) { o.LongPolls = slots })
			ch := waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			assert.Equal(t, 0, slots.freeNow(), "the waiting fetch took the slot")
			<-ch
			assert.Equal(t, 1, slots.freeNow(), "and gave it back")
		})
	})
	t.Run("max_wait 0 never waits", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			start := time.Now()
			e.fetch("a", FetchRequest{})
			assert.Zero(t, time.Since(start))
		})
	})
	t.Run("woken by an append", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			start := time.Now()
			ch := waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			e.produce("t", 0, 3, 1)
			resp := <-ch
			assert.Equal(t, time.Second, time.Since(start))
			assert.Equal(t, []AcquiredRange{rng(0, 2, 1)}, acquired(t, resp, e.x))
		})
	})
	t.Run("min_bytes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			start := time.Now()
			ch := waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000, MinBytes: 250})
			time.Sleep(time.Second)
			e.produce("t", 0, 2, 100)
			synctest.Wait()
			select {
			case <-ch:
				t.Fatal("returned short of min_bytes")
			default:
			}
			time.Sleep(time.Second)
			e.produce("t", 0, 1, 100)
			resp := <-ch
			assert.Equal(t, 2*time.Second, time.Since(start))
			assert.Equal(t, []AcquiredRange{rng(0, 2, 1)}, acquired(t, resp, e.x))
			// Never reached: at the deadline it takes what there is.
			start = time.Now()
			ch = waitFetch(e, "b", FetchRequest{MaxWaitMs: 3000, MinBytes: 1000})
			e.produce("t", 0, 2, 100)
			resp = <-ch
			assert.Equal(t, 3*time.Second, time.Since(start))
			assert.Equal(t, []AcquiredRange{rng(3, 4, 1)}, acquired(t, resp, e.x))
		})
	})
	t.Run("min_bytes capped by max_bytes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			e.produce("t", 0, 2, 100)
			start := time.Now()
			resp := <-waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000, MinBytes: 10000, MaxBytes: i32(150)})
			assert.Zero(t, time.Since(start), "the budget is exhausted")
			assert.Equal(t, []AcquiredRange{rng(0, 0, 1)}, acquired(t, resp, e.x))
		})
	})
	t.Run("woken by a release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			e.produce("t", 0, 3, 1)
			e.fetch("a", FetchRequest{})
			ch := waitFetch(e, "b", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			e.ack("a", ackEntry(e.x, batch(0, 2, AckRelease)))
			assert.Equal(t, []AcquiredRange{rng(0, 2, 2)}, acquired(t, <-ch, e.x))
		})
	})
	t.Run("woken by expiry at the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			e.update(GroupConfig{RecordLockDurationMs: i32(2000)})
			e.produce("t", 0, 3, 1)
			e.fetch("a", FetchRequest{})
			start := time.Now()
			resp := <-waitFetch(e, "b", FetchRequest{MaxWaitMs: 10000})
			assert.Equal(t, 2*time.Second, time.Since(start))
			assert.Equal(t, []AcquiredRange{rng(0, 2, 2)}, acquired(t, resp, e.x))
			assert.Equal(t, int32(2000), resp.AcquisitionLockTimeoutMs)
		})
	})
	t.Run("woken by another session's end", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			e.produce("t", 0, 3, 1)
			e.fetch("a", FetchRequest{})
			ch := waitFetch(e, "b", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			_, err := e.m.ShareAcknowledge(context.Background(), AckRequest{GroupID: testGroup, MemberID: "a", Epoch: -1})
			require.NoError(t, err)
			assert.Equal(t, []AcquiredRange{rng(0, 2, 1)}, acquired(t, <-ch, e.x))
		})
	})
	t.Run("woken by SPSO advance and config change", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			e.update(GroupConfig{PartitionMaxRecordLocks: i32(100)})
			e.produce("t", 0, 300, 1)
			e.fetch("a", FetchRequest{})
			ch := waitFetch(e, "b", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			e.ack("a", ackEntry(e.x, batch(0, 9, AckAccept)))
			assert.Equal(t, []AcquiredRange{rng(100, 109, 1)}, acquired(t, <-ch, e.x))
			ch = waitFetch(e, "b", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			e.update(GroupConfig{PartitionMaxRecordLocks: i32(150)})
			assert.Equal(t, []AcquiredRange{rng(110, 159, 1)}, acquired(t, <-ch, e.x))
		})
	})
	t.Run("woken by a log start move", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			e.update(GroupConfig{PartitionMaxRecordLocks: i32(100)})
			e.produce("t", 0, 300, 1)
			e.fetch("a", FetchRequest{})
			ch := waitFetch(e, "b", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			_, err := e.store.DeleteRecordsBefore(context.Background(), "t", 0, 50)
			require.NoError(t, err)
			assert.Equal(t, []AcquiredRange{rng(100, 149, 1)}, acquired(t, <-ch, e.x))
		})
	})
	t.Run("topic deletion reports the partition", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			info, _, err := e.store.Topic(context.Background(), "t")
			require.NoError(t, err)
			ch := waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			require.NoError(t, e.store.DeleteTopic(context.Background(), "t"))
			e.m.TopicDeleted(info.ID)
			start := time.Now()
			resp := <-ch
			assert.Zero(t, time.Since(start))
			assert.Equal(t, apierr.UnknownTopicOrPartition, part(t, resp, e.x).ErrorCode)
		})
	})
	t.Run("own session ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			ch := waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			e.produce("t", 0, 1, 1)
			synctest.Wait()
			<-ch // took the record
			ch = waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			start := time.Now()
			resp := e.open("a", e.x) // replaced: the old session's record is released to the new one
			assert.Equal(t, []AcquiredRange{rng(0, 0, 1)}, acquired(t, resp, e.x))
			old := <-ch
			assert.Zero(t, time.Since(start))
			for _, p := range old.Partitions {
				assert.Empty(t, p.Acquired)
			}
		})
	})
	t.Run("shutdown", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			ch := waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			require.NoError(t, e.m.Close())
			resp := <-ch
			for _, p := range resp.Partitions {
				assert.Empty(t, p.Acquired)
			}
			_, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "a", Epoch: 2})
			assert.ErrorIs(t, err, ErrClosed)
		})
	})
	t.Run("arrival order", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := setup(t, nil)
			first := waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Millisecond)
			second := waitFetch(e, "b", FetchRequest{MaxWaitMs: 5000})
			time.Sleep(time.Second)
			e.produce("t", 0, 5, 1)
			assert.Equal(t, []AcquiredRange{rng(0, 4, 1)}, acquired(t, <-first, e.x))
			synctest.Wait()
			select {
			case <-second:
				t.Fatal("the second waiter got a response")
			default:
			}
			e.produce("t", 0, 5, 1)
			assert.Equal(t, []AcquiredRange{rng(5, 9, 1)}, acquired(t, <-second, e.x))
		})
	})
	t.Run("a partition error ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			hs := &hookStore{Store: logstore.NewMem()}
			defer hs.Close()
			e := env2{newEnvOn(t, hs, t.TempDir(), nil), tp("t", 0)}
			e.topic("t", 1)
			e.open("a", e.x)
			e.produce("t", 0, 1, 1)
			hs.setReadErr(errors.New("injected I/O error")) // corrupt records are archived instead (unreadable_test.go)
			start := time.Now()
			resp := <-waitFetch(e, "a", FetchRequest{MaxWaitMs: 5000})
			assert.Zero(t, time.Since(start))
			assert.Equal(t, apierr.KafkaStorageError, part(t, resp, e.x).ErrorCode)
		})
	})
}

// Which partitions an incremental response shows.
func TestResponseShaping(t *testing.T) {
	hs := &hookStore{Store: logstore.NewMem()}
	defer hs.Close()
	e := newEnvOn(t, hs, t.TempDir(), nil)
	e.topic("t", 3)
	a, b, c := tp("t", 0), tp("t", 1), tp("t", 2)
	nope, bad := tp("nope", 0), tp("t", 7)

	// Epoch 0: every named partition, errored ones included.
	resp := e.open("m", a, b, nope, bad)
	require.Len(t, resp.Partitions, 4)
	assert.Equal(t, apierr.None, part(t, resp, a).ErrorCode)
	assert.Equal(t, apierr.UnknownTopicOrPartition, part(t, resp, nope).ErrorCode)
	assert.Equal(t, apierr.UnknownTopicOrPartition, part(t, resp, bad).ErrorCode)
	assert.Equal(t, int32(30000), resp.AcquisitionLockTimeoutMs)

	// Nothing to report: empty.
	assert.Empty(t, e.fetch("m", FetchRequest{}).Partitions)
	// Added by this request: shown; unknown ones not added but reported,
	// with their acks.
	resp = e.fetch("m", FetchRequest{Partitions: []PartitionEntry{{TopicPartition: c}, ackEntry(nope, batch(0, 0, AckAccept))}})
	require.Len(t, resp.Partitions, 2)
	assert.Equal(t, apierr.None, part(t, resp, c).ErrorCode)
	assert.Equal(t, apierr.UnknownTopicOrPartition, part(t, resp, nope).ErrorCode)
	assert.Equal(t, apierr.UnknownTopicOrPartition, part(t, resp, nope).AckErrorCode)
	// Records: shown.
	e.produce("t", 1, 2, 1)
	resp = e.fetch("m", FetchRequest{})
	require.Len(t, resp.Partitions, 1)
	assert.Equal(t, []AcquiredRange{rng(0, 1, 1)}, acquired(t, resp, b))
	// Acks: shown with acknowledge_error_code, NONE included.
	resp = e.fetch("m", FetchRequest{Partitions: []PartitionEntry{ackEntry(b, batch(0, 1, AckAccept))}})
	require.Len(t, resp.Partitions, 1)
	assert.Equal(t, apierr.None, part(t, resp, b).AckErrorCode)
	// An error: shown every time; once cleared, shown once with NONE.
	e.produce("t", 2, 1, 1)
	hs.setReadErr(errors.New("disk on fire"))
	for range 2 {
		resp = e.fetch("m", FetchRequest{})
		assert.Equal(t, apierr.KafkaStorageError, part(t, resp, c).ErrorCode)
	}
	hs.setReadErr(nil)
	e.open("n", c) // another session takes c's record
	resp = e.fetch("m", FetchRequest{})
	require.Len(t, resp.Partitions, 1)
	assert.Equal(t, apierr.None, part(t, resp, c).ErrorCode)
	assert.Empty(t, part(t, resp, c).Acquired)
	assert.Empty(t, e.fetch("m", FetchRequest{}).Partitions)

	// A renewing fetch fetches nothing and shows only acknowledged partitions.
	e.produce("t", 0, 2, 1)
	assert.Equal(t, []AcquiredRange{rng(0, 0, 1)}, acquired(t, e.fetch("m", FetchRequest{MaxRecords: i32(1)}), a))
	resp, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: e.next("m"), IsRenewAck: true,
		Partitions: []PartitionEntry{ackEntry(a, batch(0, 0, AckRenew))}})
	require.NoError(t, err)
	require.Len(t, resp.Partitions, 1)
	assert.Equal(t, apierr.None, part(t, resp, a).AckErrorCode)
	assert.Empty(t, part(t, resp, a).Acquired)
	assert.Equal(t, "spso=0 [0-0 ACQUIRED(1)]", e.state(a), "nothing more fetched")
}

// A session partition whose topic was deleted (or re-created) leaves the
// session and is reported once.
func TestDeletedTopicInSession(t *testing.T) {
	for _, how := range []string{"TopicDeleted", "re-created"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, nil)
			info := e.topic("t", 1)
			e.topic("u", 1)
			x, u := tp("t", 0), tp("u", 0)
			e.open("m", x, u)
			e.produce("t", 0, 3, 1)
			e.fetch("m", FetchRequest{})
			ctx := context.Background()
			require.NoError(t, e.store.DeleteTopic(ctx, "t"))
			if how == "TopicDeleted" {
				e.m.TopicDeleted(info.ID)
			} else {
				e.topic("t", 1)
			}
			resp := e.fetch("m", FetchRequest{})
			require.Len(t, resp.Partitions, 1)
			assert.Equal(t, apierr.UnknownTopicOrPartition, part(t, resp, x).ErrorCode)
			assert.Empty(t, e.fetch("m", FetchRequest{}).Partitions, "reported once")
			g := e.m.groupFor(testGroup, false)
			g.mu.Lock()
			_, ok := g.parts[partKey{info.ID, 0}]
			g.mu.Unlock()
			assert.False(t, ok, "share state dropped")
			if how == "re-created" {
				// Named again: a new share-partition, initialised afresh.
				e.produce("t", 0, 2, 1)
				resp = e.fetch("m", FetchRequest{Partitions: entries(x)})
				assert.Equal(t, apierr.None, part(t, resp, x).ErrorCode)
				e.produce("t", 0, 1, 1)
				assert.Equal(t, []AcquiredRange{rng(2, 2, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
			}
		})
	}
}

// A topic re-created and named again in the same request: the new topic
// takes the old one's place in the session, reported once.
func TestRecreatedTopicNamedAgain(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	e.produce("t", 0, 3, 1)
	e.fetch("m", FetchRequest{})
	require.NoError(t, e.store.DeleteTopic(context.Background(), "t"))
	e.topic("t", 1)
	e.produce("t", 0, 2, 1)
	resp := e.fetch("m", FetchRequest{Partitions: entries(x)})
	require.Len(t, resp.Partitions, 1)
	assert.Equal(t, apierr.None, part(t, resp, x).ErrorCode)
	e.produce("t", 0, 1, 1)
	assert.Equal(t, []AcquiredRange{rng(2, 2, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
}

// countingSlots is a LongPolls bound with free slots.
type countingSlots struct {
	mu    sync.Mutex
	free  int
	tries int
}

func (c *countingSlots) TryAcquire(context.Context) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tries++
	if c.free == 0 {
		return false
	}
	c.free--
	return true
}

func (c *countingSlots) Release(context.Context) {
	c.mu.Lock()
	c.free++
	c.mu.Unlock()
}

func (c *countingSlots) freeNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.free
}

// A share-partition created under a topic's old ID after TopicDeleted ran
// for it (a heartbeat or fetch that resolved the name just before the
// delete) must never read the records of a topic re-created under the
// same name: the store is read by name. It reports the topic deleted and
// its state goes.
func TestStaleSharePartitionNeverReadsARecreatedTopic(t *testing.T) {
	e := newEnv(t, nil)
	old := e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	e.produce("t", 0, 3, 1)
	require.Len(t, acquired(t, e.fetch("m", FetchRequest{}), x), 1)
	ctx := context.Background()
	require.NoError(t, e.store.DeleteTopic(ctx, "t"))
	e.m.TopicDeleted(old.ID)
	g := e.m.groupFor(testGroup, false)
	stale := g.partition(old.ID, "t", 0, true) // the race: created after the drop
	require.NotNil(t, stale)
	e.topic("t", 1)
	e.produce("t", 0, 3, 1)

	for _, dry := range []bool{true, false} {
		out := &partFetch{sp: stale}
		bud := budget{records: 10, bytes: 1 << 20, first: true}
		require.NoError(t, stale.acquire(ctx, nil, &bud, dry, out))
		assert.Equal(t, apierr.UnknownTopicOrPartition, out.code, "dry=%v", dry)
		assert.Empty(t, out.records, "dry=%v: no record of the new topic", dry)
		assert.Zero(t, bud.mbytes, "dry=%v: nothing counted", dry)
	}
	g.mu.Lock()
	_, kept := g.parts[partKey{old.ID, 0}]
	g.mu.Unlock()
	assert.False(t, kept, "the stale share-partition is dropped")
}
