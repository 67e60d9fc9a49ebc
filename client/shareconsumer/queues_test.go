package shareconsumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// orderChecker is the history checker of TestKeyOrderingHistory: per key,
// a record is held from the Poll that returned it until the request that
// carries its acknowledgement is sent (the checker lets go just before:
// only then can the server free the key), and the key's ACCEPTs, in the
// order they were sent, have increasing offsets. Sends of one key are
// ordered by the hold itself: its next record comes only after the
// acknowledgement of the previous one was applied.
type orderChecker struct {
	mu         sync.Mutex
	keyOf      map[recordKey]string
	held       map[tpKey]int64
	sentAccept map[tpKey][]int64 // ACCEPTs sent, in send order
	failed     map[recordKey]bool
	done       map[recordKey]bool // accepted, rejected or archived at the limit
	violations []string
	unknown    int
}

type tpKey struct {
	tp  TopicPartition
	key string
}

func (k *orderChecker) acquired(recs []Record) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range recs {
		rk := recordKey{tp: r.TopicPartition(), offset: r.Offset}
		if string(r.Key) != k.keyOf[rk] {
			k.violations = append(k.violations, fmt.Sprintf("%s offset %d: key %q, produced %q", rk.tp, r.Offset, r.Key, k.keyOf[rk]))
		}
		pk := tpKey{rk.tp, string(r.Key)}
		if h, busy := k.held[pk]; busy {
			k.violations = append(k.violations, fmt.Sprintf("%s key %s: offset %d delivered while %d is held", rk.tp, r.Key, r.Offset, h))
		}
		k.held[pk] = r.Offset
	}
}

// sending lets go of recs, about to be acknowledged with types.
func (k *orderChecker) sending(recs []Record, types []AckType) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, r := range recs {
		pk := tpKey{r.TopicPartition(), string(r.Key)}
		if k.held[pk] == r.Offset {
			delete(k.held, pk)
		}
		if types[i] == Accept {
			k.sentAccept[pk] = append(k.sentAccept[pk], r.Offset)
		}
	}
}

// outcome is Config.OnAcknowledgement: what the server applied.
func (k *orderChecker) outcome(limit int32, counts *sync.Map) func(AckResult) {
	return func(r AckResult) {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, rg := range r.Ranges {
			for off := rg.FirstOffset; off <= rg.LastOffset; off++ {
				rk := recordKey{tp: r.TopicPartition, offset: off}
				switch {
				case errors.Is(r.Err, ErrAckOutcomeUnknown):
					k.unknown++
				case r.Err != nil:
					if rg.Type == Accept {
						k.failed[rk] = true
					}
				case rg.Type == Accept || rg.Type == Reject:
					k.done[rk] = true
				case rg.Type == Release:
					if c, _ := counts.Load(rk); c == limit {
						k.done[rk] = true // released at the limit: archived
					}
				}
			}
		}
	}
}

func (k *orderChecker) doneCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.done)
}

