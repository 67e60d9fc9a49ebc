package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
	"github.com/sharelog/sharelog/client/shareconsumer"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// K1/K2 compare the Kafka listener (docs/kafka.md) with gRPC on the same
// server: franz-go's kgo client against the gRPC client of this harness
// (K1) and against client/shareconsumer (K2). Both sides of a row run on
// one server instance; the order of the two sides alternates between runs
// so neither always gets the warmer server.

const (
	k1Batch    = 100     // records per Produce call / per kgo batch
	k1MaxBytes = 1 << 20 // bytes per Fetch (gRPC max_bytes, kgo partition and request max)
	k2Parts    = 2       // partitions of the K2 topic
	k2Members  = 2       // consumers per group, one connection each
	k2Max      = 500     // records per share fetch
)

func k1Group() group {
	g := group{name: "K1 Kafka listener (kgo) vs gRPC", ids: []string{"K1"}, max: 5 * time.Minute}
	bar := report.AtMostBar(1.5, "Kafka ≤ 1.5× slower")
	g.rows = []rowSpec{
		{key: "k1-produce", id: "K1", name: fmt.Sprintf("Produce 1 KiB, batch %d, 1 client: kgo vs gRPC", k1Batch),
			unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(gRPC, self)", ratioLabel: "Kafka/gRPC time", bar: bar},
		{key: "k1-fetch", id: "K1", name: "Fetch the partition from offset 0, 1 MiB per fetch: kgo vs gRPC",
			unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(gRPC, self)", ratioLabel: "Kafka/gRPC time", bar: bar},
	}
	g.ours = k1Ours
	return g
}

func k1Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	p, c, stop, err := e.startDialed("k1", "--fsync", "never", "--kafka-addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stop()
	if p.kafkaAddr == "" {
		return errors.New("the server did not report a kafka_addr")
	}
	value := payload(recordSize, 5)
	calls := e.sz.k1Calls
	kafkaFirst := rep%2 == 1
	topic := "k1"
	if err := createTopic(ctx, c, topic, 1, 0); err != nil {
		return err
	}
	total := int64(2*calls*k1Batch) + 1 // + the kgo warm-up record
	o.part([]string{"k1-produce"}, func() error {
		var grpcRes, kafkaRes meas
		var err error
		for _, kafka := range []bool{kafkaFirst, !kafkaFirst} {
			if kafka {
				kafkaRes, err = k1ProduceKafka(ctx, p, topic, calls, value)
			} else {
				grpcRes, err = g1GRPC(ctx, p, c, topic, k1Batch, calls, value)
			}
			if err != nil {
				return err
			}
		}
		_, hw, _, err := partitionInfo(ctx, c, topic, 0)
		if err != nil {
			return err
		}
		if hw != total {
			return fmt.Errorf("high watermark %d, want %d", hw, total)
		}
		kafkaRes.ratio = grpcRes.value / kafkaRes.value
		kafkaRes.note = fmt.Sprintf("%d calls of %d records each way, distinct offsets and high watermark verified; kgo: acks=all, no idempotence, no compression, one batch per request", calls, k1Batch)
		o.set("k1-produce", kafkaRes)
		o.set("k1-produce#peer", grpcRes)
		return nil
	})
	o.part([]string{"k1-fetch"}, func() error {
		_, hw, _, err := partitionInfo(ctx, c, topic, 0)
		if err != nil {
			return err
		}
		if hw == 0 {
			return errors.New("nothing to fetch (produce part failed)")
		}
		var grpcRes, kafkaRes meas
		for _, kafka := range []bool{kafkaFirst, !kafkaFirst} {
			if kafka {
				kafkaRes, err = k1FetchKafka(ctx, p, topic, hw)
			} else {
				grpcRes, err = k1FetchGRPC(ctx, p, c, topic, hw)
			}
			if err != nil {
				return err
			}
		}
		kafkaRes.ratio = grpcRes.value / kafkaRes.value
		kafkaRes.note = fmt.Sprintf("%d records each way, every offset once and in order", hw)
		o.set("k1-fetch", kafkaRes)
		o.set("k1-fetch#peer", grpcRes)
		return nil
	})
	return nil
}

// kafkaClient connects kgo to the server's Kafka listener with the settings
// the listener serves: no idempotent producer (InitProducerID is not served).
func kafkaClient(p *proc, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.kafkaAddr), kgo.DisableIdempotentWrite(),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression())}, opts...)...)
}

