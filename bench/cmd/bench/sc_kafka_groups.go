package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// K3/K4 (benchmarks v3) measure what most Kafka applications do: the
// idempotent producer (K3: kgo with idempotence on, fsync always, against
// the gRPC idempotent producer of docs/produce.md doing the same) and the
// consumer group (K4: four kgo group members committing every 1,000
// records, against four kgo clients consuming their partitions directly).
// Both sides of a row run on one server; the order alternates by run.

const (
	k3Producers   = 4
	k3Batch       = 100
	k4Parts       = 4
	k4CommitEvery = 1000
)

func k3Group() group {
	g := group{name: "K3 kgo idempotent producer vs gRPC idempotent producer", ids: []string{"K3"}, max: 5 * time.Minute}
	g.rows = []rowSpec{{key: "k3", id: "K3",
		name: fmt.Sprintf("idempotent produce 1 KiB, batch %d, %d producers (one partition each), fsync always: kgo vs gRPC", k3Batch, k3Producers),
		unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(gRPC, self)", ratioLabel: "Kafka/gRPC time",
		bar: report.AtMostBar(1.2, "Kafka ≤ 1.2× gRPC time")}}
	g.ours = k3Ours
	return g
}

func k3Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	p, c, stop, err := e.startDialed("k3", "--fsync", "always", "--kafka-addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stop()
	if p.kafkaAddr == "" {
		return errors.New("the server did not report a kafka_addr")
	}
	value := payload(recordSize, 7)
	calls := e.sz.k3Calls
	o.part([]string{"k3"}, func() error {
		var grpcRes, kafkaRes meas
		for _, kafka := range []bool{rep%2 == 1, rep%2 == 0} {
			topic := "k3-grpc"
			if kafka {
				topic = "k3-kgo"
			}
			if err := createTopic(ctx, c, topic, k3Producers, 0); err != nil {
				return err
			}
			var err error
			if kafka {
				kafkaRes, err = k3Kafka(ctx, p, topic, calls, value)
			} else {
				grpcRes, err = k3GRPC(ctx, p, topic, calls, value)
			}
			if err != nil {
				return err
			}
			for part := range int32(k3Producers) {
				_, hw, _, err := partitionInfo(ctx, c, topic, part)
				if err != nil {
					return err
				}
				want := int64(calls * k3Batch)
				if kafka {
					want++ // the warm-up record
				}
				if hw != want {
					return fmt.Errorf("%s-%d: high watermark %d, want %d (each record once)", topic, part, hw, want)
				}
			}
		}
		kafkaRes.ratio = grpcRes.value / kafkaRes.value
		kafkaRes.note = fmt.Sprintf("%d producers × %d batches of %d each way; every partition's high watermark = the records sent (none twice); kgo: idempotent, acks=all, no compression, one batch per request", k3Producers, calls, k3Batch)
		o.set("k3", kafkaRes)
		o.set("k3#peer", grpcRes)
		return nil
	})
	return nil
}

