package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharelog/sharelog/bench/internal/stats"
	"github.com/sharelog/sharelog/bench/internal/verify"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// consumeResult is what a consumer scenario achieved.
type consumeResult struct {
	consumed    int64
	elapsed     time.Duration
	perConsumer []int64
	fetchLat    stats.Latencies
}

func (r *consumeResult) rate() float64 { return float64(r.consumed) / r.elapsed.Seconds() }

func (r *consumeResult) spread() string {
	if len(r.perConsumer) < 2 {
		return ""
	}
	s := slices.Clone(r.perConsumer)
	slices.Sort(s)
	return fmt.Sprintf("; per-consumer records min %d / max %d", s[0], s[len(s)-1])
}

// c1Ours: `consumers` sessions of one group loop ShareFetch (max 500) then
// ShareAcknowledge ACCEPT of the acquired ranges, until all n records of
// partition 0 were consumed. Every offset must be delivered exactly once
// with delivery count 1.
func c1Ours(ctx context.Context, addr, topic, group string, consumers int, n int64, maxDur time.Duration) (*consumeResult, error) {
	clients, closeAll, err := dialN(addr, consumers)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	locks := int32(max(100, 500*consumers))
	if err := configureGroup(ctx, clients[0], group, &sharelogv1.ShareGroupConfig{
		AutoOffsetReset: ptr("earliest"), PartitionMaxRecordLocks: &locks}); err != nil {
		return nil, err
	}
	tr := verify.NewTracker(0, n)
	var total, redelivered atomic.Int64
	per := make([]int64, consumers)
	errs := make([]error, consumers)
	lats := make([]stats.Latencies, consumers)
	deadline := time.Now().Add(maxDur)
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range consumers {
		wg.Go(func() {
			s := &shareSession{c: clients[w], group: group, member: fmt.Sprintf("%s-m%d", group, w), topic: topic, partitions: []int32{0}}
			defer s.close(ctx)
			for total.Load() < n {
				if time.Now().After(deadline) {
					errs[w] = fmt.Errorf("consumed %d of %d records within %v", total.Load(), n, maxDur)
					return
				}
				t := time.Now()
				acq, err := s.fetch(ctx, 500, 50, nil)
				if err != nil {
					errs[w] = err
					return
				}
				lats[w].Add(time.Since(t))
				if len(acq) == 0 {
					continue
				}
				var got int64
				for _, a := range acq {
					if a.deliveryCnt != 1 {
						redelivered.Add(a.n())
					}
					for off := a.first; off <= a.last; off++ {
						tr.Deliver(off)
					}
					got += a.n()
				}
				if err := s.ack(ctx, acceptAll(acq)); err != nil {
					errs[w] = err
					return
				}
				per[w] += got
				total.Add(got)
			}
		})
	}
	wg.Wait()
	res := &consumeResult{consumed: total.Load(), elapsed: time.Since(t0), perConsumer: per}
	for i := range lats {
		res.fetchLat.Merge(&lats[i])
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := tr.Result().ExactlyOnce(); err != nil {
		return nil, err
	}
	if r := redelivered.Load(); r > 0 {
		return nil, fmt.Errorf("%d records delivered with delivery_count > 1 (duplicate deliveries)", r)
	}
	return res, nil
}

// c1Peer: a durable JetStream pull consumer with explicit acks, MaxAckPending
// 500 × consumers; each client Consume()s with 500-message pulls and Ack()s
// every message. Every sequence must be delivered exactly once.
func c1Peer(ctx context.Context, url, stream, name string, consumers int, n int64, maxDur time.Duration) (*consumeResult, error) {
	nc, js, err := natsConnect(url, "c1-admin")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name,
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 500 * consumers, DeliverPolicy: jetstream.DeliverAllPolicy}); err != nil {
		return nil, err
	}
	tr := verify.NewTracker(0, n)
	var total, redelivered atomic.Int64
	per := make([]atomic.Int64, consumers)
	done := make(chan struct{})
	var once sync.Once
	var herr atomic.Value
	var ccs []jetstream.ConsumeContext
	var conns []*nats.Conn
	defer func() {
		for _, cc := range ccs {
			cc.Stop()
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	t0 := time.Now()
	for w := range consumers {
		cn, cjs, err := natsConnect(url, fmt.Sprintf("c1-consumer-%d", w))
		if err != nil {
			return nil, err
		}
		conns = append(conns, cn)
		cons, err := cjs.Consumer(ctx, stream, name)
		if err != nil {
			return nil, err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			md, err := m.Metadata()
			if err != nil {
				herr.CompareAndSwap(nil, err)
				return
			}
			if md.NumDelivered != 1 {
				redelivered.Add(1)
			}
			tr.Deliver(int64(md.Sequence.Stream) - 1)
			if err := m.Ack(); err != nil {
				herr.CompareAndSwap(nil, err)
			}
			per[w].Add(1)
			if total.Add(1) >= n {
				once.Do(func() { close(done) })
			}
		}, jetstream.PullMaxMessages(500))
		if err != nil {
			return nil, err
		}
		ccs = append(ccs, cc)
	}
	select {
	case <-done:
	case <-time.After(maxDur):
		return nil, fmt.Errorf("consumed %d of %d messages within %v", total.Load(), n, maxDur)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := &consumeResult{consumed: total.Load(), elapsed: time.Since(t0)}
	for i := range per {
		res.perConsumer = append(res.perConsumer, per[i].Load())
	}
	if e := herr.Load(); e != nil {
		return nil, e.(error)
	}
	if err := tr.Result().ExactlyOnce(); err != nil {
		return nil, err
	}
	if r := redelivered.Load(); r > 0 {
		return nil, fmt.Errorf("%d redelivered messages", r)
	}
	return res, nil
}

// c2Ours times ShareAcknowledge (ACCEPT) of `batch` records just fetched.
func c2Ours(ctx context.Context, addr, topic, group string, batch, k int) (*stats.Latencies, error) {
	c, err := dial(addr)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := configureGroup(ctx, c, group, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest")}); err != nil {
		return nil, err
	}
	s := &shareSession{c: c, group: group, member: group + "-m", topic: topic, partitions: []int32{0}}
	defer s.close(ctx)
	lat := &stats.Latencies{}
	for range k {
		acq, err := s.fetch(ctx, int32(batch), 1000, nil)
		if err != nil {
			return nil, err
		}
		var got int64
		for _, a := range acq {
			got += a.n()
		}
		if got != int64(batch) {
			return nil, fmt.Errorf("ShareFetch(max_records %d) acquired %d records", batch, got)
		}
		acks := acceptAll(acq)
		t := time.Now()
		if err := s.ack(ctx, acks); err != nil {
			return nil, err
		}
		lat.Add(time.Since(t))
	}
	return lat, nil
}

// c2Peer times DoubleAck (the acknowledged ack) of one message just fetched.
func c2Peer(ctx context.Context, url, stream, name string, k int) (*stats.Latencies, error) {
	nc, js, err := natsConnect(url, "c2")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return nil, err
	}
	lat := &stats.Latencies{}
	for range k {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		var got int
		for m := range b.Messages() {
			got++
			t := time.Now()
			if err := m.DoubleAck(ctx); err != nil {
				return nil, err
			}
			lat.Add(time.Since(t))
		}
		if b.Error() != nil {
			return nil, b.Error()
		}
		if got != 1 {
			return nil, fmt.Errorf("Fetch(1) returned %d messages", got)
		}
	}
	return lat, nil
}
