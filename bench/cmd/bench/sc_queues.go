package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
	"github.com/sharelog/sharelog/bench/internal/verify"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// ---- C5: a key-ordered share group (docs/queues.md) ----

const (
	c5Partitions = 4
	c5Keys       = 1000
	c5Consumers  = 64
	c5ProcMs     = 1
	c5ValueSize  = 100
)

// c5Config is the consumers' fetch size. With ORDERING_KEY a partition
// has at most one record per key in flight: 250 keys over 16 consumers
// is 15 records each. A consumer that asks for more takes keys the others
// then wait for (the informational row shows what C3's 100 gives).
type c5Config struct {
	fetch  int
	judged bool
}

var c5Configs = []c5Config{
	{fetch: c5Keys / c5Partitions / (c5Consumers / c5Partitions), judged: true},
	{fetch: c3MaxRecords},
}

func (c c5Config) key() string { return fmt.Sprintf("c5-fetch%d", c.fetch) }

func c5Group() group {
	g := group{name: "C5 key-ordered share group", ids: []string{"C5"}, max: 15 * time.Minute}
	for _, c := range c5Configs {
		r := rowSpec{key: c.key(), id: "C5",
			name: fmt.Sprintf("ORDERING_KEY, %d keys, 4 partitions, %d consumers, 1 ms per record, fetch %d", c5Keys, c5Consumers, c.fetch),
			unit: "rec/s", dir: report.Custom, ratioLabel: "of consumers×1000/ms"}
		if c.judged {
			r.bar = report.AtLeastBar(0.90, "≥ 90% of consumers × 1000 / ms, zero order violations")
		} else {
			r.name += " (C3's fetch size: information)"
		}
		g.rows = append(g.rows, r)
	}
	g.ours = c5Ours
	return g
}

// c5Key is the key of offset off of partition part: one of the 250 keys
// of that partition (key k lives in partition k mod 4, as a partitioner
// would put it), spread pseudo-randomly over the offsets.
func c5Key(part int32, off int64) []byte {
	h := fnv.New64a()
	h.Write([]byte(strconv.FormatInt(off, 10)))
	k := int(part) + c5Partitions*int(h.Sum64()%(c5Keys/c5Partitions))
	return []byte(fmt.Sprintf("key-%04d", k))
}

func c5Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	p, c, stop, err := e.startDialed("c5", "--fsync", "never")
	if err != nil {
		return err
	}
	defer stop()
	if err := createTopic(ctx, c, "c5", c5Partitions, 0); err != nil {
		return err
	}
	theory := float64(c5Consumers) * 1000 / c5ProcMs
	perPart := int64(theory*e.sz.c3Dur.Seconds()*1.3)/c5Partitions + 1000
	value := payload(c5ValueSize, 6)
	for part := range int32(c5Partitions) {
		if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: "c5", partition: part, batch: 1000, producers: 1, total: perPart,
			maxDur: 5 * time.Minute, value: value, key: func(i int64) []byte { return c5Key(part, i) }}); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
	}
	for _, cfg := range c5Configs {
		o.part([]string{cfg.key()}, func() error {
			m := p.phase()
			res, err := c5Run(ctx, p.grpcAddr, fmt.Sprintf("%s-r%d", cfg.key(), rep), cfg, perPart, e.sz.c3Dur)
			ph := m.done()
			if err != nil {
				return err
			}
			if res.maxOff >= perPart-1 {
				return fmt.Errorf("a partition ran dry (offset %d of %d): prefill too small", res.maxOff, perPart)
			}
			rate := float64(res.processed) / e.sz.c3Dur.Seconds()
			mm := newMeas(rate)
			mm.ratio = rate / theory
			mm.cpu, mm.rss = ph.cpuPerM(res.processed), ph.rssMiB
			mm.note = fmt.Sprintf("%d records processed in %v (theory %.0f/s), %.1f records per ShareFetch (max %d, ACCEPTs carried by the next ShareFetch); "+
				"checked: per key never two records held at once and accepted offsets increasing (%d keys, %d accepts), no offset acquired twice without a RELEASE",
				res.processed, e.sz.c3Dur, theory, float64(res.records)/float64(max(1, res.fetches)), cfg.fetch, res.keys, res.accepts)
			o.set(cfg.key(), mm)
			return nil
		})
	}
	return nil
}

