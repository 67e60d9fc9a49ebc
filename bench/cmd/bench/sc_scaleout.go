package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
	"github.com/sharelog/sharelog/bench/internal/verify"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// X4: the per-record cost of scaling out in cluster mode phase 2
// (--cluster-mode partitioned, docs/cluster.md "Phase 2"). Each run starts
// one 3-node NATS cluster and on it, one after the other, 1, 2 and 3
// sharelog instances (each set under its own NATS name prefix, stopped
// before the next starts). Every set gets the same total load: a topic of
// x4Partitions partitions, one producer per partition sending batches of
// x4Batch records of 1 KiB straight to the partition's owner (as
// DescribeCluster names it, the way client/router routes), until
// sizes.x4Records records are acknowledged. The value is the sharelog
// processes' CPU (summed over the instances) per 1M records; the bar row
// compares 3 instances with 1. Two cores cannot show the throughput gain of
// more instances, but they can show that spreading the partitions adds no
// CPU per record. The order of the instance counts alternates between runs
// (1, 2, 3 then 3, 2, 1), so no count always gets the freshest NATS cluster.

const (
	// x4Partitions is divisible by every instance count, so each one gets
	// an even share.
	x4Partitions = 6
	x4Batch      = 100
	x4Topic      = "x4"
	// x4LeaseTTL is the server's default --lease-ttl, not the short quick
	// one the failover row needs: X4 measures no failover, and under the
	// load of a 2-core machine a 2 s lease is more likely to miss a
	// renewal, hand a partition over and fail the run.
	x4LeaseTTL = 5 * time.Second
)

// x4Instances are the instance counts measured; the bar compares the last
// with the first.
var x4Instances = []int{1, 2, 3}

func x4Key(n int) string { return fmt.Sprintf("x4-%d", n) }

// x4ShareKey is the row of the share-consume phase with n instances.
func x4ShareKey(n int) string { return fmt.Sprintf("x4s-%d", n) }

// x4Group is the share group of X4's consume phase.
const x4ShareGroup = "x4-group"