// A key-ordered share group (docs/queues.md) through the real gRPC server
// and this client: eight consumers in explicit mode with random RELEASEs
// and REJECTs, one of them closed midway and replaced; per key no two
// records are ever held at once and the accepted offsets increase.
func TestKeyOrderingHistory(t *testing.T) {
	e := newEnv(t)
	const parts, keys, perPart, limit = 2, 30, 300, 5
	e.createTopic("ordered", parts)
	chk := &orderChecker{keyOf: map[recordKey]string{}, held: map[tpKey]int64{}, sentAccept: map[tpKey][]int64{},
		failed: map[recordKey]bool{}, done: map[recordKey]bool{}}
	rnd := rand.New(rand.NewPCG(3, 4))
	for p := range int32(parts) {
		req := &sharelogv1.ProduceRequest{Topic: "ordered", Partition: proto.Int32(p)}
		for i := range perPart {
			k := fmt.Sprintf("key-%d", rnd.IntN(keys))
			chk.keyOf[recordKey{tp: TopicPartition{Topic: "ordered", Partition: p}, offset: int64(i)}] = k
			req.Records = append(req.Records, &sharelogv1.Record{Key: []byte(k), Value: []byte(fmt.Sprint(i))})
		}
		_, err := e.log.Produce(context.Background(), req)
		require.NoError(t, err)
	}
	ord := sharelogv1.Ordering_ORDERING_KEY
	_, err := e.groups.UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "ordered-workers",
		Config: &sharelogv1.ShareGroupConfig{Ordering: &ord, AutoOffsetReset: proto.String("earliest"), DeliveryCountLimit: proto.Int32(limit),
			SessionTimeoutMs: proto.Int32(2000), HeartbeatIntervalMs: proto.Int32(200)}})
	require.NoError(t, err)

	var counts sync.Map // recordKey -> the delivery count of its last delivery
	total := parts * perPart
	hook := chk.outcome(limit, &counts)
	// run consumes until stop is closed (then closes the consumer, after
	// letting go of nothing: every record it got is acknowledged at once).
	run := func(member string, seed uint64, stop <-chan struct{}) error {
		c, err := New(e.conn, Config{GroupID: "ordered-workers", MemberID: member, Topics: []string{"ordered"}, AckMode: AckExplicit,
			MaxRecords: 1 + int(seed%5), MaxWait: 50 * time.Millisecond, OnAcknowledgement: hook,
			Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}, Logger: testLogger(t)})
		if err != nil {
			return err
		}
		r := rand.New(rand.NewPCG(seed, 9))
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Close(ctx) // sends the last acknowledgements (let go of below)
		}()
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			recs, err := c.Poll(ctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			chk.acquired(recs)
			types := make([]AckType, len(recs))
			for i, rec := range recs {
				counts.Store(recordKey{tp: rec.TopicPartition(), offset: rec.Offset}, rec.DeliveryCount)
				switch v := r.IntN(10); {
				case v >= 9:
					types[i] = Reject
				case v >= 7:
					types[i] = Release
				default:
					types[i] = Accept
				}
			}
			// Let go before the acknowledgements can reach the server:
			// they leave with the next Poll (or Close).
			chk.sending(recs, types)
			for i, rec := range recs {
				if err := c.Acknowledge(rec, types[i]); err != nil {
					return fmt.Errorf("acknowledge %d: %w", rec.Offset, err)
				}
			}
		}
	}

	const consumers = 8
	waitDone := func(want int) {
		t.Helper()
		require.Eventually(t, func() bool { return chk.doneCount() >= want }, 30*time.Second, 10*time.Millisecond,
			"records settled (%d of %d wanted)", chk.doneCount(), want)
	}
	stops := make([]chan struct{}, consumers+1)
	errs := make([]error, consumers+1)
	var wg sync.WaitGroup
	for i := range consumers {
		stops[i] = make(chan struct{})
		wg.Go(func() { errs[i] = run(fmt.Sprintf("c%d", i), uint64(i+1), stops[i]) })
	}
	waitDone(total / 3)
	// Consumer 0 is closed midway (its session ends; what it held goes
	// back) and a new one takes its place.
	close(stops[0])
	stops[consumers] = make(chan struct{})
	wg.Go(func() { errs[consumers] = run("c-replacement", 100, stops[consumers]) })
	waitDone(total)
	for i := 1; i <= consumers; i++ {
		close(stops[i])
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	chk.mu.Lock()
	defer chk.mu.Unlock()
	assert.Empty(t, chk.violations)
	assert.Zero(t, chk.unknown, "acknowledgements with an unknown outcome")
	accepted := 0
	for pk, offs := range chk.sentAccept {
		var applied []int64
		for _, off := range offs {
			if !chk.failed[recordKey{tp: pk.tp, offset: off}] {
				applied = append(applied, off)
			}
		}
		for i := 1; i < len(applied); i++ {
			assert.Less(t, applied[i-1], applied[i], "%s key %s: accepted offsets in send order %v", pk.tp, pk.key, applied)
		}
		accepted += len(applied)
	}
	assert.Len(t, chk.done, total, "every record accepted, rejected or archived")
	t.Logf("%d records settled, %d accepted in per-key order, %d ACCEPTs refused", len(chk.done), accepted, len(chk.failed))
}