// keyChecker is the order-violation checker of C5 (and the client view
// of docs/queues.md's guarantee): per key, a record is held from the
// ShareFetch answer that delivered it until its acknowledgement is sent
// (the checker lets go just before the server can), and the ACCEPTed
// offsets of a key increase. A second record of a held key delivered to
// anyone is a violation; so is an ACCEPT of an offset not above the
// key's last accepted one.
type keyChecker struct {
	mu         sync.Mutex
	held       map[pkey]int64
	accepted   map[pkey]int64
	accepts    int64
	violations []string
	nViolated  int64
}

type pkey struct {
	part int32
	key  string
}

func newKeyChecker() *keyChecker {
	return &keyChecker{held: map[pkey]int64{}, accepted: map[pkey]int64{}}
}

func (k *keyChecker) violate(format string, args ...any) {
	k.nViolated++
	if len(k.violations) < 10 {
		k.violations = append(k.violations, fmt.Sprintf(format, args...))
	}
}

// acquire records the records of acq as held.
func (k *keyChecker) acquire(acq []acquired) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, a := range acq {
		for i, key := range a.keys {
			off := a.first + int64(i)
			if key == nil {
				k.violate("partition %d offset %d has no key", a.partition, off)
				continue
			}
			pk := pkey{a.partition, string(key)}
			if h, busy := k.held[pk]; busy {
				k.violate("partition %d key %s: offset %d delivered while %d is held", a.partition, key, off, h)
			}
			k.held[pk] = off
		}
	}
}

// settle lets go of the records of acq, the first `accepted` of them
// (in offset order across the ranges) ACCEPTed; call it before sending
// the acknowledgement.
func (k *keyChecker) settle(acq []acquired, accepted int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, a := range acq {
		for i, key := range a.keys {
			off := a.first + int64(i)
			pk := pkey{a.partition, string(key)}
			if k.held[pk] == off {
				delete(k.held, pk)
			}
			if n < accepted {
				if last, ok := k.accepted[pk]; ok && off <= last {
					k.violate("partition %d key %s: offset %d accepted after %d", a.partition, key, off, last)
				}
				k.accepted[pk] = off
				k.accepts++
			}
			n++
		}
	}
}

func (k *keyChecker) result() (keys int, accepts int64, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.nViolated > 0 {
		return 0, 0, fmt.Errorf("%d order violations: %v", k.nViolated, k.violations)
	}
	return len(k.accepted), k.accepts, nil
}

type c5Result struct {
	processed, maxOff, fetches, records, accepts int64
	keys                                         int
}

