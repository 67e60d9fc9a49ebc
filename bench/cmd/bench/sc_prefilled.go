package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sharelog/sharelog/bench/internal/report"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The C1, C2, S1 and S2 scenarios share one partition of `prefill` records
// of 1 KiB with distinct keys. Record i has key "<g>/<i as 10 digits>" where
// the group letter g is chosen by i mod 1000 so every key prefix is spread
// evenly over the offsets (benchmark S2): "a/" holds 0.1% of the
// records, "b/" 1%, "c/" 5%, "d/" 50%, "e/" the remaining 43.9%; the empty
// prefix is 100%.
func keyGroup(i int64) byte {
	switch r := i % 1000; {
	case r < 1:
		return 'a'
	case r < 11:
		return 'b'
	case r < 61:
		return 'c'
	case r < 561:
		return 'd'
	default:
		return 'e'
	}
}

func dataKey(i int64) []byte { return fmt.Appendf(nil, "%c/%010d", keyGroup(i), i) }

type fraction struct {
	name   string
	prefix []byte // nil = every key
}

var s2Fractions = []fraction{{"0.1%", []byte("a/")}, {"1%", []byte("b/")}, {"5%", []byte("c/")}, {"50%", []byte("d/")}, {"100%", nil}}

// expectedCount is how many of the first n records match prefix.
func expectedCount(prefix []byte, n int64) int64 {
	if len(prefix) == 0 {
		return n
	}
	var c int64
	for i := range int64(1000) {
		if keyGroup(i) == prefix[0] {
			full := n / 1000
			if i < n%1000 {
				full++
			}
			c += full
		}
	}
	return c
}

var c1Consumers = []int{1, 4, 16}

// s2Records is the size of the partition S2 runs on: at least a million
// records also in the quick mode, where the C1/C2/S1 partition is smaller,
// so the OSO and auto bars are judged at the shape they are set for.
func (e *env) s2Records() int64 {
	if e.sz.s2Records > 0 {
		return e.sz.s2Records
	}
	return e.sz.prefill
}

// s2Reps is how many times one S2 measurement runs (the median counts):
// three for the small prefixes, whose times are short and noisy, once for
// the rest and, in the quick mode, once for every ordered scan (it reads
// the whole partition whatever the prefix, so it is long and steady).
func s2Reps(want, total int64, mode sharelogv1.OsoMode, orderedOnce bool) int {
	if want*10 >= total || (orderedOnce && mode == sharelogv1.OsoMode_OSO_MODE_OFF) {
		return 1
	}
	return 3
}

func prefilledGroup(e *env) group {
	g := group{name: "C1/C2/S1/S2 on a prefilled partition", ids: []string{"C1", "C2", "S1", "S2"}, max: 40 * time.Minute}
	for _, dur := range []string{"never", "always"} {
		for _, n := range c1Consumers {
			g.rows = append(g.rows, rowSpec{key: fmt.Sprintf("c1-%s-%d", dur, n), id: "C1",
				name: fmt.Sprintf("ShareFetch 500 + ACCEPT of %s records, %d consumer(s), fsync %s", report.Human(float64(e.sz.prefill)), n, dur),
				unit: "rec/s", dir: report.OursOverPeer, peer: true, cpu: true, bar: report.AtLeastBar(1.5, "≥ 1.5× JetStream pull + explicit ack")})
		}
		g.rows = append(g.rows, rowSpec{key: "c1-" + dur + "-scale", id: "C1", name: "16 consumers vs 4, fsync " + dur,
			unit: "% of 4", dir: report.Custom, peer: true, ratioLabel: "ours 16/4", bar: report.AtLeastBar(0.9, "16 consumers ≥ 90% of 4")})
	}
	for _, dur := range []string{"never", "always"} {
		for _, b := range []int{1, 100} {
			spec := rowSpec{key: fmt.Sprintf("c2-%s-%d", dur, b), id: "C2", name: fmt.Sprintf("ShareAcknowledge round trip of %d record(s), fsync %s", b, dur),
				unit: "ms p50", dir: report.Custom, peer: b == 1}
			if dur == "never" {
				spec.ratioLabel = "ours p50 / null gRPC p50"
				spec.bar = report.AtMostBar(1.5, "p50 ≤ 1.5× null gRPC unary")
			} else {
				spec.ratioLabel = "ours p99 / (fsync p99 + 1 ms)"
				spec.bar = report.AtMostBar(1, "durable: p99 ≤ fsync p99 + 1 ms (reference C2)")
			}
			g.rows = append(g.rows, spec)
		}
	}
	g.rows = append(g.rows, rowSpec{key: "s1", id: "S1", name: fmt.Sprintf("ordered change stream of the whole partition (%s records of 1 KiB)", report.Human(float64(e.sz.prefill))), unit: "rec/s",
		dir: report.OursOverPeer, peer: true, cpu: true, bar: report.AtLeastBar(2, "≥ 2× JetStream ordered consumer replay")})
	for _, f := range s2Fractions {
		bar := report.Bar{}
		if f.name == "1%" {
			bar = report.AtLeastBar(10, "OSO ≥ 10× faster at 1%")
		}
		g.rows = append(g.rows, rowSpec{key: "s2-oso-" + f.name, id: "S2", name: fmt.Sprintf("OSO vs ordered filtered scan, prefix = %s of %s records", f.name, report.Human(float64(e.s2Records()))),
			unit: "ms", dir: report.Custom, selfPeer: true, peerName: "(ordered, self)", ratioLabel: "ordered/OSO time", bar: bar})
	}
	for _, f := range s2Fractions {
		g.rows = append(g.rows, rowSpec{key: "s2-auto-" + f.name, id: "S2", name: "auto vs the faster of OSO and ordered, prefix = " + f.name,
			unit: "ms", dir: report.Custom, selfPeer: true, peerName: "(best, self)", ratioLabel: "auto/best time",
			bar: report.AtMostBar(1.1, "auto ≤ 1.1× the better")})
	}
	g.ours = prefilledOurs
	g.peer = prefilledPeer
	return g
}