// k3Kafka runs k3Producers idempotent kgo clients, producer w on
// partition w, each sending calls batches of k3Batch and waiting for each.
func k3Kafka(ctx context.Context, p *proc, topic string, calls int, value []byte) (meas, error) {
	clients := make([]*kgo.Client, k3Producers)
	for w := range clients {
		cl, err := kgo.NewClient(kgo.SeedBrokers(p.kafkaAddr), kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Minute),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err != nil {
			return meas{}, err
		}
		defer cl.Close()
		// Warm up outside the measurement: metadata and InitProducerID
		// (Flush: the linger would hold the record a minute).
		var warmErr error
		cl.Produce(ctx, &kgo.Record{Partition: int32(w), Value: []byte("warm-up")}, func(_ *kgo.Record, err error) { warmErr = err })
		if err := cl.Flush(ctx); err != nil {
			return meas{}, err
		}
		if warmErr != nil {
			return meas{}, fmt.Errorf("kgo warm-up: %w", warmErr)
		}
		clients[w] = cl
	}
	lats := make([]stats.Latencies, k3Producers)
	errs := make([]error, k3Producers)
	var wg sync.WaitGroup
	m := p.phase()
	for w, cl := range clients {
		wg.Go(func() {
			var mu sync.Mutex
			for range calls {
				t := time.Now()
				for i := range k3Batch {
					cl.Produce(ctx, &kgo.Record{Partition: int32(w), Key: fmt.Appendf(nil, "k%06d", i), Value: value}, func(_ *kgo.Record, err error) {
						if err != nil {
							mu.Lock()
							errs[w] = errors.Join(errs[w], err)
							mu.Unlock()
						}
					})
				}
				if err := cl.Flush(ctx); err != nil {
					errs[w] = err
					return
				}
				lats[w].Add(time.Since(t))
				mu.Lock()
				bad := errs[w]
				mu.Unlock()
				if bad != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	ph := m.done()
	if err := errors.Join(errs...); err != nil {
		return meas{}, fmt.Errorf("kgo idempotent produce: %w", err)
	}
	return k3Meas(ph, lats, calls), nil
}

// k3GRPC is k3Kafka through the gRPC idempotent producer: InitProducer,
// then Produce with producer_id, producer_epoch and base_sequence.
func k3GRPC(ctx context.Context, p *proc, topic string, calls int, value []byte) (meas, error) {
	clients, closeAll, err := dialN(p.grpcAddr, k3Producers)
	if err != nil {
		return meas{}, err
	}
	defer closeAll()
	recs := make([]*sharelogv1.Record, k3Batch)
	for i := range recs {
		recs[i] = &sharelogv1.Record{Key: fmt.Appendf(nil, "k%06d", i), Value: value}
	}
	ids := make([]*sharelogv1.InitProducerResponse, k3Producers)
	for w, c := range clients {
		if ids[w], err = c.log.InitProducer(ctx, &sharelogv1.InitProducerRequest{}); err != nil {
			return meas{}, classify("LogService.InitProducer", err)
		}
	}
	lats := make([]stats.Latencies, k3Producers)
	errs := make([]error, k3Producers)
	var wg sync.WaitGroup
	m := p.phase()
	for w, c := range clients {
		wg.Go(func() {
			part := int32(w)
			for call := range calls {
				t := time.Now()
				resp, err := c.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: topic, Partition: &part, Records: recs,
					ProducerId: ids[w].GetProducerId(), ProducerEpoch: ids[w].GetProducerEpoch(),
					BaseSequence: map[int32]int32{part: int32(call * k3Batch)}})
				if err != nil {
					errs[w] = classify("LogService.Produce", err)
					return
				}
				lats[w].Add(time.Since(t))
				if len(resp.GetResults()) != k3Batch {
					errs[w] = fmt.Errorf("gRPC Produce: %d results for %d records", len(resp.GetResults()), k3Batch)
					return
				}
			}
		})
	}
	wg.Wait()
	ph := m.done()
	if err := errors.Join(errs...); err != nil {
		return meas{}, err
	}
	return k3Meas(ph, lats, calls), nil
}

func k4Group() group {
	g := group{name: "K4 kgo consumer group vs kgo direct partition consume", ids: []string{"K4"}, max: 8 * time.Minute}
	g.rows = []rowSpec{{key: "k4", id: "K4",
		name: fmt.Sprintf("consume %d partitions with %d kgo members, commit every %d: group vs direct", k4Parts, k4Parts, k4CommitEvery),
		unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(kgo direct, self)", ratioLabel: "group/direct rate",
		bar: report.AtLeastBar(0.8, "group ≥ 0.8× direct")}}
	g.ours = k4Ours
	return g
}

func k4Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	p, c, stop, err := e.startDialed("k4", "--fsync", "never", "--kafka-addr", "127.0.0.1:0", "--group-initial-rebalance-delay", "0")
	if err != nil {
		return err
	}
	defer stop()
	if p.kafkaAddr == "" {
		return errors.New("the server did not report a kafka_addr")
	}
	topic := "k4"
	if err := createTopic(ctx, c, topic, k4Parts, 0); err != nil {
		return err
	}
	per := e.sz.k4Recs / k4Parts
	for part := range int32(k4Parts) {
		if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: topic, partition: part, batch: 1000, producers: 1,
			total: per, maxDur: 5 * time.Minute, value: payload(recordSize, 8)}); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	o.part([]string{"k4"}, func() error {
		var groupRes, directRes meas
		var commits int
		var joined time.Duration
		for _, grp := range []bool{rep%2 == 1, rep%2 == 0} {
			var err error
			if grp {
				groupRes, commits, joined, err = k4Consume(ctx, p, topic, per, fmt.Sprintf("k4-r%d", rep))
			} else {
				directRes, _, _, err = k4Consume(ctx, p, topic, per, "")
			}
			if err != nil {
				return err
			}
		}
		groupRes.ratio = groupRes.value / directRes.value
		groupRes.note = fmt.Sprintf("%d records each way, every offset once per partition and in order; the group's time includes its %d synchronous commits (acknowledged; the committed offset of each partition = its end, checked), not its join (%v, fetching paused until each member had its partition)", per*k4Parts, commits, joined.Round(time.Millisecond))
		o.set("k4", groupRes)
		o.set("k4#peer", directRes)
		return nil
	})
	return nil
}