// c5Run is C3's loop (consumer i on partition i mod 4, one sleep per batch
// to the end of its processing, the batch's unprocessed records RELEASEd
// when the window ends) on an ORDERING_KEY group, with the ACCEPTs of a
// batch carried by the consumer's next ShareFetch (one round trip per
// batch: a fetch of 15 records is 15 ms of work), and the key checker.
func c5Run(ctx context.Context, addr, group string, cfg c5Config, perPart int64, dur time.Duration) (*c5Result, error) {
	clients, closeAll, err := dialN(addr, c5Consumers)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	ord := sharelogv1.Ordering_ORDERING_KEY
	if err := configureGroup(ctx, clients[0], group, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest"), Ordering: &ord}); err != nil {
		return nil, err
	}
	trackers := make([]*verify.Tracker, c5Partitions)
	released := make([]*offsetSet, c5Partitions)
	for i := range trackers {
		trackers[i] = verify.NewTracker(0, perPart)
		released[i] = &offsetSet{m: map[int64]bool{}}
	}
	chk := newKeyChecker()
	var processed, maxOff, fetches, records, redelivered atomic.Int64
	errs := make([]error, c5Consumers)
	per := time.Duration(c5ProcMs) * time.Millisecond
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range c5Consumers {
		wg.Go(func() {
			part := int32(w % c5Partitions)
			s := &shareSession{c: clients[w], group: group, member: fmt.Sprintf("%s-m%d", group, w), topic: "c5", partitions: []int32{part}}
			defer s.close(ctx)
			var pending map[int32][]*sharelogv1.AcknowledgementBatch
			defer func() {
				if len(pending) > 0 && errs[w] == nil {
					errs[w] = s.ack(ctx, pending)
				}
			}()
			for time.Now().Before(end) {
				wait := int32(min(100, max(1, time.Until(end).Milliseconds())))
				acq, err := s.fetch(ctx, int32(cfg.fetch), wait, pending)
				pending = nil
				if err != nil {
					errs[w] = err
					return
				}
				fetches.Add(1)
				chk.acquire(acq)
				t0 := time.Now()
				var n int
				for _, a := range acq {
					if a.deliveryCnt != 1 && !released[a.partition].has(a.first) {
						redelivered.Add(a.n())
					}
					for off := a.first; off <= a.last; off++ {
						if !trackers[a.partition].Deliver(off) && !released[a.partition].has(off) {
							errs[w] = fmt.Errorf("partition %d offset %d acquired twice without a RELEASE", a.partition, off)
							return
						}
						for {
							m := maxOff.Load()
							if off <= m || maxOff.CompareAndSwap(m, off) {
								break
							}
						}
					}
					n += int(a.n())
				}
				if n == 0 {
					continue
				}
				records.Add(int64(n))
				finish := t0.Add(time.Duration(n) * per)
				done := n
				if finish.After(end) {
					done = int(max(0, end.Sub(t0)/per))
					finish = t0.Add(time.Duration(done) * per)
				}
				time.Sleep(time.Until(finish))
				processed.Add(int64(done))
				chk.settle(acq, done)
				if done == n {
					pending = acceptAll(acq)
					continue
				}
				types := make([]sharelogv1.AcknowledgeType, n)
				i := 0
				for _, a := range acq {
					for off := a.first; off <= a.last; off++ {
						types[i] = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT
						if i >= done {
							types[i] = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE
							released[a.partition].add(off)
						}
						i++
					}
				}
				if err := s.ack(ctx, perOffsetBatches(acq, types)); err != nil {
					errs[w] = err
				}
				return // the window ended inside this batch
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if r := redelivered.Load(); r > 0 {
		return nil, fmt.Errorf("%d records with delivery_count > 1 that were never RELEASEd", r)
	}
	for i, t := range trackers {
		if r := t.Result(); r.OutOfRange != 0 {
			return nil, fmt.Errorf("partition %d: %d deliveries out of range", i, r.OutOfRange)
		}
	}
	keys, accepts, err := chk.result()
	if err != nil {
		return nil, err
	}
	if accepts != processed.Load() {
		return nil, fmt.Errorf("checker saw %d accepts, %d records processed", accepts, processed.Load())
	}
	return &c5Result{processed: processed.Load(), maxOff: maxOff.Load(), fetches: fetches.Load(), records: records.Load(),
		accepts: accepts, keys: keys}, nil
}

// ---- C6: redelivery backoff and delayed delivery accuracy ----

const (
	c6Backoff   = 200 * time.Millisecond // redelivery_backoff_initial_ms
	c6Delay     = 300 * time.Millisecond // sharelog-deliver-at ahead of the produce
	c6Chunk     = 10                     // records released / produced together
	c6Every     = 20 * time.Millisecond  // between chunks
	c6Waiters   = 4
	c6ValueSize = 100
)

func c6Group() group {
	g := group{name: "C6 redelivery backoff and delayed delivery accuracy", ids: []string{"C6"}, max: 10 * time.Minute}
	g.rows = []rowSpec{
		{key: "c6-backoff", id: "C6", name: fmt.Sprintf("redelivery after a %v backoff, a fetch waiting: delivered past the backoff instant (p99)", c6Backoff),
			unit: "ms", dir: report.Custom, ratioLabel: "ms late (p99)", ratioAbs: true, bar: report.AtMostBar(50, "p99 ≤ 50 ms late")},
		{key: "c6-deliver-at", id: "C6", name: fmt.Sprintf("sharelog-deliver-at %v ahead, a fetch waiting: delivered past that time (p99)", c6Delay),
			unit: "ms", dir: report.Custom, ratioLabel: "ms late (p99)", ratioAbs: true, bar: report.AtMostBar(50, "p99 ≤ 50 ms late")},
	}
	g.ours = c6Ours
	return g
}

func c6Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	n := e.sz.c6Recs
	p, c, stop, err := e.startDialed("c6", "--fsync", "never")
	if err != nil {
		return err
	}
	defer stop()
	value := payload(c6ValueSize, 7)
	o.part([]string{"c6-backoff"}, func() error {
		if err := createTopic(ctx, c, "c6b", 1, 0); err != nil {
			return err
		}
		if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: "c6b", batch: 1000, producers: 1, total: n, maxDur: time.Minute, value: value}); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		lat, err := c6BackoffRun(ctx, p.grpcAddr, fmt.Sprintf("c6b-r%d", rep), n)
		if err != nil {
			return err
		}
		mm := newMeas(lat.PercentileMs(99))
		mm.p50, mm.p99, mm.ratio = lat.PercentileMs(50), lat.PercentileMs(99), lat.PercentileMs(99)
		mm.note = fmt.Sprintf("%d records held by one session and RELEASEd %d at a time every %v, redelivered to %d sessions in long polls; late = receipt − (RELEASE sent + %v), so it over-counts by up to one round trip; max %.1f ms; none early, each redelivered once with delivery count 2",
			n, c6Chunk, c6Every, c6Waiters, c6Backoff, lat.PercentileMs(100))
		o.set("c6-backoff", mm)
		return nil
	})
	o.part([]string{"c6-deliver-at"}, func() error {
		if err := createTopic(ctx, c, "c6d", 1, 0); err != nil {
			return err
		}
		lat, err := c6DelayRun(ctx, p.grpcAddr, fmt.Sprintf("c6d-r%d", rep), n, value)
		if err != nil {
			return err
		}
		mm := newMeas(lat.PercentileMs(99))
		mm.p50, mm.p99, mm.ratio = lat.PercentileMs(50), lat.PercentileMs(99), lat.PercentileMs(99)
		mm.note = fmt.Sprintf("%d records produced %d at a time every %v, each with its own sharelog-deliver-at (%v ahead + 2 ms × its place in the batch), consumed by %d sessions in long polls; late = receipt − the header's time; max %.1f ms; none early, each delivered once",
			n, c6Chunk, c6Every, c6Delay, c6Waiters, lat.PercentileMs(100))
		o.set("c6-deliver-at", mm)
		return nil
	})
	return nil
}

// c6Consume runs len(clients) sessions that long-poll topic's partition 0
// and ACCEPT what they get (carried by their next ShareFetch) until n
// records were delivered; every delivery must have delivery count want
// and come once. It returns each offset's receipt time.
func c6Consume(ctx context.Context, clients []*client, group, topic string, n int64, want int32, deadline time.Time, started chan<- struct{}) ([]time.Time, error) {
	recv := make([]time.Time, n)
	var mu sync.Mutex
	var got atomic.Int64
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	for w, cl := range clients {
		ready.Add(1)
		wg.Go(func() {
			s := &shareSession{c: cl, group: group, member: fmt.Sprintf("%s-w%d", group, w), topic: topic, partitions: []int32{0}}
			defer s.close(ctx)
			var pending map[int32][]*sharelogv1.AcknowledgementBatch
			first := true
			for got.Load() < n {
				if time.Now().After(deadline) {
					errs[w] = fmt.Errorf("%d of %d records delivered by %v", got.Load(), n, deadline.Format(time.TimeOnly))
					return
				}
				if first {
					ready.Done()
					first = false
				}
				acq, err := s.fetch(ctx, 500, 200, pending)
				pending = nil
				if err != nil {
					errs[w] = err
					return
				}
				mu.Lock()
				for _, a := range acq {
					for off := a.first; off <= a.last; off++ {
						switch {
						case off < 0 || off >= n:
							err = fmt.Errorf("offset %d outside the topic", off)
						case a.deliveryCnt != want:
							err = fmt.Errorf("offset %d delivered with count %d, want %d", off, a.deliveryCnt, want)
						case !recv[off].IsZero():
							err = fmt.Errorf("offset %d delivered twice", off)
						}
						recv[off] = a.receivedTime
					}
					got.Add(a.n())
				}
				mu.Unlock()
				if err != nil {
					errs[w] = err
					return
				}
				if len(acq) > 0 {
					pending = acceptAll(acq)
				}
			}
			if len(pending) > 0 {
				errs[w] = s.ack(ctx, pending)
			}
		})
	}
	go func() { ready.Wait(); close(started) }()
	wg.Wait()
	return recv, errors.Join(errs...)
}

// c6BackoffRun: one session acquires all n records, then RELEASEs them
// c6Chunk at a time every c6Every; the group's backoff makes each
// acquirable c6Backoff after its release, and the waiting sessions get it.
func c6BackoffRun(ctx context.Context, addr, group string, n int64) (*stats.Latencies, error) {
	clients, closeAll, err := dialN(addr, c6Waiters+1)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	if err := configureGroup(ctx, clients[0], group, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest"),
		RedeliveryBackoffInitialMs: ptr(int32(c6Backoff.Milliseconds())), PartitionMaxRecordLocks: ptr(int32(min(10000, max(100, n))))}); err != nil {
		return nil, err
	}
	holder := &shareSession{c: clients[0], group: group, member: group + "-holder", topic: "c6b", partitions: []int32{0}}
	defer holder.close(ctx)
	var held int64
	for held < n {
		acq, err := holder.fetch(ctx, 500, 1000, nil)
		if err != nil {
			return nil, err
		}
		for _, a := range acq {
			if a.first != held || a.deliveryCnt != 1 {
				return nil, fmt.Errorf("holder acquired %d..%d (count %d), want from %d", a.first, a.last, a.deliveryCnt, held)
			}
			held = a.last + 1
		}
	}
	sent := make([]time.Time, n)
	deadline := time.Now().Add(time.Duration(n/c6Chunk+1)*c6Every + c6Backoff + 30*time.Second)
	started := make(chan struct{})
	var recv []time.Time
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		recv, cerr = c6Consume(ctx, clients[1:], group, "c6b", n, 2, deadline, started)
	}()
	<-started
	time.Sleep(50 * time.Millisecond) // the first long polls reach the server
	t0 := time.Now()
	for i := int64(0); i < n; i += c6Chunk {
		time.Sleep(time.Until(t0.Add(time.Duration(i/c6Chunk) * c6Every)))
		last := min(n, i+c6Chunk) - 1
		now := time.Now()
		for off := i; off <= last; off++ {
			sent[off] = now
		}
		if err := holder.ack(ctx, map[int32][]*sharelogv1.AcknowledgementBatch{0: {{FirstOffset: i, LastOffset: last,
			AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE}}}}); err != nil {
			return nil, err
		}
	}
	<-done
	if cerr != nil {
		return nil, cerr
	}
	lat := &stats.Latencies{}
	for off := range n {
		d := recv[off].Sub(sent[off].Add(c6Backoff))
		if d < 0 {
			return nil, fmt.Errorf("offset %d redelivered %v after its RELEASE was sent, before its %v backoff", off, recv[off].Sub(sent[off]), c6Backoff)
		}
		lat.Add(d)
	}
	return lat, nil
}