func prefilledKeys(prefix string) []string {
	var ks []string
	for _, n := range c1Consumers {
		ks = append(ks, fmt.Sprintf("c1-%s-%d", prefix, n))
	}
	return append(ks, "c1-"+prefix+"-scale")
}

func prefilledOurs(ctx context.Context, e *env, rep int, o *runOut) error {
	n := e.sz.prefill
	dir, err := e.dataDir("prefilled")
	if err != nil {
		return err
	}
	var p *proc
	defer func() { p.stop() }()
	restart := func(args ...string) error {
		if err := p.stop(); err != nil {
			return err
		}
		var err error
		p, err = startSharelog(e.sharelogBin, dir, args...)
		return err
	}
	if p, err = startSharelog(e.sharelogBin, dir, "--fsync", "never"); err != nil {
		return err
	}
	c, err := dial(p.grpcAddr)
	if err != nil {
		return err
	}
	if err := createTopic(ctx, c, "data", 1, 0); err != nil {
		c.close()
		return err
	}
	t0 := time.Now()
	if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: "data", batch: 1000, producers: 2, total: n, maxDur: 10 * time.Minute,
		value: payload(recordSize, 3), key: dataKey}); err != nil {
		c.close()
		return fmt.Errorf("prefill: %w", err)
	}
	c.close()
	e.logf("  prefilled %d records in %v", n, time.Since(t0).Round(time.Millisecond))

	c1 := func(dur string) {
		rates := map[int]float64{}
		for _, k := range c1Consumers {
			key := fmt.Sprintf("c1-%s-%d", dur, k)
			o.part([]string{key}, func() error {
				m := p.phase()
				res, err := c1Ours(ctx, p.grpcAddr, "data", fmt.Sprintf("c1-%s-%d-r%d", dur, k, rep), k, n, e.sz.c1Cap)
				ph := m.done()
				if err != nil {
					return err
				}
				mm := newMeas(res.rate())
				mm.p50, mm.p99 = res.fetchLat.PercentileMs(50), res.fetchLat.PercentileMs(99)
				mm.cpu, mm.rss = ph.cpuPerM(res.consumed), ph.rssMiB
				mm.note = fmt.Sprintf("%d records exactly once, delivery count 1%s; p50/p99 = ShareFetch latency", res.consumed, res.spread())
				o.set(key, mm)
				rates[k] = mm.value
				return nil
			})
		}
		o.part([]string{"c1-" + dur + "-scale"}, func() error {
			if rates[4] == 0 || rates[16] == 0 {
				return fmt.Errorf("4- or 16-consumer run missing")
			}
			m := newMeas(rates[16] / rates[4] * 100)
			m.ratio = rates[16] / rates[4]
			o.set("c1-"+dur+"-scale", m)
			return nil
		})
	}
	c2 := func(dur string) {
		for _, b := range []int{1, 100} {
			key := fmt.Sprintf("c2-%s-%d", dur, b)
			o.part([]string{key}, func() error {
				lat, err := c2Ours(ctx, p.grpcAddr, "data", fmt.Sprintf("c2-%s-%d-r%d", dur, b, rep), b, e.sz.c2Acks)
				if err != nil {
					return err
				}
				m := newMeas(lat.PercentileMs(50))
				m.p50, m.p99 = lat.PercentileMs(50), lat.PercentileMs(99)
				if dur == "never" {
					// The null round trip right now, under the same load.
					null, err := nullP50Now(ctx)
					if err != nil {
						return fmt.Errorf("null gRPC reference: %w", err)
					}
					m.ratio = m.p50 / null
					m.note = fmt.Sprintf("%d acks, every partition answered NONE; null gRPC p50 measured just before: %.3f ms", lat.Len(), null)
				} else {
					m.ratio = m.p99 / (e.fsyncP99 + 1)
					m.note = fmt.Sprintf("%d acks, every partition answered NONE", lat.Len())
				}
				o.set(key, m)
				return nil
			})
		}
	}

	c1("never")
	c2("never")

	var cl *client
	o.part([]string{"s1"}, func() error {
		var err error
		if cl, err = dial(p.grpcAddr); err != nil {
			return err
		}
		m := p.phase()
		var next int64
		var orderErr error
		res, err := streamChanges(ctx, cl, &sharelogv1.StreamChangesRequest{Topic: "data", EndOffset: ptr(n), OsoMode: sharelogv1.OsoMode_OSO_MODE_OFF},
			func(off int64, _ []byte) {
				if off != next && orderErr == nil {
					orderErr = fmt.Errorf("ordered stream delivered offset %d, want %d", off, next)
				}
				next = off + 1
			})
		ph := m.done()
		cl.close()
		if err != nil {
			return err
		}
		if orderErr != nil {
			return orderErr
		}
		if res.items != n || next != n {
			return fmt.Errorf("ordered stream delivered %d records (last %d), want %d", res.items, next-1, n)
		}
		mm := newMeas(float64(n) / res.elapsed.Seconds())
		mm.cpu, mm.rss = ph.cpuPerM(n), ph.rssMiB
		mm.note = fmt.Sprintf("%d records, offsets 0..%d in order, stream_end OK; time from request to stream_end", n, n-1)
		o.set("s1", mm)
		return nil
	})

	type s2m struct {
		oso, ord float64
		hash     [3]*streamResult
	}
	s2 := map[string]*s2m{}
	s2N, s2Topic := n, "data"
	if e.s2Records() != n {
		s2N, s2Topic = e.s2Records(), "s2data"
	}
	measure := func(cl *client, f fraction, mode sharelogv1.OsoMode, wantOSO int) (float64, *streamResult, error) {
		want := expectedCount(f.prefix, s2N)
		reps := s2Reps(want, s2N, mode, e.sz.s2OrderedOnce)
		var times []float64
		var last *streamResult
		for range reps {
			req := &sharelogv1.StreamChangesRequest{Topic: s2Topic, EndOffset: ptr(s2N), OsoMode: mode}
			if f.prefix != nil {
				req.KeyPrefix = f.prefix
			}
			res, err := streamChanges(ctx, cl, req, nil)
			if err != nil {
				return 0, nil, err
			}
			if res.items != want {
				return 0, nil, fmt.Errorf("prefix %q (%s, %v): %d records, want %d", f.prefix, f.name, mode, res.items, want)
			}
			if wantOSO == 1 && !res.oso {
				return 0, nil, fmt.Errorf("--oso-backfill=enabled with %v did not start with an OSO snapshot (key index not ready?)", mode)
			}
			if wantOSO == 0 && res.oso {
				return 0, nil, fmt.Errorf("OSO snapshot with oso_mode OFF")
			}
			times = append(times, float64(res.elapsed.Microseconds())/1000)
			last = res
		}
		slices.Sort(times)
		return times[len(times)/2], last, nil
	}
	s2keys := func(prefix string) []string {
		var ks []string
		for _, f := range s2Fractions {
			ks = append(ks, prefix+f.name)
		}
		return ks
	}
	// OSO and ordered on a restarted server with --oso-backfill=enabled, auto
	// on a restarted server with --oso-backfill=auto: both measured after
	// the same restart, each after one unmeasured warm-up call.
	//
	// The warm-up is an OSO snapshot of the smallest prefix and one ordered
	// scan of the whole partition: without the scan, the auto server made
	// its first full read of the process while measuring (its Go heap and
	// the page cache cold), and every auto row, the ordered ones included,
	// came out 14–42 % slower than the same shape on the other server,
	// whose ordered scans ran between its OSO measurements.
	warm := func(cl *client) error {
		if _, err := streamChanges(ctx, cl, &sharelogv1.StreamChangesRequest{Topic: s2Topic, EndOffset: ptr(s2N),
			OsoMode: sharelogv1.OsoMode_OSO_MODE_ON, KeyPrefix: s2Fractions[0].prefix}, nil); err != nil {
			return err
		}
		_, err := streamChanges(ctx, cl, &sharelogv1.StreamChangesRequest{Topic: s2Topic, EndOffset: ptr(s2N),
			OsoMode: sharelogv1.OsoMode_OSO_MODE_OFF}, nil)
		return err
	}
	s2Run := !(e.sz.s2FirstRunOnly && rep > 0)
	if !s2Run {
		o.skip(append(s2keys("s2-oso-"), s2keys("s2-auto-")...))
	}
	if s2Run && s2Topic != "data" {
		o.part(append(s2keys("s2-oso-"), s2keys("s2-auto-")...), func() error {
			c, err := dial(p.grpcAddr)
			if err != nil {
				return err
			}
			defer c.close()
			if err := createTopic(ctx, c, s2Topic, 1, 0); err != nil {
				return err
			}
			t0 := time.Now()
			if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: s2Topic, batch: 1000, producers: 2, total: s2N, maxDur: 10 * time.Minute,
				value: payload(recordSize, 3), key: dataKey}); err != nil {
				return fmt.Errorf("S2 prefill: %w", err)
			}
			e.logf("  prefilled %d records for S2 in %v", s2N, time.Since(t0).Round(time.Millisecond))
			return nil
		})
	}
	o.part(s2keys("s2-oso-"), func() error {
		if !s2Run || o.errs["s2-oso-"+s2Fractions[0].name] != nil {
			return nil // skipped, or the S2 prefill failed (its error is set)
		}
		if err := restart("--fsync", "never", "--oso-backfill", "enabled"); err != nil {
			return err
		}
		cl, err := dial(p.grpcAddr)
		if err != nil {
			return err
		}
		defer cl.close()
		if err := warm(cl); err != nil {
			return err
		}
		for _, f := range s2Fractions {
			ot, ores, err := measure(cl, f, sharelogv1.OsoMode_OSO_MODE_ON, 1)
			if err != nil {
				return err
			}
			rt, rres, err := measure(cl, f, sharelogv1.OsoMode_OSO_MODE_OFF, 0)
			if err != nil {
				return err
			}
			if !ores.hash.Equal(&rres.hash) {
				return fmt.Errorf("prefix %s: OSO and ordered give different key→offset maps (both must agree on the latest offset of every key)", f.name)
			}
			s2[f.name] = &s2m{oso: ot, ord: rt, hash: [3]*streamResult{ores, rres}}
			m := newMeas(ot)
			m.ratio = rt / ot
			m.note = fmt.Sprintf("%d records; OSO map = ordered map", ores.items)
			o.set("s2-oso-"+f.name, m)
			o.set("s2-oso-"+f.name+"#peer", newMeas(rt))
		}
		return nil
	})

	// S2 auto on a restarted server with --oso-backfill=auto.
	o.part(s2keys("s2-auto-"), func() error {
		if !s2Run || o.errs["s2-auto-"+s2Fractions[0].name] != nil {
			return nil
		}
		if err := restart("--fsync", "never", "--oso-backfill", "auto"); err != nil {
			return err
		}
		cl, err := dial(p.grpcAddr)
		if err != nil {
			return err
		}
		defer cl.close()
		if err := warm(cl); err != nil {
			return err
		}
		var choices []string
		for _, f := range s2Fractions {
			prev := s2[f.name]
			if prev == nil {
				if err := o.errs["s2-oso-"+f.name]; err != nil {
					return err // the same cause (e.g. UNIMPLEMENTED)
				}
				return fmt.Errorf("OSO/ordered measurement of %s missing", f.name)
			}
			at, ares, err := measure(cl, f, sharelogv1.OsoMode_OSO_MODE_ON, -1)
			if err != nil {
				return err
			}
			if !ares.hash.Equal(&prev.hash[0].hash) {
				return fmt.Errorf("prefix %s: auto gives a different key→offset map than OSO/ordered", f.name)
			}
			best := min(prev.oso, prev.ord)
			m := newMeas(at)
			m.ratio = at / best
			shape := "ordered"
			if ares.oso {
				shape = "OSO"
			}
			choices = append(choices, f.name+"→"+shape)
			m.note = "auto chose " + shape
			o.set("s2-auto-"+f.name, m)
			o.set("s2-auto-"+f.name+"#peer", newMeas(best))
		}
		e.logf("  S2 auto choices: %v", choices)
		return nil
	})

	// The durable pairing: the same data, --fsync always.
	if err := restart("--fsync", "always"); err != nil {
		o.fail(append(prefilledKeys("always"), "c2-always-1", "c2-always-100"), err)
		return nil
	}
	c1("always")
	c2("always")
	return p.alive()
}