// k1ProduceKafka sends calls batches of k1Batch records and waits for each:
// a long linger keeps the batch together and Flush sends it at once, so
// each request carries exactly the batch a gRPC Produce carries.
func k1ProduceKafka(ctx context.Context, p *proc, topic string, calls int, value []byte) (meas, error) {
	cl, err := kafkaClient(p, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Minute))
	if err != nil {
		return meas{}, err
	}
	defer cl.Close()
	// One warm-up record outside the measurement: the first produce also
	// fetches metadata, which the gRPC side does not need.
	var warmErr error
	cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("warm-up"), Value: value}, func(_ *kgo.Record, err error) { warmErr = err })
	if err := cl.Flush(ctx); err != nil {
		return meas{}, err
	}
	if warmErr != nil {
		return meas{}, fmt.Errorf("kgo produce: %w", warmErr)
	}
	recs := make([]kgo.Record, k1Batch)
	for i := range recs {
		recs[i] = kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "k%06d", i), Value: value}
	}
	offsets := make(map[int64]bool, calls*k1Batch)
	var lat stats.Latencies
	var mu sync.Mutex
	var firstErr error
	m := p.phase()
	for range calls {
		t := time.Now()
		for i := range recs {
			r := recs[i] // a fresh record each call: kgo owns it until its promise
			cl.Produce(ctx, &r, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				case offsets[r.Offset]:
					if firstErr == nil {
						firstErr = fmt.Errorf("offset %d acknowledged twice", r.Offset)
					}
				default:
					offsets[r.Offset] = true
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			return meas{}, err
		}
		lat.Add(time.Since(t))
		mu.Lock()
		err := firstErr
		mu.Unlock()
		if err != nil {
			return meas{}, fmt.Errorf("kgo produce: %w", err)
		}
	}
	ph := m.done()
	n := int64(calls * k1Batch)
	if int64(len(offsets)) != n {
		return meas{}, fmt.Errorf("kgo produce: %d distinct offsets for %d records", len(offsets), n)
	}
	mm := newMeas(float64(n) / ph.elapsed.Seconds())
	mm.p50, mm.p99, mm.cpu, mm.rss = lat.PercentileMs(50), lat.PercentileMs(99), ph.cpuPerM(n), ph.rssMiB
	return mm, nil
}

func k1FetchGRPC(ctx context.Context, p *proc, c *client, topic string, hw int64) (meas, error) {
	var lat stats.Latencies
	next := int64(0)
	m := p.phase()
	for next < hw {
		t := time.Now()
		resp, err := c.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: topic, Partition: 0, Offset: next, MaxRecords: 10000, MaxBytes: k1MaxBytes})
		if err != nil {
			return meas{}, classify("LogService.Fetch", err)
		}
		lat.Add(time.Since(t))
		if len(resp.GetRecords()) == 0 {
			return meas{}, fmt.Errorf("gRPC Fetch at %d of %d returned nothing", next, hw)
		}
		for _, r := range resp.GetRecords() {
			if r.GetOffset() != next {
				return meas{}, fmt.Errorf("gRPC Fetch: offset %d, want %d", r.GetOffset(), next)
			}
			next++
		}
	}
	ph := m.done()
	mm := newMeas(float64(hw) / ph.elapsed.Seconds())
	mm.p50, mm.p99, mm.cpu, mm.rss = lat.PercentileMs(50), lat.PercentileMs(99), ph.cpuPerM(hw), ph.rssMiB
	return mm, nil
}