// k4Consume runs k4Parts kgo clients: members of group (committing every
// k4CommitEvery records and at the end), or, with group "", each consuming
// its own partition directly. Group members join with fetching paused and
// the clock starts once each owns one partition (the join time is
// returned apart): the row compares consuming, not joining. It answers
// the rate, the commits acknowledged and the join time.
func k4Consume(ctx context.Context, p *proc, topic string, per int64, group string) (meas, int, time.Duration, error) {
	total := per * k4Parts
	next := make([]int64, k4Parts) // per partition: the next offset expected
	var mu sync.Mutex
	var commits int
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	consumed := func() int64 {
		n := int64(0)
		for _, v := range next {
			n += v
		}
		return n
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	assigned := make([]int, k4Parts)
	clients := make([]*kgo.Client, k4Parts)
	t0 := time.Now()
	for w := range int32(k4Parts) {
		opts := []kgo.Opt{kgo.SeedBrokers(p.kafkaAddr), kgo.FetchMaxBytes(k1MaxBytes), kgo.FetchMaxPartitionBytes(k1MaxBytes)}
		if group != "" {
			opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.DisableAutoCommit(),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Balancers(kgo.RangeBalancer()),
				kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
					mu.Lock()
					assigned[w] += len(m[topic])
					mu.Unlock()
				}),
				kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
					mu.Lock()
					assigned[w] -= len(m[topic])
					mu.Unlock()
				}))
		} else {
			opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {w: kgo.NewOffset().At(0)}}))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return meas{}, 0, 0, err
		}
		defer cl.Close()
		if group != "" {
			cl.PauseFetchTopics(topic)
		}
		clients[w] = cl
	}
	var joined time.Duration
	if group != "" {
		for {
			mu.Lock()
			ready := true
			for _, n := range assigned {
				ready = ready && n == 1
			}
			mu.Unlock()
			if ready {
				break
			}
			if cctx.Err() != nil {
				return meas{}, 0, 0, fmt.Errorf("the %d members did not each get one partition: %v", k4Parts, assigned)
			}
			time.Sleep(5 * time.Millisecond)
		}
		joined = time.Since(t0)
	}
	var wg sync.WaitGroup
	m := p.phase()
	for _, cl := range clients {
		cl.ResumeFetchTopics(topic)
		wg.Go(func() {
			uncommitted := 0
			for {
				mu.Lock()
				done := consumed() >= total || firstErr != nil
				mu.Unlock()
				if done || cctx.Err() != nil {
					break
				}
				pctx, pcancel := context.WithTimeout(cctx, 200*time.Millisecond)
				fs := cl.PollFetches(pctx)
				pcancel()
				n := 0
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) {
					if r.Offset != next[r.Partition] {
						fail(fmt.Errorf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition]))
					}
					next[r.Partition] = r.Offset + 1
					n++
				})
				mu.Unlock()
				uncommitted += n
				if group == "" || uncommitted < k4CommitEvery {
					continue
				}
				if err := cl.CommitUncommittedOffsets(cctx); err != nil {
					mu.Lock()
					fail(fmt.Errorf("commit: %w", err))
					mu.Unlock()
					return
				}
				mu.Lock()
				commits++
				mu.Unlock()
				uncommitted = 0
			}
			if group != "" && uncommitted > 0 {
				err := cl.CommitUncommittedOffsets(ctx)
				mu.Lock()
				if err != nil {
					fail(fmt.Errorf("final commit: %w", err))
				} else {
					commits++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	ph := m.done()
	if firstErr != nil {
		return meas{}, 0, 0, firstErr
	}
	for part := range k4Parts {
		if next[part] != per {
			return meas{}, 0, 0, fmt.Errorf("partition %d consumed to %d, want %d (%v)", part, next[part], per, cctx.Err())
		}
	}
	if group != "" {
		if err := k4CheckCommitted(ctx, clients[0], group, topic, per); err != nil {
			return meas{}, 0, 0, err
		}
	}
	mm := newMeas(float64(total) / ph.elapsed.Seconds())
	mm.cpu, mm.rss = ph.cpuPerM(total), ph.rssMiB
	return mm, commits, joined, nil
}

// k4CheckCommitted checks the group's committed offset of every partition
// is its end (per).
func k4CheckCommitted(ctx context.Context, cl *kgo.Client, group, topic string, per int64) error {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for part := range int32(k4Parts) {
		rt.Partitions = append(rt.Partitions, part)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("OffsetFetch: %w", err)
	}
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 {
		return fmt.Errorf("OffsetFetch: error %d, %d topics", resp.ErrorCode, len(resp.Topics))
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != 0 || p.Offset != per {
			return fmt.Errorf("partition %d: committed %d (error %d), want %d", p.Partition, p.Offset, p.ErrorCode, per)
		}
	}
	return nil
}

// k3Meas is the rate and latencies of a K3 side's phase.
func k3Meas(ph phaseResult, lats []stats.Latencies, calls int) meas {
	var lat stats.Latencies
	for _, l := range lats {
		lat.Merge(&l)
	}
	n := int64(k3Producers * calls * k3Batch)
	mm := newMeas(float64(n) / ph.elapsed.Seconds())
	mm.p50, mm.p99, mm.cpu, mm.rss = lat.PercentileMs(50), lat.PercentileMs(99), ph.cpuPerM(n), ph.rssMiB
	return mm
}
