package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
	"github.com/sharelog/sharelog/bench/internal/verify"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// ---- C3: consumers with processing time, 4 partitions ----

type c3Config struct{ procMs, consumers int }

var c3Configs = []c3Config{{1, 4}, {1, 16}, {1, 64}, {5, 4}, {5, 16}, {5, 64}}

func (c c3Config) key() string { return fmt.Sprintf("c3-%dms-%d", c.procMs, c.consumers) }

const (
	c3Partitions = 4
	c3MaxRecords = 100
	c3ValueSize  = 100
)

func c3Group() group {
	g := group{name: "C3 consumers with processing time", ids: []string{"C3"}, max: 15 * time.Minute}
	for _, c := range c3Configs {
		g.rows = append(g.rows, rowSpec{key: c.key(), id: "C3",
			name: fmt.Sprintf("%d ms per record, 4 partitions, %d consumers", c.procMs, c.consumers), unit: "rec/s",
			dir: report.Custom, ratioLabel: "of consumers×1000/ms", bar: report.AtLeastBar(0.95, "≥ 95% of consumers × 1000 / ms")})
	}
	g.ours = c3Ours
	return g
}

func c3Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	p, c, stop, err := e.startDialed("c3", "--fsync", "never")
	if err != nil {
		return err
	}
	defer stop()
	if err := createTopic(ctx, c, "c3", c3Partitions, 0); err != nil {
		return err
	}
	// Enough records that the fastest configuration never runs dry.
	var need int64
	for _, cfg := range c3Configs {
		need = max(need, int64(float64(cfg.consumers)*1000/float64(cfg.procMs)*e.sz.c3Dur.Seconds()*1.3))
	}
	perPart := need/c3Partitions + 1000
	value := payload(c3ValueSize, 4)
	for part := range int32(c3Partitions) {
		if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: "c3", partition: part, batch: 1000, producers: 1, total: perPart,
			maxDur: 5 * time.Minute, value: value}); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	for _, cfg := range c3Configs {
		o.part([]string{cfg.key()}, func() error {
			m := p.phase()
			processed, maxOff, err := c3Run(ctx, p.grpcAddr, fmt.Sprintf("%s-r%d", cfg.key(), rep), cfg, perPart, e.sz.c3Dur)
			ph := m.done()
			if err != nil {
				return err
			}
			if maxOff >= perPart-1 {
				return fmt.Errorf("a partition ran dry (offset %d of %d): prefill too small", maxOff, perPart)
			}
			rate := float64(processed) / e.sz.c3Dur.Seconds()
			theory := float64(cfg.consumers) * 1000 / float64(cfg.procMs)
			mm := newMeas(rate)
			mm.ratio = rate / theory
			mm.cpu, mm.rss = ph.cpuPerM(processed), ph.rssMiB
			mm.note = fmt.Sprintf("%d records processed in %v (theory %.0f/s); no offset acquired twice, delivery count 1", processed, e.sz.c3Dur, theory)
			o.set(cfg.key(), mm)
			return nil
		})
	}
	return nil
}