func k1FetchKafka(ctx context.Context, p *proc, topic string, hw int64) (meas, error) {
	cl, err := kafkaClient(p, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}),
		kgo.FetchMaxBytes(k1MaxBytes), kgo.FetchMaxPartitionBytes(k1MaxBytes))
	if err != nil {
		return meas{}, err
	}
	defer cl.Close()
	var lat stats.Latencies
	next := int64(0)
	m := p.phase()
	for next < hw {
		t := time.Now()
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return meas{}, fmt.Errorf("kgo fetch: %d of %d records: %w", next, hw, err)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return meas{}, fmt.Errorf("kgo fetch: %w", errs[0].Err)
		}
		lat.Add(time.Since(t))
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			if bad == nil && r.Offset != next {
				bad = fmt.Errorf("kgo fetch: offset %d, want %d", r.Offset, next)
			}
			next++
		})
		if bad != nil {
			return meas{}, bad
		}
	}
	ph := m.done()
	if next != hw {
		return meas{}, fmt.Errorf("kgo fetch: %d records, want %d", next, hw)
	}
	mm := newMeas(float64(hw) / ph.elapsed.Seconds())
	mm.p50, mm.p99, mm.cpu, mm.rss = lat.PercentileMs(50), lat.PercentileMs(99), ph.cpuPerM(hw), ph.rssMiB
	return mm, nil
}

// K2: the same share-group workload drained by kgo's share consumer over
// the Kafka listener and by client/shareconsumer over gRPC. The rate is
// records / time to the last delivery. The time until the last
// acknowledgements are settled is in the row's note and is not the rate:
// kgo sends its final acknowledgements on a ShareFetch that, with the topic
// drained, long-polls up to 500 ms (kgo's cap when acks ride a fetch) before
// its answer arrives, while client/shareconsumer sends ShareAcknowledge at
// once; that fixed tail would dominate a quick run and says nothing about
// the listener's throughput. Exactly-once is checked either way.
func k2Group() group {
	g := group{name: "K2 kgo share consumer vs client/shareconsumer", ids: []string{"K2"}, max: 5 * time.Minute}
	g.rows = []rowSpec{{key: "k2", id: "K2",
		name: fmt.Sprintf("share-consume %d partitions, %d consumers, %d per fetch, explicit ACCEPT: kgo vs shareconsumer", k2Parts, k2Members, k2Max),
		unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(shareconsumer, self)", ratioLabel: "kgo/shareconsumer rate",
		bar: report.AtLeastBar(0.8, "kgo ≥ 0.8× shareconsumer")}}
	g.ours = k2Ours
	return g
}

func k2Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	p, c, stop, err := e.startDialed("k2", "--fsync", "never", "--kafka-addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stop()
	if p.kafkaAddr == "" {
		return errors.New("the server did not report a kafka_addr")
	}
	topic := "k2"
	if err := createTopic(ctx, c, topic, k2Parts, 0); err != nil {
		return err
	}
	per := e.sz.k2Recs / k2Parts
	for part := range int32(k2Parts) {
		if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: topic, partition: part, batch: 1000, producers: 1,
			total: per, maxDur: 5 * time.Minute, value: payload(recordSize, 6)}); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	n := per * k2Parts
	o.part([]string{"k2"}, func() error {
		kafkaFirst := rep%2 == 1
		var grpcRes, kafkaRes meas
		var grpcTail, kafkaTail string
		for _, kafka := range []bool{kafkaFirst, !kafkaFirst} {
			grp := fmt.Sprintf("k2-grpc-r%d", rep)
			if kafka {
				grp = fmt.Sprintf("k2-kgo-r%d", rep)
			}
			if err := configureGroup(ctx, c, grp, &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}); err != nil {
				return err
			}
			led := newK2Ledger(k2Parts, per)
			m := p.phase()
			var d, settled time.Duration
			if kafka {
				d, settled = k2Kafka(ctx, p, grp, topic, led)
			} else {
				d, settled = k2ShareConsumer(ctx, p, grp, topic, led)
			}
			ph := m.done()
			if err := led.check(); err != nil {
				return err
			}
			if err := k2Settled(ctx, c, grp, topic, per); err != nil {
				return err
			}
			mm := newMeas(float64(n) / d.Seconds())
			mm.cpu, mm.rss = ph.cpuPerM(n), ph.rssMiB
			tail := fmt.Sprintf("delivered in %v, acknowledgements settled at %v, closed at %v",
				d.Round(time.Millisecond), settled.Round(time.Millisecond), ph.elapsed.Round(time.Millisecond))
			if kafka {
				kafkaRes, kafkaTail = mm, tail
			} else {
				grpcRes, grpcTail = mm, tail
			}
		}
		kafkaRes.ratio = kafkaRes.value / grpcRes.value
		kafkaRes.note = fmt.Sprintf("%d records per group, each delivered exactly once with delivery count 1 and accepted (share-partition start offset = high watermark); rate = records / time from creating the consumers to the last delivery (CPU: the whole phase, join to close); kgo %s; shareconsumer %s", n, kafkaTail, grpcTail)
		o.set("k2", kafkaRes)
		o.set("k2#peer", grpcRes)
		return nil
	})
	return nil
}

