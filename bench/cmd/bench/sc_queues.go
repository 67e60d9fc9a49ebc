package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
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

// c5Config is how the consumers fetch. With ORDERING_KEY a partition has
// at most one record per key in flight: 250 keys over 16 consumers is 15
// records each (hold). A consumer that holds more takes keys the others
// then wait for (the informational row with C3's 100 shows what it costs).
//
// The judged row is a consumer that fetches ahead, as Kafka's share
// consumers do: it holds at most 15 records and asks for more, carrying
// the ACCEPTs of what it has finished, while it works what it has, so its
// worker does not wait for a round trip. The batch rows are C3's loop
// (fetch, work the batch, ACCEPT with the next fetch): their ratio
// includes one round trip per batch.
type c5Config struct {
	hold   int
	ahead  bool
	judged bool
}

var c5Configs = []c5Config{
	{hold: c5Keys / c5Partitions / (c5Consumers / c5Partitions), ahead: true, judged: true},
	{hold: c5Keys / c5Partitions / (c5Consumers / c5Partitions)},
	{hold: c3MaxRecords},
}

func (c c5Config) key() string {
	if c.ahead {
		return fmt.Sprintf("c5-ahead%d", c.hold)
	}
	return fmt.Sprintf("c5-fetch%d", c.hold)
}

func (c c5Config) String() string {
	if c.ahead {
		return fmt.Sprintf("at most %d held, fetching while it works", c.hold)
	}
	return fmt.Sprintf("batches of %d, ACCEPTs with the next fetch", c.hold)
}