// x4Order is the order of the instance counts in run rep.
func x4Order(rep int) []int {
	order := slices.Clone(x4Instances)
	if rep%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

func x4Group() group {
	g := group{name: "X4 cluster phase 2 scale-out cost", ids: []string{"X4"}, max: 10 * time.Minute}
	for _, n := range x4Instances {
		g.rows = append(g.rows, rowSpec{key: x4Key(n), id: "X4",
			name: fmt.Sprintf("partitioned, %d instance(s), %d partitions: produce 1 KiB, batch %d, %d producers to the owners → sharelog CPU-s per 1M records (information)",
				n, x4Partitions, x4Batch, x4Partitions),
			unit: "CPU-s/1M rec", dir: report.Custom, selfPeer: true, peerName: "(NATS nodes' CPU-s/1M rec)"})
	}
	first, last := x4Instances[0], x4Instances[len(x4Instances)-1]
	g.rows = append(g.rows, rowSpec{key: "x4", id: "X4",
		name: fmt.Sprintf("partitioned: sharelog CPU per record with %d instances vs %d, same total load", last, first),
		unit: "CPU-s/1M rec", dir: report.Custom, selfPeer: true, peerName: fmt.Sprintf("(%d instance)", first),
		ratioLabel: fmt.Sprintf("%d inst./%d inst. CPU", last, first),
		bar:        report.AtMostBar(1.2, fmt.Sprintf("CPU-s per 1M records with %d instances ≤ 1.2 × with %d", last, first))})
	for _, n := range x4Instances {
		g.rows = append(g.rows, rowSpec{key: x4ShareKey(n), id: "X4",
			name: fmt.Sprintf("partitioned, %d instance(s): one share group consumes the %d partitions, one consumer per partition at its owner (share-partitions served by their owners) → sharelog CPU-s per 1M records (information)",
				n, x4Partitions),
			unit: "CPU-s/1M rec", dir: report.Custom, selfPeer: true, peerName: "(NATS nodes' CPU-s/1M rec)"})
	}
	g.rows = append(g.rows, rowSpec{key: "x4s", id: "X4",
		name: fmt.Sprintf("partitioned: sharelog CPU per share-consumed record with %d instances vs %d, one group, same total load (information)", last, first),
		unit: "CPU-s/1M rec", dir: report.Custom, selfPeer: true, peerName: fmt.Sprintf("(%d instance)", first),
		ratioLabel: fmt.Sprintf("%d inst./%d inst. CPU", last, first)})
	g.ours = x4Run
	return g
}

// x4Result is one instance count's measurement.
type x4Result struct {
	acked    int64
	elapsed  time.Duration
	lat      stats.Latencies
	sharelog phaseResult // summed over the instances
	perInst  []string    // each instance's CPU, "a 0.41 s"
	nats     phaseResult // summed over the NATS nodes
	owners   map[int32]string

	// The share-consume phase, after the produce phase: every record
	// once through one group.
	consumed       int64
	consumeElapsed time.Duration
	fetchLat       stats.Latencies
	shareSL        phaseResult
	shareNATS      phaseResult
	sharePerInst   []string
}

func (r *x4Result) rate() float64 { return float64(r.acked) / r.elapsed.Seconds() }

func x4Run(ctx context.Context, e *env, rep int, o *runOut) error {
	keys := []string{"x4", "x4s"}
	for _, n := range x4Instances {
		keys = append(keys, x4Key(n), x4ShareKey(n))
	}
	if e.sz.x4Records <= 0 || e.sz.x4Records%x4Partitions != 0 {
		return fmt.Errorf("X4 needs a positive record count divisible by %d, got %d", x4Partitions, e.sz.x4Records)
	}
	dir, err := e.dataDir("x4-nats")
	if err != nil {
		return err
	}
	nc, err := startNATSCluster(ctx, e.natsBin, dir, clusterSyncAlways)
	if err != nil {
		return err
	}
	defer nc.stop()
	value := payload(recordSize, 14)
	o.part(keys, func() error {
		got := map[int]*x4Result{}
		for _, n := range x4Order(rep) {
			r, err := x4Measure(ctx, e, nc, rep, n, value)
			if err != nil {
				return fmt.Errorf("%d instance(s): %w", n, err)
			}
			got[n] = r
			slm := newMeas(r.sharelog.cpuPerM(r.acked))
			slm.p50, slm.p99 = r.lat.PercentileMs(50), r.lat.PercentileMs(99)
			slm.cpu, slm.rss = slm.value, r.sharelog.rssMiB
			slm.note = fmt.Sprintf("run %d: %d records, %s rec/s, produce p50/p99 %s / %s ms, owners %s; CPU per instance %s; NATS nodes %s CPU-s/1M rec",
				rep+1, r.acked, report.Human(r.rate()), report.Human(slm.p50), report.Human(slm.p99), ownersText(r.owners),
				strings.Join(r.perInst, ", "), report.Human(r.nats.cpuPerM(r.acked)))
			nm := newMeas(r.nats.cpuPerM(r.acked))
			nm.cpu, nm.rss = nm.value, r.nats.rssMiB
			o.set(x4Key(n), slm)
			o.set(x4Key(n)+"#peer", nm)

			sm := newMeas(r.shareSL.cpuPerM(r.consumed))
			sm.p50, sm.p99 = r.fetchLat.PercentileMs(50), r.fetchLat.PercentileMs(99)
			sm.cpu, sm.rss = sm.value, r.shareSL.rssMiB
			sm.note = fmt.Sprintf("run %d: %d records consumed and accepted once each, %s rec/s, fetch p50/p99 %s / %s ms; CPU per instance %s; NATS nodes %s CPU-s/1M rec",
				rep+1, r.consumed, report.Human(float64(r.consumed)/r.consumeElapsed.Seconds()), report.Human(sm.p50), report.Human(sm.p99),
				strings.Join(r.sharePerInst, ", "), report.Human(r.shareNATS.cpuPerM(r.consumed)))
			snm := newMeas(r.shareNATS.cpuPerM(r.consumed))
			snm.cpu, snm.rss = snm.value, r.shareNATS.rssMiB
			o.set(x4ShareKey(n), sm)
			o.set(x4ShareKey(n)+"#peer", snm)
		}
		first, last := got[x4Instances[0]], got[x4Instances[len(x4Instances)-1]]
		m := newMeas(last.sharelog.cpuPerM(last.acked))
		m.cpu, m.rss = m.value, last.sharelog.rssMiB
		m.p50, m.p99 = last.lat.PercentileMs(50), last.lat.PercentileMs(99)
		peer := newMeas(first.sharelog.cpuPerM(first.acked))
		peer.cpu, peer.rss = peer.value, first.sharelog.rssMiB
		peer.p50, peer.p99 = first.lat.PercentileMs(50), first.lat.PercentileMs(99)
		m.ratio = m.value / peer.value
		m.note = fmt.Sprintf("%d NATS nodes (`sync_interval: always`), R%d; sharelog `--store jetstream --cluster-mode partitioned`; %d records per instance count in every run, %d partitions, one producer per partition (batch %d × 1 KiB) calling the partition's owner directly; CPU and RSS: the sum over the sharelog instances (NATS nodes not included); every partition checked for distinct offsets and high watermark = records acknowledged, and ownership unchanged over the measurement",
			clusterNodes, clusterReplicas, e.sz.x4Records, x4Partitions, x4Batch)
		o.set("x4", m)
		o.set("x4#peer", peer)

		sm := newMeas(last.shareSL.cpuPerM(last.consumed))
		sm.cpu, sm.rss = sm.value, last.shareSL.rssMiB
		sm.p50, sm.p99 = last.fetchLat.PercentileMs(50), last.fetchLat.PercentileMs(99)
		speer := newMeas(first.shareSL.cpuPerM(first.consumed))
		speer.cpu, speer.rss = speer.value, first.shareSL.rssMiB
		speer.p50, speer.p99 = first.fetchLat.PercentileMs(50), first.fetchLat.PercentileMs(99)
		sm.ratio = sm.value / speer.value
		sm.note = fmt.Sprintf("after the produce phase, one share group (`auto_offset_reset` earliest) consumes the %d records: one consumer per partition, its share session at the partition's owner (ShareFetch of up to 500 records, then ShareAcknowledge ACCEPT), every record delivered once with delivery count 1; CPU and RSS: the sum over the sharelog instances during that phase",
			e.sz.x4Records)
		o.set("x4s", sm)
		o.set("x4s#peer", speer)
		return nil
	})
	return nil
}

// x4Measure starts n partitioned instances on nc, spreads a fresh topic
// over them and runs the load against the owners; the instances are
// stopped before it returns.
func x4Measure(ctx context.Context, e *env, nc *natsCluster, rep, n int, value []byte) (*x4Result, error) {
	tStart := time.Now()
	cl, err := e.startPartitioned(ctx, fmt.Sprintf("x4-%d", n), nc, fmt.Sprintf("X4R%dN%d", rep, n), n, x4LeaseTTL)
	if err != nil {
		return nil, err
	}
	defer cl.stopMembers()
	clients := map[string]*client{}
	for i, p := range cl.members {
		c, err := dial(p.grpcAddr)
		if err != nil {
			return nil, err
		}
		defer c.close()
		clients[cl.ids[i]] = c
	}
	adm := clients[cl.ids[0]] // the holder of the phase-1 lease serves CreateTopic and DescribeCluster
	if err := retryUnavailable(ctx, 20*time.Second, func() error { return createTopic(ctx, adm, x4Topic, x4Partitions, 0) }); err != nil {
		return nil, err
	}
	owners, err := waitSpread(ctx, adm, x4Topic, x4Partitions, cl.ids, 30*time.Second)
	if err != nil {
		return nil, err
	}
	// An owner serves a partition once it has re-read the stream's ends:
	// until ListOffsets sent to it answers, a Produce could be refused.
	// (Not DescribeTopic: on a partitioned instance it loads every
	// partition of the topic and follows them all from then on, a cost the
	// load would then pay on every instance.)
	for p, id := range owners {
		if hw, err := latestOffset(ctx, clients[id], p, 20*time.Second); err != nil {
			return nil, fmt.Errorf("partition %d at its owner %s: %w", p, id, err)
		} else if hw != 0 {
			return nil, fmt.Errorf("partition %d of the new topic has high watermark %d", p, hw)
		}
	}
	addr := map[string]string{}
	for i, p := range cl.members {
		addr[cl.ids[i]] = p.grpcAddr
	}

	tReady := time.Now()
	perPart := e.sz.x4Records / x4Partitions
	results := make([]*produceResult, x4Partitions)
	errs := make([]error, x4Partitions)
	msl, mnats := phaseOf(cl.members...), phaseOf(nc.nodes...)
	t0 := time.Now()
	var wg sync.WaitGroup
	for p := range int32(x4Partitions) {
		wg.Go(func() {
			results[p], errs[p] = produceOurs(ctx, addr[owners[p]], produceSpec{topic: x4Topic, partition: p, batch: x4Batch, producers: 1,
				total: perPart, maxDur: e.sz.xCap, value: value, noHWCheck: true})
			if errs[p] != nil {
				errs[p] = fmt.Errorf("partition %d (owner %s): %w", p, owners[p], errs[p])
			}
		})
	}
	wg.Wait()
	r := &x4Result{elapsed: time.Since(t0), owners: owners}
	var each []phaseResult
	r.sharelog, each = msl.doneEach()
	r.nats = mnats.done()
	for i, ph := range each {
		r.perInst = append(r.perInst, fmt.Sprintf("%s %.2f s", cl.ids[i], ph.cpu.Seconds()))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for p, res := range results {
		if res.acked != perPart {
			return nil, fmt.Errorf("partition %d: %d of %d records acknowledged within %v: not the same load as the other instance counts", p, res.acked, perPart, e.sz.xCap)
		}
		r.acked += res.acked
		r.lat.Merge(&res.lat)
		// produceOurs checked distinct offsets in [0, perPart); with the
		// high watermark at perPart every acknowledged record is there.
		hw, err := latestOffset(ctx, clients[owners[int32(p)]], int32(p), 20*time.Second)
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", p, err)
		}
		if hw != res.acked {
			return nil, fmt.Errorf("partition %d: high watermark %d != %d records acknowledged", p, hw, res.acked)
		}
	}
	// A partition that changed hands during the load was partly produced
	// through a forward: not the cost this row measures.
	after, err := waitSpread(ctx, adm, x4Topic, x4Partitions, cl.ids, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if moved := movedPartitions(owners, after); len(moved) > 0 {
		return nil, fmt.Errorf("ownership changed during the measurement: %s", strings.Join(moved, ", "))
	}
	if err := x4Consume(ctx, e, cl, nc, clients, adm, owners, perPart, r); err != nil {
		return nil, fmt.Errorf("share-consume phase: %w", err)
	}
	e.logf("  %d instance(s): started and spread in %v, load %v, share-consume %v", n, tReady.Sub(tStart).Round(time.Millisecond),
		r.elapsed.Round(time.Millisecond), r.consumeElapsed.Round(time.Millisecond))
	return r, nil
}

// x4Consume is X4's share-consume phase: one group consumes every record
// of the topic, one consumer per partition whose share session is at the
// partition's owner (as client/shareconsumer and client/router place
// them); each record must be delivered once, with delivery count 1.
func x4Consume(ctx context.Context, e *env, cl *sharelogCluster, nc *natsCluster, clients map[string]*client, adm *client, owners map[int32]string, perPart int64, r *x4Result) error {
	if err := retryUnavailable(ctx, 20*time.Second, func() error {
		return configureGroup(ctx, adm, x4ShareGroup, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest")})
	}); err != nil {
		return err
	}
	msl, mnats := phaseOf(cl.members...), phaseOf(nc.nodes...)
	t0 := time.Now()
	errs := make([]error, x4Partitions)
	got := make([]int64, x4Partitions)
	lats := make([]stats.Latencies, x4Partitions)
	deadline := t0.Add(e.sz.xCap)
	var wg sync.WaitGroup
	for p := range int32(x4Partitions) {
		wg.Go(func() {
			s := &shareSession{c: clients[owners[p]], group: x4ShareGroup, member: fmt.Sprintf("x4-m%d", p), topic: x4Topic, partitions: []int32{p}}
			defer s.close(ctx)
			tr := verify.NewTracker(0, perPart)
			for got[p] < perPart {
				if time.Now().After(deadline) {
					errs[p] = fmt.Errorf("partition %d: consumed %d of %d records within %v", p, got[p], perPart, e.sz.xCap)
					return
				}
				t := time.Now()
				acq, err := s.fetch(ctx, 500, 50, nil)
				if err != nil {
					errs[p] = fmt.Errorf("partition %d at its owner %s: %w", p, owners[p], err)
					return
				}
				lats[p].Add(time.Since(t))
				if len(acq) == 0 {
					continue
				}
				for _, a := range acq {
					if a.deliveryCnt != 1 {
						errs[p] = fmt.Errorf("partition %d: offsets %d..%d delivered with count %d", p, a.first, a.last, a.deliveryCnt)
						return
					}
					for off := a.first; off <= a.last; off++ {
						tr.Deliver(off)
					}
					got[p] += a.n()
				}
				if err := s.ack(ctx, acceptAll(acq)); err != nil {
					errs[p] = fmt.Errorf("partition %d: %w", p, err)
					return
				}
			}
			if err := tr.Result().ExactlyOnce(); err != nil {
				errs[p] = fmt.Errorf("partition %d: %w", p, err)
			}
		})
	}
	wg.Wait()
	r.consumeElapsed = time.Since(t0)
	var each []phaseResult
	r.shareSL, each = msl.doneEach()
	r.shareNATS = mnats.done()
	for i, ph := range each {
		r.sharePerInst = append(r.sharePerInst, fmt.Sprintf("%s %.2f s", cl.ids[i], ph.cpu.Seconds()))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for p := range lats {
		r.fetchLat.Merge(&lats[p])
		r.consumed += got[p]
	}
	return nil
}

// movedPartitions lists the partitions whose owner differs between before
// and after, as "p: a → b".
func movedPartitions(before, after map[int32]string) []string {
	var moved []string
	for p, id := range before {
		if after[p] != id {
			moved = append(moved, fmt.Sprintf("%d: %s → %s", p, id, after[p]))
		}
	}
	for p, id := range after {
		if _, ok := before[p]; !ok {
			moved = append(moved, fmt.Sprintf("%d: none → %s", p, id))
		}
	}
	sort.Strings(moved)
	return moved
}

// ownersText is "a: 0,1,2; b: 3,4,5".
func ownersText(owners map[int32]string) string {
	byID := map[string][]int32{}
	for p, id := range owners {
		byID[id] = append(byID[id], p)
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		ps := byID[id]
		slices.Sort(ps)
		nums := make([]string, len(ps))
		for i, p := range ps {
			nums[i] = fmt.Sprint(p)
		}
		parts = append(parts, id+": "+strings.Join(nums, ","))
	}
	return strings.Join(parts, "; ")
}

// latestOffset is the partition's high watermark as ListOffsets(LATEST)
// answers through c, retried while UNAVAILABLE (the owner may still be
// taking the partition over) for at most within.
func latestOffset(ctx context.Context, c *client, p int32, within time.Duration) (int64, error) {
	var hw int64
	err := retryUnavailable(ctx, within, func() error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := c.log.ListOffsets(cctx, &sharelogv1.ListOffsetsRequest{Topic: x4Topic, Partition: p, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
		hw = resp.GetOffset()
		return err
	})
	return hw, classify("LogService.ListOffsets", err)
}