// k2Ledger records every delivery of one group's run.
type k2Ledger struct {
	mu        sync.Mutex
	seen      [][]bool
	delivered atomic.Int64
	want      int64
	err       error
	done      chan struct{}
	once      sync.Once
	doneAt    time.Time // when the last record was delivered
}

func newK2Ledger(parts int, per int64) *k2Ledger {
	l := &k2Ledger{want: int64(parts) * per, done: make(chan struct{})}
	for range parts {
		l.seen = append(l.seen, make([]bool, per))
	}
	return l
}

// deliver notes one delivery; a duplicate, an unknown offset or a delivery
// count other than 1 is a violation.
func (l *k2Ledger) deliver(part int32, off int64, count int32) {
	l.mu.Lock()
	switch {
	case part < 0 || int(part) >= len(l.seen) || off < 0 || off >= int64(len(l.seen[part])):
		l.violate("delivered %d/%d, outside the prefilled range", part, off)
	case l.seen[part][off]:
		l.violate("%d/%d delivered twice", part, off)
	case count != 1:
		l.violate("%d/%d delivered with count %d", part, off, count)
	default:
		l.seen[part][off] = true
	}
	l.mu.Unlock()
	if l.delivered.Add(1) >= l.want {
		l.once.Do(func() {
			l.mu.Lock()
			l.doneAt = time.Now()
			l.mu.Unlock()
			close(l.done)
		})
	}
}

func (l *k2Ledger) violate(format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf(format, args...)
	}
}

func (l *k2Ledger) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
	l.once.Do(func() { close(l.done) })
}

func (l *k2Ledger) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if d := l.delivered.Load(); d != l.want {
		return fmt.Errorf("%d deliveries, want %d", d, l.want)
	}
	return nil
}

// k2Run runs k2Members consumers until the ledger has every record (or
// fails). Each consumer calls settled once its acknowledgements are done,
// before it closes. k2Run returns the time from its start (consumers not
// yet created) to the last delivery, and to the last settled call.
func k2Run(ctx context.Context, led *k2Ledger, consume func(ctx context.Context, stop <-chan struct{}, settled func()) error) (delivered, settledAt time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	var last time.Time
	settled := func() {
		mu.Lock()
		defer mu.Unlock()
		if t := time.Now(); t.After(last) {
			last = t
		}
	}
	var wg sync.WaitGroup
	for range k2Members {
		wg.Go(func() {
			if err := consume(ctx, led.done, settled); err != nil {
				led.fail(err)
			}
		})
	}
	select {
	case <-led.done:
	case <-ctx.Done():
		led.fail(fmt.Errorf("%d of %d records delivered: %w", led.delivered.Load(), led.want, ctx.Err()))
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	led.mu.Lock()
	defer led.mu.Unlock()
	return led.doneAt.Sub(start), last.Sub(start)
}

func k2Kafka(ctx context.Context, p *proc, grp, topic string, led *k2Ledger) (time.Duration, time.Duration) {
	return k2Run(ctx, led, func(ctx context.Context, stop <-chan struct{}, settled func()) error {
		var ackErr error
		var ackMu sync.Mutex
		cl, err := kafkaClient(p, kgo.ShareGroup(grp), kgo.ConsumeTopics(topic), kgo.ShareMaxRecords(k2Max),
			kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
				if err := rs.Error(); err != nil {
					ackMu.Lock()
					if ackErr == nil {
						ackErr = err
					}
					ackMu.Unlock()
				}
			}))
		if err != nil {
			return err
		}
		defer cl.Close()
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-stop:
				cancel()
			case <-pctx.Done():
			}
		}()
		for pctx.Err() == nil {
			fs := cl.PollFetches(pctx)
			for _, fe := range fs.Errors() {
				if !errors.Is(fe.Err, context.Canceled) && !errors.Is(fe.Err, context.DeadlineExceeded) {
					return fmt.Errorf("kgo share fetch: %w", fe.Err)
				}
			}
			fs.EachRecord(func(r *kgo.Record) {
				led.deliver(r.Partition, r.Offset, r.DeliveryCount())
				r.Ack(kgo.AckAccept)
			})
		}
		if err := cl.FlushAcks(ctx); err != nil {
			return fmt.Errorf("kgo FlushAcks: %w", err)
		}
		settled()
		ackMu.Lock()
		defer ackMu.Unlock()
		if ackErr != nil {
			return fmt.Errorf("kgo acknowledgement: %w", ackErr)
		}
		return nil
	})
}