func c5Group() group {
	g := group{name: "C5 key-ordered share group", ids: []string{"C5"}, max: 15 * time.Minute}
	for _, c := range c5Configs {
		r := rowSpec{key: c.key(), id: "C5",
			name: fmt.Sprintf("ORDERING_KEY, %d keys, 4 partitions, %d consumers, 1 ms per record, %v", c5Keys, c5Consumers, c),
			unit: "rec/s", dir: report.Custom, ratioLabel: "of consumers×1000/ms"}
		if c.judged {
			r.bar = report.AtLeastBar(0.90, "≥ 90% of consumers × 1000 / ms, zero order violations")
		} else {
			r.name += " (information)"
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
			mm.note = fmt.Sprintf("%d records processed in %v (theory %.0f/s), %.1f records per ShareFetch (%v); "+
				"checked: per key never two records held at once and accepted offsets increasing (%d keys, %d accepts), no offset acquired twice without a RELEASE",
				res.processed, e.sz.c3Dur, theory, float64(res.records)/float64(max(1, res.fetches)), cfg, res.keys, res.accepts)
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

// c5State is what C5's consumers share: the checks of every delivery
// and the counters.
type c5State struct {
	trackers                                         []*verify.Tracker
	released                                         []*offsetSet
	chk                                              *keyChecker
	processed, maxOff, fetches, records, redelivered atomic.Int64
}

// deliver checks one ShareFetch answer (no offset acquired twice without
// a RELEASE, no redelivery of a record never RELEASEd, the key checker)
// and returns its record count.
func (st *c5State) deliver(acq []acquired) (int, error) {
	st.fetches.Add(1)
	st.chk.acquire(acq)
	n := 0
	for _, a := range acq {
		if a.deliveryCnt != 1 && !st.released[a.partition].has(a.first) {
			st.redelivered.Add(a.n())
		}
		for off := a.first; off <= a.last; off++ {
			if !st.trackers[a.partition].Deliver(off) && !st.released[a.partition].has(off) {
				return 0, fmt.Errorf("partition %d offset %d acquired twice without a RELEASE", a.partition, off)
			}
			for {
				m := st.maxOff.Load()
				if off <= m || st.maxOff.CompareAndSwap(m, off) {
					break
				}
			}
		}
		n += int(a.n())
	}
	st.records.Add(int64(n))
	return n, nil
}

// finish acknowledges what a consumer holds when the window ends: the
// worked records ACCEPTed, the rest RELEASEd, after the key checker lets
// go of them.
func (st *c5State) finish(ctx context.Context, s *shareSession, worked, rest []acquired) error {
	st.chk.settle(worked, len(worked))
	st.chk.settle(rest, 0)
	type rec struct {
		a  acquired
		ok bool
	}
	var all []rec
	for _, a := range worked {
		all = append(all, rec{a, true})
	}
	for _, a := range rest {
		all = append(all, rec{a, false})
		for off := a.first; off <= a.last; off++ {
			st.released[a.partition].add(off)
		}
	}
	if len(all) == 0 {
		return nil
	}
	slices.SortFunc(all, func(x, y rec) int { return cmpAcquired(x.a, y.a) }) // acknowledgement batches ascend
	acq := make([]acquired, 0, len(all))
	var types []sharelogv1.AcknowledgeType
	for _, r := range all {
		acq = append(acq, r.a)
		t := sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE
		if r.ok {
			t = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT
		}
		for range r.a.n() {
			types = append(types, t)
		}
	}
	return s.ack(ctx, perOffsetBatches(acq, types))
}

// c5Run runs C5's consumers (consumer i on partition i mod 4) for dur on
// an ORDERING_KEY group, with the key checker, in cfg's way.
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
	st := &c5State{trackers: make([]*verify.Tracker, c5Partitions), released: make([]*offsetSet, c5Partitions), chk: newKeyChecker()}
	for i := range st.trackers {
		st.trackers[i] = verify.NewTracker(0, perPart)
		st.released[i] = &offsetSet{m: map[int64]bool{}}
	}
	errs := make([]error, c5Consumers)
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range c5Consumers {
		wg.Go(func() {
			s := &shareSession{c: clients[w], group: group, member: fmt.Sprintf("%s-m%d", group, w), topic: "c5",
				partitions: []int32{int32(w % c5Partitions)}}
			defer s.close(ctx)
			if cfg.ahead {
				errs[w] = st.consumeAhead(ctx, s, cfg.hold, end)
			} else {
				errs[w] = st.consumeBatches(ctx, s, cfg.hold, end)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if r := st.redelivered.Load(); r > 0 {
		return nil, fmt.Errorf("%d records with delivery_count > 1 that were never RELEASEd", r)
	}
	for i, t := range st.trackers {
		if r := t.Result(); r.OutOfRange != 0 {
			return nil, fmt.Errorf("partition %d: %d deliveries out of range", i, r.OutOfRange)
		}
	}
	keys, accepts, err := st.chk.result()
	if err != nil {
		return nil, err
	}
	if accepts != st.processed.Load() {
		return nil, fmt.Errorf("checker saw %d accepts, %d records processed", accepts, st.processed.Load())
	}
	return &c5Result{processed: st.processed.Load(), maxOff: st.maxOff.Load(), fetches: st.fetches.Load(), records: st.records.Load(),
		accepts: accepts, keys: keys}, nil
}

// one returns acq split into one acquired per record.
func one(acq []acquired) []acquired {
	var out []acquired
	for _, a := range acq {
		for i, k := range a.keys {
			off := a.first + int64(i)
			out = append(out, acquired{partition: a.partition, first: off, last: off, deliveryCnt: a.deliveryCnt, keys: [][]byte{k}})
		}
	}
	return out
}

// consumeBatches is C3's loop: fetch up to hold records, sleep to the end
// of their processing, ACCEPT them with the next fetch (one round trip per
// batch); the records unprocessed when the window ends are RELEASEd.
func (st *c5State) consumeBatches(ctx context.Context, s *shareSession, hold int, end time.Time) error {
	per := time.Duration(c5ProcMs) * time.Millisecond
	var pending map[int32][]*sharelogv1.AcknowledgementBatch
	for time.Now().Before(end) {
		wait := int32(min(100, max(1, time.Until(end).Milliseconds())))
		acq, err := s.fetch(ctx, int32(hold), wait, pending)
		pending = nil
		if err != nil {
			return err
		}
		t0 := time.Now()
		n, err := st.deliver(acq)
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		finish := t0.Add(time.Duration(n) * per)
		done := n
		if finish.After(end) {
			done = int(max(0, end.Sub(t0)/per))
			finish = t0.Add(time.Duration(done) * per)
		}
		time.Sleep(time.Until(finish))
		st.processed.Add(int64(done))
		if done < n { // the window ended inside this batch
			recs := one(acq)
			return st.finish(ctx, s, recs[:done], recs[done:])
		}
		st.chk.settle(acq, done)
		pending = acceptAll(acq)
	}
	if len(pending) == 0 {
		return nil
	}
	return s.ack(ctx, pending)
}

// consumeAhead is a consumer that fetches ahead: a worker takes what has
// arrived and works it (1 ms a record, on a schedule so that sleep
// overshoot does not add up) while the fetcher already asks for the next
// records, carrying the ACCEPTs of what the worker finished, so the worker
// does not wait for a round trip; the consumer never holds more than hold.
// Records not worked when the window ends are RELEASEd.
func (st *c5State) consumeAhead(ctx context.Context, s *shareSession, hold int, end time.Time) error {
	per := time.Duration(c5ProcMs) * time.Millisecond
	var (
		mu          sync.Mutex
		cond        = sync.NewCond(&mu)
		queue, done []acquired // one record each: arrived, not started; worked, not yet ACCEPTed
		busy        int        // records the worker is working
		stop        bool
	)
	worker := make(chan struct{})
	go func() {
		defer close(worker)
		next := time.Now()
		for {
			mu.Lock()
			for len(queue) == 0 && !stop {
				cond.Wait()
			}
			if stop {
				mu.Unlock()
				return
			}
			work := queue
			queue, busy = nil, len(work)
			mu.Unlock()
			cond.Broadcast()
			if now := time.Now(); next.Before(now) {
				next = now
			}
			n := len(work)
			if left := end.Sub(next); left < time.Duration(n)*per {
				n = int(max(0, left/per))
			}
			next = next.Add(time.Duration(n) * per)
			time.Sleep(time.Until(next))
			st.processed.Add(int64(n))
			mu.Lock()
			done, busy = append(done, work[:n]...), 0
			if n < len(work) { // the window ended
				queue, stop = append(work[n:], queue...), true
			}
			mu.Unlock()
			cond.Broadcast()
		}
	}()
	var err error
	for err == nil {
		mu.Lock()
		for len(queue) > 0 && !stop {
			cond.Wait()
		}
		if stop || !time.Now().Before(end) {
			mu.Unlock()
			break
		}
		acks := done
		done = nil
		held := busy
		mu.Unlock()
		st.chk.settle(acks, len(acks))
		slices.SortFunc(acks, cmpAcquired) // acknowledgement batches ascend
		wait := max(1, time.Until(end).Milliseconds())
		if held > 0 {
			wait = min(wait, int64(held)*c5ProcMs) // come back with the worker's ACCEPTs
		}
		var acq []acquired
		// Half the keys for the batch being worked, half for the next.
		ask := min(hold-held, (hold+1)/2)
		acq, err = s.fetch(ctx, int32(ask), int32(min(100, wait)), acceptAll(acks))
		if err != nil {
			break
		}
		if _, err = st.deliver(acq); err != nil {
			break
		}
		mu.Lock()
		queue = append(queue, one(acq)...)
		mu.Unlock()
		cond.Broadcast()
	}
	mu.Lock()
	stop = true
	mu.Unlock()
	cond.Broadcast()
	<-worker
	if err != nil {
		return err
	}
	return st.finish(ctx, s, done, queue)
}

// cmpAcquired orders acquired ranges by partition, then offset.
func cmpAcquired(a, b acquired) int {
	return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.first, b.first))
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

// c6Start runs c6Consume in the background and returns once its first
// long polls have reached the server; wait returns what it returned.
func c6Start(ctx context.Context, clients []*client, group, topic string, n int64, want int32, deadline time.Time) (wait func() ([]time.Time, error)) {
	started := make(chan struct{})
	done := make(chan struct{})
	var recv []time.Time
	var err error
	go func() {
		defer close(done)
		recv, err = c6Consume(ctx, clients, group, topic, n, want, deadline, started)
	}()
	<-started
	time.Sleep(50 * time.Millisecond) // the first long polls reach the server
	return func() ([]time.Time, error) {
		<-done
		return recv, err
	}
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
	wait := c6Start(ctx, clients[1:], group, "c6b", n, 2, deadline)
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
	recv, err := wait()
	if err != nil {
		return nil, err
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
	wait := c6Start(ctx, clients[1:], group, "c6d", n, 1, deadline)
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
	recv, err := wait()
	if err != nil {
		return nil, err
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