// c3Run: each consumer owns one partition (consumer i -> partition i mod 4,
// as the simple assignor would share them), fetches up to 100 records,
// "processes" them at procMs each (one sleep per batch to the exact end of
// its processing, so timer slack does not accumulate), and ACCEPTs them.
// At the end of the window a batch's unprocessed records are RELEASEd.
// Throughput = records whose processing finished inside the window / window.
func c3Run(ctx context.Context, addr, group string, cfg c3Config, perPart int64, dur time.Duration) (int64, int64, error) {
	clients, closeAll, err := dialN(addr, cfg.consumers)
	if err != nil {
		return 0, 0, err
	}
	defer closeAll()
	perPartConsumers := (cfg.consumers + c3Partitions - 1) / c3Partitions
	locks := int32(min(10000, max(100, perPartConsumers*c3MaxRecords)))
	if err := configureGroup(ctx, clients[0], group, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest"), PartitionMaxRecordLocks: &locks}); err != nil {
		return 0, 0, err
	}
	trackers := make([]*verify.Tracker, c3Partitions)
	released := make([]*offsetSet, c3Partitions) // RELEASEd at the end of a window: may come again
	for i := range trackers {
		trackers[i] = verify.NewTracker(0, perPart)
		released[i] = &offsetSet{m: map[int64]bool{}}
	}
	var processed, maxOff atomic.Int64
	var redelivered atomic.Int64
	errs := make([]error, cfg.consumers)
	per := time.Duration(cfg.procMs) * time.Millisecond
	start := time.Now()
	end := start.Add(dur)
	var wg sync.WaitGroup
	for w := range cfg.consumers {
		wg.Go(func() {
			part := int32(w % c3Partitions)
			s := &shareSession{c: clients[w], group: group, member: fmt.Sprintf("%s-m%d", group, w), topic: "c3", partitions: []int32{part}}
			defer s.close(ctx)
			for time.Now().Before(end) {
				wait := int32(min(100, max(1, time.Until(end).Milliseconds())))
				acq, err := s.fetch(ctx, c3MaxRecords, wait, nil)
				if err != nil {
					errs[w] = err
					return
				}
				t0 := time.Now()
				var offs []int64
				for _, a := range acq {
					if a.deliveryCnt != 1 && !released[a.partition].has(a.first) {
						redelivered.Add(a.n())
					}
					for off := a.first; off <= a.last; off++ {
						if !trackers[a.partition].Deliver(off) && !released[a.partition].has(off) {
							errs[w] = fmt.Errorf("partition %d offset %d acquired twice without a RELEASE", a.partition, off)
							return
						}
						offs = append(offs, off)
						for {
							m := maxOff.Load()
							if off <= m || maxOff.CompareAndSwap(m, off) {
								break
							}
						}
					}
				}
				if len(offs) == 0 {
					continue
				}
				finish := t0.Add(time.Duration(len(offs)) * per)
				done := len(offs)
				if finish.After(end) {
					done = int(max(0, end.Sub(t0)/per))
					finish = t0.Add(time.Duration(done) * per)
				}
				time.Sleep(time.Until(finish))
				processed.Add(int64(done))
				types := make([]sharelogv1.AcknowledgeType, len(offs))
				for i := range types {
					types[i] = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT
					if i >= done {
						types[i] = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE
					}
				}
				for i, off := range offs {
					if i >= done {
						released[offPart(acq, i)].add(off)
					}
				}
				if err := s.ack(ctx, perOffsetBatches(acq, types)); err != nil {
					errs[w] = err
					return
				}
				if done < len(offs) {
					return // the window ended inside this batch
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	if r := redelivered.Load(); r > 0 {
		return 0, 0, fmt.Errorf("%d records with delivery_count > 1", r)
	}
	// Duplicates were checked at each acquisition (only RELEASEd records may
	// come again); here only deliveries outside the partitions remain.
	for i, t := range trackers {
		if r := t.Result(); r.OutOfRange != 0 {
			return 0, 0, fmt.Errorf("partition %d: %d deliveries out of range", i, r.OutOfRange)
		}
	}
	return processed.Load(), maxOff.Load(), nil
}

// offsetSet is a concurrent set of offsets.
type offsetSet struct {
	mu sync.Mutex
	m  map[int64]bool
}

func (s *offsetSet) add(off int64) { s.mu.Lock(); s.m[off] = true; s.mu.Unlock() }
func (s *offsetSet) has(off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[off]
}

// offPart is the partition of the i-th offset across acquired ranges.
func offPart(acq []acquired, i int) int32 {
	for _, a := range acq {
		if n := int(a.n()); i < n {
			return a.partition
		} else {
			i -= n
		}
	}
	return -1
}

// perOffsetBatches acknowledges the acquired ranges with one type per
// offset (types in the order of the ranges' offsets).
func perOffsetBatches(acq []acquired, types []sharelogv1.AcknowledgeType) map[int32][]*sharelogv1.AcknowledgementBatch {
	out := map[int32][]*sharelogv1.AcknowledgementBatch{}
	i := 0
	for _, a := range acq {
		n := int(a.n())
		ts := types[i : i+n]
		i += n
		allSame := true
		for _, t := range ts {
			if t != ts[0] {
				allSame = false
				break
			}
		}
		b := &sharelogv1.AcknowledgementBatch{FirstOffset: a.first, LastOffset: a.last}
		if allSame {
			b.AcknowledgeTypes = []sharelogv1.AcknowledgeType{ts[0]}
		} else {
			b.AcknowledgeTypes = append([]sharelogv1.AcknowledgeType(nil), ts...)
		}
		out[a.partition] = append(out[a.partition], b)
	}
	return out
}

// ---- C4: a consumer dies holding 500 locks; 10% RELEASE, 1% REJECT ----

const (
	c4Live  = 3
	c4Dead  = 500
	c4Limit = 5
	c4Locks = 2000
)

// c4Decide is the deterministic fate of one delivery: 1% REJECT, 10%
// RELEASE, else ACCEPT.
type c4Fate int

const (
	fateAccept c4Fate = iota
	fateRelease
	fateReject
)

func c4Decide(off int64, delivery int32) c4Fate {
	h := fnv.New64a()
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(off))
	binary.BigEndian.PutUint32(b[8:], uint32(delivery))
	h.Write(b[:])
	switch v := h.Sum64() % 1000; {
	case v < 10:
		return fateReject
	case v < 110:
		return fateRelease
	default:
		return fateAccept
	}
}

// c4Ledger tracks what happened to every record, from the client's view.
type c4Ledger struct {
	mu         sync.Mutex
	deliveries []int32 // deliveries observed per offset
	final      []int8  // 0 open, 1 accepted, 2 rejected, 3 archived at the limit
	open       int64
	dead       map[int64]bool
	redeliver  map[int64]time.Time // first redelivery of a dead consumer's record
	violations []string
	accepted   int64
	rejected   int64
	archived   int64
	released   int64
}

func newC4Ledger(n int64) *c4Ledger {
	return &c4Ledger{deliveries: make([]int32, n), final: make([]int8, n), open: n, dead: map[int64]bool{}, redeliver: map[int64]time.Time{}}
}

func (l *c4Ledger) violate(format string, args ...any) {
	if len(l.violations) < 10 {
		l.violations = append(l.violations, fmt.Sprintf(format, args...))
	}
}

// deliver records a delivery with the count the server reported and
// returns the fate to acknowledge with.
func (l *c4Ledger) deliver(off int64, count int32, at time.Time, dead bool) c4Fate {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off < 0 || off >= int64(len(l.final)) {
		l.violate("offset %d outside the topic", off)
		return fateAccept
	}
	l.deliveries[off]++
	if l.final[off] != 0 {
		l.violate("offset %d delivered again after it was final (%d)", off, l.final[off])
	}
	if count != l.deliveries[off] {
		l.violate("offset %d: delivery count %d, observed deliveries %d", off, count, l.deliveries[off])
	}
	if count > c4Limit {
		l.violate("offset %d delivered %d times, limit %d", off, count, c4Limit)
	}
	if dead {
		l.dead[off] = true
		return fateAccept // never acknowledged: the consumer dies
	}
	if l.dead[off] {
		if _, ok := l.redeliver[off]; !ok {
			l.redeliver[off] = at
		}
	}
	return c4Decide(off, count)
}

// settle records the outcome of an acknowledged fate.
func (l *c4Ledger) settle(off int64, count int32, f c4Fate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case f == fateAccept:
		l.final[off] = 1
		l.accepted++
	case f == fateReject:
		l.final[off] = 2
		l.rejected++
	case count >= c4Limit: // RELEASE at the limit archives
		l.final[off] = 3
		l.archived++
	default:
		l.released++
		return
	}
	l.open--
}

func (l *c4Ledger) remaining() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// check returns the redelivery delays past the lock (ms) and any violation.
func (l *c4Ledger) check(deadSent time.Time, lock time.Duration) (*stats.Latencies, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.violations) > 0 {
		return nil, fmt.Errorf("C4 violations: %v", l.violations)
	}
	if l.open != 0 {
		return nil, fmt.Errorf("%d records never reached a final state (lost)", l.open)
	}
	if len(l.dead) != c4Dead {
		return nil, fmt.Errorf("the dying consumer held %d records, want %d", len(l.dead), c4Dead)
	}
	lat := &stats.Latencies{}
	for off := range l.dead {
		t, ok := l.redeliver[off]
		if !ok {
			return nil, fmt.Errorf("record %d held by the dead consumer was never redelivered", off)
		}
		lat.Add(t.Sub(deadSent) - lock)
	}
	return lat, nil
}

func (l *c4Ledger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d accepted once, %d rejected, %d archived at the limit, %d releases redelivered; none lost, none past the limit, delivery counts exact",
		l.accepted, l.rejected, l.archived, l.released)
}

func c4Group() group {
	g := group{name: "C4 consumer death, RELEASE and REJECT", ids: []string{"C4"}, max: 10 * time.Minute}
	g.rows = []rowSpec{
		{key: "c4-redeliver", id: "C4", name: "redelivery of a dead consumer's 500 locks, lock 1 s (max delay past expiry)", unit: "ms",
			dir: report.Custom, peer: true, ratioLabel: "ms past expiry (ours max)", ratioAbs: true, bar: report.AtMostBar(100, "redelivery ≤ lock + 100 ms")},
		{key: "c4-rate", id: "C4", name: "records settled per second during the scenario", unit: "rec/s", dir: report.OursOverPeer, peer: true, cpu: true},
	}
	g.ours = c4Ours
	g.peer = c4Peer
	return g
}

func c4Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	n := e.sz.c4Recs
	lock := e.sz.c4Lock
	p, c, stop, err := e.startDialed("c4", "--fsync", "never")
	if err != nil {
		return err
	}
	defer stop()
	if err := createTopic(ctx, c, "c4", 1, 0); err != nil {
		return err
	}
	if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: "c4", batch: 1000, producers: 1, total: n, maxDur: 5 * time.Minute, value: payload(recordSize, 5)}); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	o.part([]string{"c4-redeliver", "c4-rate"}, func() error {
		group := fmt.Sprintf("c4-r%d", rep)
		if err := configureGroup(ctx, c, group, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest"),
			RecordLockDurationMs: ptr(int32(lock.Milliseconds())), DeliveryCountLimit: ptr(int32(c4Limit)),
			PartitionMaxRecordLocks: ptr(int32(c4Locks))}); err != nil {
			return err
		}
		led := newC4Ledger(n)
		m := p.phase()
		t0 := time.Now()
		// The consumer that dies: acquires 500 records and never speaks again
		// (its session stays open until the idle timeout; the locks expire).
		dead := &shareSession{c: c, group: group, member: "dead", topic: "c4", partitions: []int32{0}}
		deadSent := time.Now()
		acq, err := dead.fetch(ctx, c4Dead, 1000, nil)
		if err != nil {
			return err
		}
		for _, a := range acq {
			for off := a.first; off <= a.last; off++ {
				led.deliver(off, a.deliveryCnt, a.receivedTime, true)
			}
		}
		clients, closeAll, err := dialN(p.grpcAddr, c4Live)
		if err != nil {
			return err
		}
		defer closeAll()
		deadline := time.Now().Add(lock + 60*time.Second)
		errs := make([]error, c4Live)
		var wg sync.WaitGroup
		for w := range c4Live {
			wg.Go(func() {
				s := &shareSession{c: clients[w], group: group, member: fmt.Sprintf("live-%d", w), topic: "c4", partitions: []int32{0}}
				defer s.close(ctx)
				for led.remaining() > 0 {
					if time.Now().After(deadline) {
						errs[w] = fmt.Errorf("%d records still open after %v", led.remaining(), time.Since(t0))
						return
					}
					acq, err := s.fetch(ctx, 500, 100, nil)
					if err != nil {
						errs[w] = err
						return
					}
					var types []sharelogv1.AcknowledgeType
					type settle struct {
						off int64
						cnt int32
						f   c4Fate
					}
					var sets []settle
					for _, a := range acq {
						for off := a.first; off <= a.last; off++ {
							f := led.deliver(off, a.deliveryCnt, a.receivedTime, false)
							types = append(types, map[c4Fate]sharelogv1.AcknowledgeType{
								fateAccept:  sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT,
								fateRelease: sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE,
								fateReject:  sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT}[f])
							sets = append(sets, settle{off, a.deliveryCnt, f})
						}
					}
					if len(sets) == 0 {
						continue
					}
					if err := s.ack(ctx, perOffsetBatches(acq, types)); err != nil {
						errs[w] = err
						return
					}
					for _, st := range sets {
						led.settle(st.off, st.cnt, st.f)
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(t0)
		ph := m.done()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		lat, err := led.check(deadSent, lock)
		if err != nil {
			return err
		}
		red := newMeas(lat.PercentileMs(100))
		red.p50, red.p99 = lat.PercentileMs(50), lat.PercentileMs(99)
		red.ratio = red.value
		red.note = led.summary() + " (delay measured from the dying consumer's request send, so it over-counts by up to one round trip)"
		o.set("c4-redeliver", red)
		rate := newMeas(float64(n) / elapsed.Seconds())
		rate.cpu, rate.rss = ph.cpuPerM(n), ph.rssMiB
		o.set("c4-rate", rate)
		return nil
	})
	return nil
}

// c4Peer: the same with a JetStream durable consumer: AckWait = lock,
// MaxDeliver = limit, MaxAckPending = the record-lock limit; RELEASE = Nak(),
// REJECT = Term(). The dying client Fetches 500 messages and closes its
// connection without acking.
func c4Peer(ctx context.Context, e *env, rep int, o *runOut) error {
	n := e.sz.c4Recs
	lock := e.sz.c4Lock
	dir, err := e.dataDir("c4-nats")
	if err != nil {
		return err
	}
	p, err := startNATS(e.natsBin, dir, false)
	if err != nil {
		return err
	}
	defer p.stop()
	nc, js, err := natsConnect(p.natsURL, "admin")
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := createStream(ctx, js, "C4", "c4.x"); err != nil {
		return err
	}
	if _, err := produceNATS(ctx, p.natsURL, produceSpec{topic: "C4", subject: "c4.x", batch: 1000, producers: 1, total: n, maxDur: 5 * time.Minute, value: payload(recordSize, 5)}); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	o.part([]string{"c4-redeliver", "c4-rate"}, func() error {
		if _, err := js.CreateOrUpdateConsumer(ctx, "C4", jetstream.ConsumerConfig{Durable: "c4", AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: lock, MaxDeliver: c4Limit, MaxAckPending: c4Locks, DeliverPolicy: jetstream.DeliverAllPolicy}); err != nil {
			return err
		}
		led := newC4Ledger(n)
		m := p.phase()
		t0 := time.Now()
		dnc, djs, err := natsConnect(p.natsURL, "dead")
		if err != nil {
			return err
		}
		dcons, err := djs.Consumer(ctx, "C4", "c4")
		if err != nil {
			dnc.Close()
			return err
		}
		deadSent := time.Now()
		b, err := dcons.Fetch(c4Dead, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			dnc.Close()
			return err
		}
		for msg := range b.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				dnc.Close()
				return err
			}
			led.deliver(int64(md.Sequence.Stream)-1, int32(md.NumDelivered), time.Now(), true)
		}
		dnc.Close() // the consumer dies
		var herr atomic.Value
		var conns []*nats.Conn
		var ccs []jetstream.ConsumeContext
		defer func() {
			for _, cc := range ccs {
				cc.Stop()
			}
			for _, c := range conns {
				c.Close()
			}
		}()
		done := make(chan struct{})
		var once sync.Once
		for w := range c4Live {
			cn, cjs, err := natsConnect(p.natsURL, fmt.Sprintf("live-%d", w))
			if err != nil {
				return err
			}
			conns = append(conns, cn)
			cons, err := cjs.Consumer(ctx, "C4", "c4")
			if err != nil {
				return err
			}
			cc, err := cons.Consume(func(msg jetstream.Msg) {
				md, err := msg.Metadata()
				if err != nil {
					herr.CompareAndSwap(nil, err)
					return
				}
				off, cnt := int64(md.Sequence.Stream)-1, int32(md.NumDelivered)
				f := led.deliver(off, cnt, time.Now(), false)
				switch f {
				case fateAccept:
					err = msg.Ack()
				case fateRelease:
					err = msg.Nak()
				case fateReject:
					err = msg.Term()
				}
				if err != nil {
					herr.CompareAndSwap(nil, err)
				}
				led.settle(off, cnt, f)
				if led.remaining() == 0 {
					once.Do(func() { close(done) })
				}
			}, jetstream.PullMaxMessages(500))
			if err != nil {
				return err
			}
			ccs = append(ccs, cc)
		}
		select {
		case <-done:
		case <-time.After(lock + 60*time.Second):
			return fmt.Errorf("%d records still open after %v", led.remaining(), time.Since(t0))
		}
		elapsed := time.Since(t0)
		ph := m.done()
		if e := herr.Load(); e != nil {
			return e.(error)
		}
		lat, err := led.check(deadSent, lock)
		if err != nil {
			return err
		}
		red := newMeas(lat.PercentileMs(100))
		red.p50, red.p99 = lat.PercentileMs(50), lat.PercentileMs(99)
		red.note = "peer: " + led.summary()
		o.set("c4-redeliver", red)
		rate := newMeas(float64(n) / elapsed.Seconds())
		rate.cpu, rate.rss = ph.cpuPerM(n), ph.rssMiB
		o.set("c4-rate", rate)
		return nil
	})
	return nil
}