func k2ShareConsumer(ctx context.Context, p *proc, grp, topic string, led *k2Ledger) (time.Duration, time.Duration) {
	return k2Run(ctx, led, func(ctx context.Context, stop <-chan struct{}, settled func()) error {
		c, err := dial(p.grpcAddr)
		if err != nil {
			return err
		}
		defer c.close()
		var ackErr error
		var ackMu sync.Mutex
		sc, err := shareconsumer.New(c.conn, shareconsumer.Config{GroupID: grp, Topics: []string{topic},
			AckMode: shareconsumer.AckExplicit, MaxRecords: k2Max,
			OnAcknowledgement: func(r shareconsumer.AckResult) {
				if r.Err != nil {
					ackMu.Lock()
					if ackErr == nil {
						ackErr = r.Err
					}
					ackMu.Unlock()
				}
			}})
		if err != nil {
			return err
		}
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-stop:
				cancel()
			case <-pctx.Done():
			}
		}()
		for {
			recs, err := sc.Poll(pctx)
			if err != nil {
				if pctx.Err() != nil {
					break
				}
				return fmt.Errorf("shareconsumer Poll: %w", err)
			}
			for _, r := range recs {
				led.deliver(r.Partition, r.Offset, r.DeliveryCount)
				if err := sc.Acknowledge(r, shareconsumer.Accept); err != nil {
					return fmt.Errorf("shareconsumer Acknowledge: %w", err)
				}
			}
		}
		if _, err := sc.Commit(ctx); err != nil {
			return fmt.Errorf("shareconsumer Commit: %w", err)
		}
		settled()
		if err := sc.Close(ctx); err != nil {
			return fmt.Errorf("shareconsumer Close: %w", err)
		}
		ackMu.Lock()
		defer ackMu.Unlock()
		if ackErr != nil {
			return fmt.Errorf("shareconsumer acknowledgement: %w", ackErr)
		}
		return nil
	})
}

// k2Settled checks that every record of the group is acknowledged: the
// share-partition start offset of each partition is its high watermark.
func k2Settled(ctx context.Context, c *client, grp, topic string, per int64) error {
	parts := make([]int32, k2Parts)
	for i := range parts {
		parts[i] = int32(i)
	}
	resp, err := c.sg.DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: grp,
		Topics: []*sharelogv1.TopicPartitions{{Topic: topic, Partitions: parts}}})
	if err != nil {
		return classify("ShareGroupService.DescribeShareGroupOffsets", err)
	}
	got := 0
	for _, t := range resp.GetTopics() {
		for _, pp := range t.GetPartitions() {
			got++
			if pp.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
				return fmt.Errorf("group %s partition %d: %v %s", grp, pp.GetPartition(), pp.GetErrorCode(), pp.GetErrorMessage())
			}
			if pp.GetStartOffset() != per {
				return fmt.Errorf("group %s partition %d: share-partition start offset %d, want %d (not every record accepted)", grp, pp.GetPartition(), pp.GetStartOffset(), per)
			}
		}
	}
	if got != k2Parts {
		return fmt.Errorf("group %s: offsets of %d partitions, want %d", grp, got, k2Parts)
	}
	return nil
}
