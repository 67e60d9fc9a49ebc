package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
	"github.com/sharelog/sharelog/bench/internal/verify"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// X1/X2: sharelog in cluster mode against the same NATS cluster used
// directly. Each run starts a fresh NATS cluster with an active sharelog
// instance and one standby, and measures both sides on it; the order of
// the two sides alternates between runs so neither always gets the warmer
// cluster. The sharelog side talks to the active instance.

const (
	x1Batch     = 100 // records per Produce call / per atomic batch
	x1Producers = 4
	x2Consumers = 4
	xPrefillB   = 1000 // prefill batch: JetStream's default atomic batch limit
	xMembers    = 2    // sharelog instances of X1/X2: active + one standby
)

func clusterNote() string {
	sync := "JetStream's default sync interval"
	if clusterSyncAlways {
		sync = "`sync_interval: always`"
	}
	return fmt.Sprintf("%d NATS nodes (child processes, %s), R%d; sharelog `--store jetstream`, %d instances (active + standby), calls to the active one", clusterNodes, sync, clusterReplicas, xMembers)
}

func x1Group() group {
	g := group{name: "X1 cluster produce vs JetStream R3 atomic batch", ids: []string{"X1"}, max: 10 * time.Minute}
	g.rows = []rowSpec{{key: "x1", id: "X1",
		name: fmt.Sprintf("cluster mode R3: produce 1 KiB, batch %d, %d producers vs atomic batch publish", x1Batch, x1Producers),
		unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(JetStream R3 atomic batch)", ratioLabel: "ours/JetStream",
		bar: report.AtLeastBar(0.8, "≥ 0.8× raw JetStream R3 atomic batch")}}
	g.ours = x1Run
	return g
}

