package shareconsumer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/testsupport/keyhistory"
)

// keyOrderingNone runs TestKeyOrderingHistory's group without ordering, to
// see the checker fail: go test -run TestKeyOrderingHistory -keyorder.none.
var keyOrderingNone = flag.Bool("keyorder.none", false, "run the key-ordering history test with ordering=none (it must then fail)")

// A key-ordered share group (docs/queues.md) through the real gRPC server
// and this client: eight consumers in explicit mode with random RELEASEs
// and REJECTs, one of them closed midway and replaced, the server
// restarted (same data dir and address) while they consume, and then one
// consumer crashed (no Close: its records come back when their locks
// expire). The history
// checker (internal/testsupport/keyhistory) proves per key: no two records
// locked at once (a lock of the old server ends when its stop begins),
// the applied ACCEPTs in offset order over the whole run, and every record
// accepted, rejected or archived; the server's start offsets reach the end.
func TestKeyOrderingHistory(t *testing.T) {
	e := newEnv(t)
	// lockMs bounds how long the crashed consumer's records stay locked.
	const parts, keys, perPart, limit, lockMs = 2, 30, 500, 5, 2000
	e.createTopic("ordered", parts)
	produced := map[string]map[int64]string{}
	rnd := rand.New(rand.NewPCG(3, 4))
	for p := range int32(parts) {
		tp := TopicPartition{Topic: "ordered", Partition: p}
		produced[tp.String()] = map[int64]string{}
		req := &sharelogv1.ProduceRequest{Topic: "ordered", Partition: proto.Int32(p)}
		for i := range perPart {
			k := fmt.Sprintf("key-%d", rnd.IntN(keys))
			produced[tp.String()][int64(i)] = k
			req.Records = append(req.Records, &sharelogv1.Record{Key: []byte(k), Value: []byte(fmt.Sprint(i))})
		}
		_, err := e.log.Produce(context.Background(), req)
		require.NoError(t, err)
	}
	ord := sharelogv1.Ordering_ORDERING_KEY
	if *keyOrderingNone {
		ord = sharelogv1.Ordering_ORDERING_NONE
	}
	_, err := e.groups.UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "ordered-workers",
		Config: &sharelogv1.ShareGroupConfig{Ordering: &ord, AutoOffsetReset: proto.String("earliest"), DeliveryCountLimit: proto.Int32(limit),
			RecordLockDurationMs: proto.Int32(lockMs), SessionTimeoutMs: proto.Int32(2000), HeartbeatIntervalMs: proto.Int32(200)}})
	require.NoError(t, err)

	var h keyhistory.History
	var settled, unknown atomic.Int64 // applied ACCEPTs and REJECTs; outcomes unknown
	// run consumes until stop is closed, then closes the consumer (every
	// record it got is acknowledged at once, so Close only sends the last
	// acknowledgements).
	run := func(member string, seed uint64, stop, crash <-chan struct{}) error {
		var mu sync.Mutex
		pending := map[recordKey]int{} // record -> the delivery whose acknowledgement awaits its outcome
		hook := func(r AckResult) {
			o := keyhistory.Applied
			switch {
			case errors.Is(r.Err, ErrAckOutcomeUnknown):
				o = keyhistory.Unknown
			case errors.Is(r.Err, ErrSessionEnded):
				o = keyhistory.Refused // the restart ended the session that held it
			case r.Err != nil:
				o = keyhistory.Lost // refused by the server: the lock expired
			}
			mu.Lock()
			defer mu.Unlock()
			for _, rg := range r.Ranges {
				for off := rg.FirstOffset; off <= rg.LastOffset; off++ {
					rk := recordKey{tp: r.TopicPartition, offset: off}
					if id, ok := pending[rk]; ok {
						h.Outcome(id, o)
						delete(pending, rk)
					}
					switch {
					case o == keyhistory.Unknown:
						unknown.Add(1)
					case o == keyhistory.Applied && rg.Type != Release:
						settled.Add(1)
					}
				}
			}
		}
		c, err := New(e.conn, Config{GroupID: "ordered-workers", MemberID: member, Topics: []string{"ordered"}, AckMode: AckExplicit,
			MaxRecords: 1 + int(seed%5), MaxWait: 50 * time.Millisecond, OnAcknowledgement: hook,
			Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}, Logger: testLogger(t)})
		if err != nil {
			return err
		}
		r := rand.New(rand.NewPCG(seed, 9))
		crashed := false
		defer func() {
			if crashed {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Close(ctx) // sends the last acknowledgements
		}()
		for {
			select {
			case <-stop:
				return nil
			case <-crash:
				// As if the process died: its last acknowledgements are
				// never sent, its records come back when their locks expire.
				c.abandon()
				crashed = true
				return nil
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			recs, err := c.Poll(ctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			ids := make([]int, len(recs))
			for i, rec := range recs {
				ids[i] = h.Got(rec.TopicPartition().String(), string(rec.Key), rec.Offset, int(rec.DeliveryCount))
			}
			if len(recs) > 0 {
				time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond) // the work: holds that last
			}
			for i, rec := range recs {
				typ, a := Accept, keyhistory.Accept
				switch v := r.IntN(10); {
				case v >= 9:
					typ, a = Reject, keyhistory.Reject
				case v >= 7:
					typ, a = Release, keyhistory.Release
				}
				rk := recordKey{tp: rec.TopicPartition(), offset: rec.Offset}
				mu.Lock()
				pending[rk] = ids[i]
				mu.Unlock()
				// Let go before the acknowledgement can reach the server:
				// it leaves with the next Poll (or Close).
				h.Let(ids[i], a)
				if err := c.Acknowledge(rec, typ); err != nil {
					o := keyhistory.Refused // the restart ended the session that held it
					switch {
					case errors.Is(err, ErrLockExpired):
						o = keyhistory.Lost
					case !errors.Is(err, ErrSessionEnded):
						return fmt.Errorf("acknowledge %d: %w", rec.Offset, err)
					}
					mu.Lock()
					delete(pending, rk)
					mu.Unlock()
					h.Outcome(ids[i], o)
				}
			}
		}
	}

	const consumers = 8
	total := parts * perPart
	waitSettled := func(want int) {
		t.Helper()
		require.Eventually(t, func() bool { return settled.Load() >= int64(want) }, 15*time.Second, 5*time.Millisecond,
			"records accepted or rejected (%d of %d wanted)", settled.Load(), want)
	}
	stops, crashes := make([]chan struct{}, consumers+1), make([]chan struct{}, consumers+1)
	errs := make([]error, consumers+1)
	var wg sync.WaitGroup
	for i := range consumers + 1 {
		stops[i], crashes[i] = make(chan struct{}), make(chan struct{})
	}
	for i := range consumers {
		wg.Go(func() { errs[i] = run(fmt.Sprintf("c%d", i), uint64(i+1), stops[i], crashes[i]) })
	}
	waitSettled(total / 4)
	// Consumer 0 is closed (its session ends; what it held goes back) and
	// a new one takes its place.
	close(stops[0])
	wg.Go(func() { errs[consumers] = run("c-replacement", 100, stops[consumers], crashes[consumers]) })
	waitSettled(total / 2)
	// The server restarts under the running consumers.
	h.Stopping()
	began := time.Now()
	e.restart()
	t.Logf("restart at %d of %d records settled: %v from the stop to the new server answering", settled.Load(), total, time.Since(began).Round(time.Millisecond))
	// Consumer 1 crashes: what it holds comes back after the lock duration.
	waitSettled(total * 3 / 4)
	close(crashes[1])
	startOffsets := func() (sum int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := e.groups.DescribeSharePartitionState(ctx, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: "ordered-workers"})
		if err != nil {
			return -1
		}
		for _, tp := range resp.GetTopics() {
			for _, p := range tp.GetPartitions() {
				sum += p.GetStartOffset()
			}
		}
		return sum
	}
	require.Eventually(t, func() bool { return startOffsets() == int64(total) }, 15*time.Second, 20*time.Millisecond,
		"the share-partition start offsets reach the end of the log (%d of %d)", startOffsets(), total)
	for i := 2; i <= consumers; i++ {
		close(stops[i])
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	r := h.Check(produced, limit)
	t.Logf("%d records, %d consumers (one replaced, one crashed), one restart: %v", total, consumers+1, r)
	if len(r.Violations) > 0 {
		t.Errorf("%d violations, first: %q", len(r.Violations), r.Violations[:min(5, len(r.Violations))])
	}
	assert.Zero(t, unknown.Load(), "acknowledgements with an unknown outcome on a graceful restart")
}