func prefilledPeer(ctx context.Context, e *env, rep int, o *runOut) error {
	n := e.sz.prefill
	dir, err := e.dataDir("prefilled-nats")
	if err != nil {
		return err
	}
	var p *proc
	defer func() { p.stop() }()
	if p, err = startNATS(e.natsBin, dir, false); err != nil {
		return err
	}
	nc, js, err := natsConnect(p.natsURL, "admin")
	if err != nil {
		return err
	}
	if _, err := createStream(ctx, js, "DATA", "data.>"); err != nil {
		nc.Close()
		return err
	}
	nc.Close()
	t0 := time.Now()
	if _, err := produceNATS(ctx, p.natsURL, produceSpec{topic: "DATA", subject: "data.x", batch: 1000, producers: 2, total: n,
		maxDur: 10 * time.Minute, value: payload(recordSize, 3)}); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	e.logf("  prefilled %d messages in %v", n, time.Since(t0).Round(time.Millisecond))

	c1 := func(dur string) {
		rates := map[int]float64{}
		for _, k := range c1Consumers {
			key := fmt.Sprintf("c1-%s-%d", dur, k)
			o.part([]string{key}, func() error {
				m := p.phase()
				res, err := c1Peer(ctx, p.natsURL, "DATA", fmt.Sprintf("c1_%s_%d", dur, k), k, n, e.sz.c1Cap)
				ph := m.done()
				if err != nil {
					return err
				}
				mm := newMeas(res.rate())
				mm.cpu, mm.rss = ph.cpuPerM(res.consumed), ph.rssMiB
				mm.note = fmt.Sprintf("peer: %d messages exactly once%s", res.consumed, res.spread())
				o.set(key, mm)
				rates[k] = mm.value
				return nil
			})
		}
		o.part([]string{"c1-" + dur + "-scale"}, func() error {
			if rates[4] == 0 || rates[16] == 0 {
				return fmt.Errorf("4- or 16-consumer run missing")
			}
			o.set("c1-"+dur+"-scale", newMeas(rates[16]/rates[4]*100))
			return nil
		})
	}
	c2 := func(dur string) {
		o.part([]string{"c2-" + dur + "-1"}, func() error {
			lat, err := c2Peer(ctx, p.natsURL, "DATA", "c2_"+dur, e.sz.c2Acks)
			if err != nil {
				return err
			}
			m := newMeas(lat.PercentileMs(50))
			m.p50, m.p99 = lat.PercentileMs(50), lat.PercentileMs(99)
			m.note = "peer: JetStream DoubleAck of 1 message"
			o.set("c2-"+dur+"-1", m)
			return nil
		})
	}
	c1("never")
	c2("never")
	o.part([]string{"s1"}, func() error {
		m := p.phase()
		d, err := orderedReplayPeer(ctx, p.natsURL, "DATA", n, 10*time.Minute)
		ph := m.done()
		if err != nil {
			return err
		}
		mm := newMeas(float64(n) / d.Seconds())
		mm.cpu, mm.rss = ph.cpuPerM(n), ph.rssMiB
		o.set("s1", mm)
		return nil
	})
	if err := p.stop(); err != nil {
		return err
	}
	if p, err = startNATS(e.natsBin, dir, true); err != nil {
		o.fail(append(prefilledKeys("always"), "c2-always-1"), err)
		return nil
	}
	c1("always")
	c2("always")
	return nil
}
