package sharegroup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// fill appends n small records to t/0 in chunks.
func fill(t testing.TB, store logstore.Store, n int) {
	t.Helper()
	const chunk = 10000
	recs := make([]logstore.Record, chunk)
	for i := range recs {
		recs[i].Value = []byte("01234567")
	}
	for done := 0; done < n; done += chunk {
		_, err := store.Append(context.Background(), "t", 0, recs[:min(chunk, n-done)])
		require.NoError(t, err)
	}
}

// Exclusive acquisition: 16 members, each with its own session, on one
// partition of 100 000 records, all ACCEPTing: every record is delivered
// exactly once, with delivery count 1.
func TestConcurrentExactlyOnce(t *testing.T) {
	const n, consumers = 100000, 16
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.update(GroupConfig{AutoOffsetReset: str("earliest"), PartitionMaxRecordLocks: i32(10000)})
	fill(t, e.store, n)
	deliveries := make([]atomic.Int32, n)
	var total atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for c := range consumers {
		wg.Go(func() {
			member := fmt.Sprintf("c%02d", c)
			piggyback := c%2 == 0
			var epoch int32
			var acks []AckBatch
			for {
				req := FetchRequest{GroupID: testGroup, MemberID: member, Epoch: epoch, MaxWaitMs: 5}
				if epoch == 0 {
					req.Partitions = entries(x)
				} else if piggyback && len(acks) > 0 {
					req.Partitions = []PartitionEntry{ackEntry(x, acks...)}
					acks = nil
				}
				resp, err := e.m.ShareFetch(ctx, req)
				if !assert.NoError(t, err) {
					return
				}
				epoch++
				if len(acks) > 0 { // separate ShareAcknowledge
					r, err := e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: member, Epoch: epoch, Partitions: []PartitionEntry{ackEntry(x, acks...)}})
					if !assert.NoError(t, err) || !assert.Equal(t, apierr.None, r.Partitions[0].ErrorCode) {
						return
					}
					epoch++
					acks = nil
				}
				for _, p := range resp.Partitions {
					if !assert.Equal(t, apierr.None, p.AckErrorCode) {
						return
					}
					for _, r := range p.Acquired {
						assert.Equal(t, int32(1), r.DeliveryCount)
						for o := r.FirstOffset; o <= r.LastOffset; o++ {
							deliveries[o].Add(1)
						}
						total.Add(r.LastOffset - r.FirstOffset + 1)
						acks = append(acks, batch(r.FirstOffset, r.LastOffset, AckAccept))
					}
				}
				if total.Load() == n {
					_, err := e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: member, Epoch: -1, Partitions: []PartitionEntry{ackEntry(x, acks...)}})
					assert.NoError(t, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for o := range deliveries {
		require.Equal(t, int32(1), deliveries[o].Load(), "offset %d", o)
	}
	assert.Equal(t, "spso=100000", e.state(x))
}

// Under failures: random RELEASE/REJECT/GAP, abandoned locks (sessions
// that stop acknowledging), sessions that restart. A record is never held
// by two members at once (checked at acquisition against the holders map,
// where a holder's lock may have expired), no delivery exceeds the limit,
// and in the end every record is ACKNOWLEDGED or ARCHIVED.
func TestConcurrentChaos(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, consumers, limit = 5000, 16, 3
		const lock = time.Second
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{AutoOffsetReset: str("earliest"), RecordLockDurationMs: i32(int32(lock / time.Millisecond)),
			DeliveryCountLimit: i32(limit), PartitionMaxRecordLocks: i32(1000)})
		fill(t, e.store, n)

		type holder struct {
			member   string
			deadline time.Time
		}
		var mu sync.Mutex
		holders := map[int64]holder{}
		deliveries := make([]int, n)
		var done atomic.Bool
		ctx := context.Background()

		var wg sync.WaitGroup
		for c := range consumers {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(c), 42))
				member := fmt.Sprintf("c%02d", c)
				var epoch int32
				var mine []int64 // offsets this session holds
				forget := func() {
					mu.Lock()
					for _, o := range mine {
						if h, ok := holders[o]; ok && h.member == member {
							delete(holders, o)
						}
					}
					mu.Unlock()
					mine = mine[:0]
				}
				for !done.Load() {
					req := FetchRequest{GroupID: testGroup, MemberID: member, Epoch: epoch, MaxWaitMs: 200, MaxRecords: i32(int32(1 + rnd.IntN(100)))}
					if epoch == 0 {
						forget() // a new session: the old one's records were released
						req.Partitions = entries(x)
					}
					resp, err := e.m.ShareFetch(ctx, req)
					if !assert.NoError(t, err) {
						return
					}
					epoch++
					now := time.Now()
					var got []AcquiredRange
					for _, p := range resp.Partitions {
						got = append(got, p.Acquired...)
					}
					mu.Lock()
					for _, r := range got {
						assert.LessOrEqual(t, r.DeliveryCount, int32(limit))
						for o := r.FirstOffset; o <= r.LastOffset; o++ {
							if h, ok := holders[o]; ok && now.Before(h.deadline) {
								t.Errorf("offset %d acquired by %s while held by %s", o, member, h.member)
							}
							holders[o] = holder{member: member, deadline: now.Add(lock)}
							deliveries[o]++
							mine = append(mine, o)
						}
					}
					mu.Unlock()
					switch p := rnd.IntN(100); {
					case p < 5:
						continue // abandoned: the locks expire
					case p < 8:
						epoch = 0 // the client restarts
						continue
					}
					if len(got) == 0 {
						continue
					}
					var bs []AckBatch
					for _, r := range got {
						types := make([]AckType, r.LastOffset-r.FirstOffset+1)
						for i := range types {
							switch q := rnd.IntN(100); {
							case q < 70:
								types[i] = AckAccept
							case q < 90:
								types[i] = AckRelease
							case q < 97:
								types[i] = AckReject
							default:
								types[i] = AckGap
							}
						}
						bs = append(bs, AckBatch{FirstOffset: r.FirstOffset, LastOffset: r.LastOffset, Types: types})
					}
					forget() // before the ack: released records may be taken at once
					ar, err := e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: member, Epoch: epoch, Partitions: []PartitionEntry{ackEntry(x, bs...)}})
					if !assert.NoError(t, err) {
						return
					}
					epoch++
					assert.Equal(t, apierr.None, ar.Partitions[0].ErrorCode)
				}
				if epoch != 0 {
					_, err := e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: member, Epoch: -1})
					assert.NoError(t, err)
				}
			})
		}
		// The referee: stop once everything is terminal.
		info, _, err := e.store.Topic(ctx, "t")
		require.NoError(t, err)
		for {
			time.Sleep(100 * time.Millisecond)
			if sp := e.m.groupFor(testGroup, false).partition(info.ID, "t", 0, false); sp != nil {
				sp.mu.Lock()
				spso, err := sp.spso, sp.invariants()
				sp.mu.Unlock()
				require.NoError(t, err)
				if spso >= n {
					break
				}
			}
		}
		done.Store(true)
		wg.Wait()
		assert.Equal(t, fmt.Sprintf("spso=%d", n), e.state(x))
		redelivered := 0
		for o, d := range deliveries {
			require.GreaterOrEqual(t, d, 1, "offset %d never delivered", o)
			if d > 1 {
				redelivered++
			}
		}
		t.Logf("%d records, %d redelivered at least once", n, redelivered)
	})
}