// c6DelayRun produces n records c6Chunk at a time every c6Every, record j
// of a batch with sharelog-deliver-at = the batch's send time + c6Delay +
// 2 ms × j, while the waiting sessions consume them.
func c6DelayRun(ctx context.Context, addr, group string, n int64, value []byte) (*stats.Latencies, error) {
	clients, closeAll, err := dialN(addr, c6Waiters+1)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	if err := configureGroup(ctx, clients[0], group, &sharelogv1.ShareGroupConfig{AutoOffsetReset: ptr("earliest")}); err != nil {
		return nil, err
	}
	at := make([]int64, n) // deliver-at of each offset, ms since the epoch
	deadline := time.Now().Add(time.Duration(n/c6Chunk+1)*c6Every + c6Delay + 30*time.Second)
	started := make(chan struct{})
	var recv []time.Time
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		recv, cerr = c6Consume(ctx, clients[1:], group, "c6d", n, 1, deadline, started)
	}()
	<-started
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	part := int32(0)
	var perr error
	for i := int64(0); i < n && perr == nil; i += c6Chunk {
		time.Sleep(time.Until(t0.Add(time.Duration(i/c6Chunk) * c6Every)))
		base := time.Now().Add(c6Delay).UnixMilli()
		var recs []*sharelogv1.Record
		for off := i; off < min(n, i+c6Chunk); off++ {
			at[off] = base + 2*(off-i)
			recs = append(recs, &sharelogv1.Record{Value: value, Headers: []*sharelogv1.RecordHeader{
				{Key: "sharelog-deliver-at", Value: []byte(strconv.FormatInt(at[off], 10))}}})
		}
		resp, err := clients[0].log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "c6d", Partition: &part, Records: recs})
		if err != nil {
			perr = classify("LogService.Produce", err)
			break
		}
		for j, r := range resp.GetResults() {
			if r.GetOffset() != i+int64(j) {
				perr = fmt.Errorf("record %d of the run produced at offset %d", i+int64(j), r.GetOffset())
			}
		}
	}
	if perr != nil {
		return nil, perr // the consumers stop at their deadline
	}
	<-done
	if cerr != nil {
		return nil, cerr
	}
	lat := &stats.Latencies{}
	for off := range n {
		d := recv[off].Sub(time.UnixMilli(at[off]))
		if d < 0 {
			return nil, fmt.Errorf("offset %d delivered %v before its sharelog-deliver-at time", off, -d)
		}
		lat.Add(d)
	}
	return lat, nil
}