func x1Run(ctx context.Context, e *env, rep int, o *runOut) error {
	cl, err := e.startCluster(ctx, "x1", xMembers, e.sz.xLeaseTTL)
	if err != nil {
		return err
	}
	defer cl.stop()
	active := cl.members[0]
	adm, err := dial(active.grpcAddr)
	if err != nil {
		return err
	}
	defer adm.close()
	nc, js, err := natsConnect(cl.nats.url(), "x1-admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	const topic, stream, subject = "x1", "X1RAW", "x1raw"
	if err := retryUnavailable(ctx, 20*time.Second, func() error { return createTopic(ctx, adm, topic, 1, 0) }); err != nil {
		return err
	}
	if err := createR3Stream(ctx, js, stream, subject, true); err != nil {
		return err
	}
	value := payload(recordSize, 11)
	spec := produceSpec{topic: topic, subject: subject, batch: x1Batch, producers: x1Producers, total: e.sz.xRecords,
		maxDur: e.sz.xCap, value: value}
	o.part([]string{"x1"}, func() error {
		var oursRes, peerRes meas
		for _, peerSide := range []bool{rep%2 == 1, rep%2 == 0} {
			if peerSide {
				m := phaseOf(cl.nats.nodes...)
				s := spec
				s.topic = stream
				res, err := produceAtomicNATS(ctx, cl.nats.url(), s)
				ph := m.done()
				if err != nil {
					return fmt.Errorf("JetStream atomic batch: %w", err)
				}
				peerRes = produceMeas(res, ph)
			} else {
				m := phaseOf(cl.procs()...)
				res, err := produceOurs(ctx, active.grpcAddr, spec)
				ph := m.done()
				if err != nil {
					return err
				}
				oursRes = produceMeas(res, ph)
			}
		}
		oursRes.ratio = oursRes.value / peerRes.value
		oursRes.note = fmt.Sprintf("%s; %d records each way, distinct offsets/sequences and high watermark / stream count verified; peer: `jetstreamext.PublishMsgBatch` (orbit.go, ADR-50 atomic batch: `Nats-Batch-Id` headers, commit acknowledged once the batch is committed) on an R3 stream with `AllowAtomicPublish` — the call sharelog itself makes per Produce; CPU and RSS: all NATS nodes (+ both sharelog instances for ours)",
			clusterNote(), e.sz.xRecords)
		o.set("x1", oursRes)
		o.set("x1#peer", peerRes)
		return nil
	})
	return nil
}

func produceMeas(res *produceResult, ph phaseResult) meas {
	mm := newMeas(res.rate())
	mm.p50, mm.p99 = res.lat.PercentileMs(50), res.lat.PercentileMs(99)
	mm.cpu, mm.rss = ph.cpuPerM(res.acked), ph.rssMiB
	return mm
}

// batchOffsets is the offsets (sequence - 1) an atomic batch of n messages
// acknowledged with last sequence seq occupies, or an error if the ack
// cannot describe such a batch.
func batchOffsets(seq, size uint64, n int) (first int64, err error) {
	if size != uint64(n) {
		return 0, fmt.Errorf("atomic batch of %d messages acknowledged with batch size %d", n, size)
	}
	if seq < uint64(n) {
		return 0, fmt.Errorf("atomic batch of %d messages acknowledged with last sequence %d", n, seq)
	}
	return int64(seq) - int64(n), nil
}

// produceAtomicNATS publishes spec.total messages as atomic batches of
// spec.batch (each one PublishMsgBatch, waiting for its commit) from
// spec.producers connections, then checks distinct sequences and the
// stream's message count.
func produceAtomicNATS(ctx context.Context, url string, spec produceSpec) (*produceResult, error) {
	conns := make([]*nats.Conn, spec.producers)
	jss := make([]jetstream.JetStream, spec.producers)
	for i := range conns {
		nc, js, err := natsConnect(url, fmt.Sprintf("atomic-producer-%d", i))
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		conns[i], jss[i] = nc, js
	}
	tr := verify.NewTracker(0, spec.total)
	cl := &claimer{total: spec.total}
	var acked atomic.Int64
	lats := make([]stats.Latencies, spec.producers)
	errs := make([]error, spec.producers)
	deadline := time.Now().Add(spec.maxDur)
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range spec.producers {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				_, n := cl.claim(spec.batch)
				if n == 0 {
					return
				}
				msgs := make([]*nats.Msg, n)
				for i := range msgs {
					m := nats.NewMsg(spec.subject)
					m.Data = spec.value
					msgs[i] = m
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				t := time.Now()
				ack, err := jetstreamext.PublishMsgBatch(cctx, jss[w], msgs)
				d := time.Since(t)
				cancel()
				if err != nil {
					errs[w] = fmt.Errorf("PublishMsgBatch: %w", err)
					return
				}
				lats[w].Add(d)
				first, err := batchOffsets(ack.Sequence, ack.BatchSize, n)
				if err != nil {
					errs[w] = err
					return
				}
				for off := first; off < first+int64(n); off++ {
					if !tr.Deliver(off) {
						errs[w] = fmt.Errorf("sequence %d acknowledged twice (or beyond %d)", off+1, spec.total)
						return
					}
				}
				acked.Add(int64(n))
			}
		})
	}
	wg.Wait()
	res := &produceResult{acked: acked.Load(), elapsed: time.Since(t0)}
	for i := range lats {
		res.lat.Merge(&lats[i])
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if res.acked == 0 {
		return nil, fmt.Errorf("no batch acknowledged within %v", spec.maxDur)
	}
	s, err := jss[0].Stream(ctx, spec.topic)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	if int64(info.State.Msgs) != res.acked || int64(info.State.LastSeq) != res.acked {
		return nil, fmt.Errorf("stream has %d messages (last seq %d), %d acknowledged", info.State.Msgs, info.State.LastSeq, res.acked)
	}
	if r := tr.Result(); r.Delivered != res.acked || r.Duplicates != 0 || r.OutOfRange != 0 {
		return nil, fmt.Errorf("sequences: %+v", r)
	}
	return res, nil
}

func x2Group() group {
	g := group{name: "X2 cluster share-consume vs JetStream R3 pull consumer", ids: []string{"X2"}, max: 10 * time.Minute}
	g.rows = []rowSpec{{key: "x2", id: "X2",
		name: fmt.Sprintf("cluster mode R3: ShareFetch(500) + ACCEPT, 1 partition, %d consumers vs pull consumer with explicit acks", x2Consumers),
		unit: "rec/s", dir: report.Custom, selfPeer: true, peerName: "(JetStream R3 pull consumer)", ratioLabel: "ours/JetStream",
		bar: report.AtLeastBar(1.5, "≥ 1.5× JetStream R3 pull consumer")}}
	g.ours = x2Run
	return g
}

