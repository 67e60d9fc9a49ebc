package shareconsumer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// consumeLoop polls and accepts (explicit mode) until stop returns true or
// ctx ends, calling got with each record as it arrives.
func consumeLoop(ctx context.Context, c *Consumer, stop func() bool, got func(Record)) error {
	for !stop() {
		recs, err := c.Poll(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			got(r)
			if err := c.Acknowledge(r, Accept); err != nil {
				return err
			}
		}
	}
	// Send the last acknowledgements before returning.
	_, err := c.Commit(ctx)
	return err
}

// Consumers keep consuming while the server restarts: they reopen their
// share sessions (and rejoin the group), the acknowledgements lost with the
// old sessions only cause redeliveries, and in the end every record was
// accepted successfully exactly once.
func TestConsumersSurviveServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const parts, before, after = 3, 200, 100 // records per partition before and after the restart
	e.createTopic("t", parts)
	for p := range int32(parts) {
		e.produce("t", p, 0, before)
	}
	e.configureGroup("g", 5*time.Second)
	acks := newAckLog()
	total := parts * (before + after)
	done := func() bool { return acks.acceptedCount() >= total }

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	var received atomic.Int64
	for range 3 {
		c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 10, OnAcknowledgement: acks.hook})
		wg.Go(func() {
			for !done() {
				recs, err := c.Poll(ctx)
				if err != nil {
					errs <- err
					return
				}
				for _, r := range recs {
					received.Add(1)
					if err := c.Acknowledge(r, Accept); err != nil && err != ErrSessionEnded {
						errs <- err
						return
					}
				}
				time.Sleep(time.Millisecond) // let the restart land mid-stream
			}
			_, err := c.Commit(ctx)
			errs <- err
		})
	}

	require.Eventually(t, func() bool { return acks.acceptedCount() >= total/4 }, 20*time.Second, time.Millisecond)
	e.restart()
	for p := range int32(parts) {
		e.produce("t", p, before, after)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	want := map[TopicPartition]int{}
	for p := range int32(parts) {
		want[TopicPartition{Topic: "t", Partition: p}] = before + after
	}
	acks.requireAllAcceptedOnce(t, want)
	acks.mu.Lock()
	require.Zero(t, acks.unknown, "no acknowledgement with an unknown outcome on a graceful restart")
	t.Logf("%d deliveries for %d records; %d acknowledgement results failed (session ended or lock lost)", received.Load(), total, len(acks.failed))
	acks.mu.Unlock()
}

// A consumer that dies holding records (no Close: no final epoch, no leave)
// has them delivered to the others once their locks expire.
func TestDeadConsumersRecordsAreRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 30
	lock := 300 * time.Millisecond
	e.createTopic("t", 1)
	e.produce("t", 0, 0, n)
	e.configureGroup("g", lock)
	acks := newAckLog()

	dead := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 10})
	held := pollN(t, dead, 10)
	acquired := time.Now()
	require.Equal(t, seq(0, 9), offsets(held))
	dead.abandon()

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	type delivery struct {
		rec Record
		at  time.Time
	}
	var mu sync.Mutex
	var got []delivery
	var wg sync.WaitGroup
	for range 2 {
		c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 5, OnAcknowledgement: acks.hook})
		wg.Go(func() {
			err := consumeLoop(ctx, c, func() bool { return acks.acceptedCount() >= n }, func(r Record) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, delivery{rec: r, at: time.Now()})
			})
			assert.NoError(t, err) // not require: this is not the test's goroutine
		})
	}
	wg.Wait()
	acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: n})
	redelivered := 0
	for _, d := range got {
		if d.rec.Offset < 10 {
			redelivered++
			require.EqualValues(t, 2, d.rec.DeliveryCount, "offset %d: second delivery", d.rec.Offset)
			require.GreaterOrEqual(t, d.at.Sub(acquired), lock-50*time.Millisecond, "offset %d came back before its lock expired", d.rec.Offset)
		} else {
			require.EqualValues(t, 1, d.rec.DeliveryCount)
		}
	}
	require.Equal(t, 10, redelivered)
}

// Three consumers of one group share a topic: each record is delivered to
// exactly one of them, and their counts add up.
func TestThreeConsumersShareATopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const parts, per = 3, 200
	e.createTopic("t", parts)
	for p := range int32(parts) {
		e.produce("t", p, 0, per)
	}
	e.configureGroup("g", 10*time.Second)
	total := parts * per

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var accepted atomic.Int64
	all := newAckLog()
	counts := make([]atomic.Int64, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		c := newConsumer(t, e.conn, Config{
			GroupID: "g", Topics: []string{"t"}, MaxRecords: 25, // implicit acknowledgement
			OnAcknowledgement: func(r AckResult) {
				all.hook(r)
				if r.Err == nil {
					counts[i].Add(r.Count(Accept))
					accepted.Add(r.Count(Accept))
				}
			},
		})
		wg.Go(func() {
			for accepted.Load() < int64(total) {
				if _, err := c.Poll(ctx); err != nil {
					assert.NoError(t, err) // not require: this is not the test's goroutine
					return
				}
			}
			assert.NoError(t, c.Close(ctx))
		})
	}
	wg.Wait()
	var sum int64
	for i := range counts {
		t.Logf("consumer %d accepted %d records", i+1, counts[i].Load())
		sum += counts[i].Load()
	}
	require.EqualValues(t, total, sum)
	want := map[TopicPartition]int{}
	for p := range int32(parts) {
		want[TopicPartition{Topic: "t", Partition: p}] = per
	}
	all.requireAllAcceptedOnce(t, want)
}