func x2Run(ctx context.Context, e *env, rep int, o *runOut) error {
	cl, err := e.startCluster(ctx, "x2", xMembers, e.sz.xLeaseTTL)
	if err != nil {
		return err
	}
	defer cl.stop()
	active := cl.members[0]
	adm, err := dial(active.grpcAddr)
	if err != nil {
		return err
	}
	defer adm.close()
	nc, js, err := natsConnect(cl.nats.url(), "x2-admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	const topic, stream, subject = "x2", "X2RAW", "x2raw"
	group := fmt.Sprintf("x2-r%d", rep)
	n := e.sz.xRecords
	if err := retryUnavailable(ctx, 20*time.Second, func() error { return createTopic(ctx, adm, topic, 1, 0) }); err != nil {
		return err
	}
	// The share-state bucket may still be electing its leader right after
	// the instance became active: settle the group's config before timing.
	if err := retryUnavailable(ctx, 20*time.Second, func() error {
		return configureGroup(ctx, adm, group, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest")})
	}); err != nil {
		return err
	}
	if err := createR3Stream(ctx, js, stream, subject, true); err != nil {
		return err
	}
	value := payload(recordSize, 12)
	if _, err := produceOurs(ctx, active.grpcAddr, produceSpec{topic: topic, batch: xPrefillB, producers: 1, total: n,
		maxDur: 5 * time.Minute, value: value}); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if _, err := produceAtomicNATS(ctx, cl.nats.url(), produceSpec{topic: stream, subject: subject, batch: xPrefillB, producers: 1,
		total: n, maxDur: 5 * time.Minute, value: value}); err != nil {
		return fmt.Errorf("peer prefill: %w", err)
	}
	o.part([]string{"x2"}, func() error {
		var oursRes, peerRes meas
		var oursSpread, peerSpread string
		for _, peerSide := range []bool{rep%2 == 1, rep%2 == 0} {
			if peerSide {
				m := phaseOf(cl.nats.nodes...)
				res, err := c1Peer(ctx, cl.nats.url(), stream, "x2", x2Consumers, n, e.sz.xCap)
				ph := m.done()
				if err != nil {
					return fmt.Errorf("JetStream pull consumer: %w", err)
				}
				peerRes = consumeMeas(res, ph)
				peerSpread = res.spread()
			} else {
				m := phaseOf(cl.procs()...)
				res, err := c1Ours(ctx, active.grpcAddr, topic, group, x2Consumers, n, e.sz.xCap)
				ph := m.done()
				if err != nil {
					return err
				}
				oursRes = consumeMeas(res, ph)
				oursSpread = res.spread()
			}
		}
		oursRes.ratio = oursRes.value / peerRes.value
		oursRes.note = fmt.Sprintf("%s; %d records each way, every offset/sequence delivered exactly once with delivery count 1; peer: durable pull consumer (R3, the stream's replicas), `Consume` with 500-message pulls, `Ack` each, MaxAckPending %d%s%s",
			clusterNote(), n, 500*x2Consumers, labelled("ours", oursSpread), labelled("peer", peerSpread))
		o.set("x2", oursRes)
		o.set("x2#peer", peerRes)
		return nil
	})
	return nil
}

// labelled turns consumeResult.spread's "; per-consumer ..." into
// "; <side>: per-consumer ...".
func labelled(side, spread string) string {
	if spread == "" {
		return ""
	}
	return "; " + side + ": " + strings.TrimPrefix(spread, "; ")
}

func consumeMeas(res *consumeResult, ph phaseResult) meas {
	mm := newMeas(res.rate())
	mm.p50, mm.p99 = res.fetchLat.PercentileMs(50), res.fetchLat.PercentileMs(99)
	mm.cpu, mm.rss = ph.cpuPerM(res.consumed), ph.rssMiB
	return mm
}
