package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/bench/internal/report"
	"github.com/sharelog/sharelog/bench/internal/stats"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// pacedLoad runs fn from `workers` goroutines, each at interval, until stop
// is closed. Samples carry the send time so windows can be cut afterwards.
type sample struct {
	at  time.Time
	lat time.Duration
}

func pacedLoad(workers int, interval time.Duration, stop <-chan struct{}, fn func(w int) error) ([]sample, error) {
	var mu sync.Mutex
	var all []sample
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			next := time.Now().Add(time.Duration(w) * interval / time.Duration(workers))
			var mine []sample
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				next = next.Add(interval)
				t := time.Now()
				if err := fn(w); err != nil {
					errs[w] = err
					return
				}
				mine = append(mine, sample{t, time.Since(t)})
			}
		})
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b sample) int { return a.at.Compare(b.at) })
	return all, errors.Join(errs...)
}

func window(s []sample, from, to time.Time) *stats.Latencies {
	l := &stats.Latencies{}
	for _, x := range s {
		if !x.at.Before(from) && x.at.Before(to) {
			l.Add(x.lat)
		}
	}
	return l
}

// ---- D1: purge 1M of 1.2M records over ~100 segments while producing ----

const (
	d1Workers  = 4
	d1Interval = 2 * time.Millisecond // per worker: 4 × 500 calls/s × 10 records = 20k rec/s
	d1Batch    = 10
	d1Small    = 5 // one-record purges, idle and under load
)

func d1Group(e *env) group {
	g := group{name: "D1 purge while producing", ids: []string{"D1"}, max: 15 * time.Minute}
	g.rows = []rowSpec{
		{key: "d1-rpc", id: "D1", name: fmt.Sprintf("purge RPC latency, %s of %s records (~100 segments)", report.Human(float64(e.sz.d1Purge)), report.Human(float64(e.sz.d1Total))), unit: "ms",
			dir: report.PeerOverOurs, peer: true, bar: report.AtLeastBar(1, "purge RPC ≤ JetStream purge-to-sequence")},
		{key: "d1-small", id: "D1", name: "purge of many records vs purge of 1 record, both under the same produce load", unit: "ms",
			dir: report.Custom, peer: true, ratioLabel: "large/small purge time", bar: report.AtMostBar(2, "large purge within 2× of a small one")},
		{key: "d1-p99", id: "D1", name: "produce p99 during purge vs baseline (20k rec/s, 10 per call)", unit: "ms p99",
			dir: report.Custom, peer: true, ratioLabel: "during/baseline p99", bar: report.AtMostBar(1.5, "produce p99 during purge ≤ 1.5× baseline")},
	}
	g.ours = d1Ours
	g.peer = d1Peer
	return g
}

func d1Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	total, cut := e.sz.d1Total, e.sz.d1Purge
	p, c, stop, err := e.startDialed("d1", "--fsync", "never")
	if err != nil {
		return err
	}
	defer stop()
	segBytes := max(1024, total*recordSize/100)
	if err := createTopic(ctx, c, "d1", 1, segBytes); err != nil {
		return err
	}
	value := payload(recordSize, 6)
	if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: "d1", batch: 1000, producers: 2, total: total, maxDur: 10 * time.Minute, value: value}); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	o.part([]string{"d1-rpc", "d1-small", "d1-p99"}, func() error {
		purge := func(topic string, off int64) (time.Duration, error) {
			t := time.Now()
			resp, err := c.log.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: topic,
				Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: off}}}}})
			d := time.Since(t)
			if err != nil {
				return 0, classify("LogService.Purge", err)
			}
			pr := resp.GetTopics()[0].GetPartitions()[0]
			if pr.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE || pr.GetLowWatermark() != off {
				return 0, fmt.Errorf("purge %s to %d: %v low_watermark %d %s", topic, off, pr.GetErrorCode(), pr.GetLowWatermark(), pr.GetErrorMessage())
			}
			return d, nil
		}
		// Small purges: 1 record each, on a separate small topic; 5 idle
		// (information) and 5 more under the produce load (the bar).
		if err := createTopic(ctx, c, "d1s", 1, 0); err != nil {
			return err
		}
		if _, err := produceOurs(ctx, p.grpcAddr, produceSpec{topic: "d1s", batch: 20, producers: 1, total: 20, maxDur: time.Minute, value: value}); err != nil {
			return err
		}
		var idle []float64
		for i := int64(1); i <= d1Small; i++ {
			d, err := purge("d1s", i)
			if err != nil {
				return err
			}
			idle = append(idle, float64(d.Microseconds())/1000)
		}
		_, _, segsBefore, err := partitionInfo(ctx, c, "d1", 0)
		if err != nil {
			return err
		}

		clients, closeAll, err := dialN(p.grpcAddr, d1Workers)
		if err != nil {
			return err
		}
		defer closeAll()
		recs := make([]*sharelogv1.Record, d1Batch)
		for i := range recs {
			recs[i] = &sharelogv1.Record{Value: value}
		}
		var produced atomic.Int64
		part := int32(0)
		stop := make(chan struct{})
		type purgeRes struct {
			start, end time.Time
			d          time.Duration
			err        error
		}
		pr := make(chan purgeRes, 1)
		var small []float64
		var smallErr error
		go func() {
			time.Sleep(e.sz.d1Base)
			t := time.Now()
			d, err := purge("d1", cut)
			pr <- purgeRes{t, time.Now(), d, err}
			// The "during" window is purge start .. end + 1 s; the small
			// purges come after it, still under the same load.
			time.Sleep(time.Second + 100*time.Millisecond)
			for i := int64(d1Small + 1); i <= 2*d1Small && smallErr == nil; i++ {
				d, err := purge("d1s", i)
				smallErr = err
				small = append(small, float64(d.Microseconds())/1000)
			}
			time.Sleep(e.sz.d1Base / 2)
			close(stop)
		}()
		m := p.phase()
		t0 := time.Now()
		samples, lerr := pacedLoad(d1Workers, d1Interval, stop, func(w int) error {
			resp, err := clients[w].log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "d1", Partition: &part, Records: recs})
			if err != nil {
				return classify("LogService.Produce", err)
			}
			if len(resp.GetResults()) != d1Batch || resp.GetResults()[0].GetOffset() < total {
				return fmt.Errorf("produce during purge: %d results, first offset %d", len(resp.GetResults()), resp.GetResults()[0].GetOffset())
			}
			produced.Add(d1Batch)
			return nil
		})
		ph := m.done()
		r := <-pr
		if r.err != nil {
			return r.err
		}
		if lerr != nil {
			return lerr
		}
		if smallErr != nil {
			return smallErr
		}
		base := window(samples, t0.Add(200*time.Millisecond), r.start)
		during := window(samples, r.start, r.end.Add(time.Second))
		if base.Len() < 50 || during.Len() < 50 {
			return fmt.Errorf("too few produce samples (baseline %d, during %d)", base.Len(), during.Len())
		}
		if lso, _, _, err := partitionInfo(ctx, c, "d1s", 0); err != nil || lso != 2*d1Small {
			return fmt.Errorf("small purges: log start %d (want %d), %v", lso, 2*d1Small, err)
		}
		// Verify: log start offset moved, reads below it are out of range,
		// every produced record is there, segments are being reclaimed.
		lso, hw, segsAfter, err := partitionInfo(ctx, c, "d1", 0)
		if err != nil {
			return err
		}
		if lso != cut || hw != total+produced.Load() {
			return fmt.Errorf("after purge: log start %d (want %d), high watermark %d (want %d)", lso, cut, hw, total+produced.Load())
		}
		_, ferr := c.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "d1", Partition: 0, Offset: cut - 1, MaxRecords: 1})
		if status.Code(ferr) != codes.OutOfRange {
			return fmt.Errorf("fetch below the log start offset: %v, want OUT_OF_RANGE", ferr)
		}
		rpc := newMeas(float64(r.d.Microseconds()) / 1000)
		rpc.note = fmt.Sprintf("segments %d before, %d ~%.1fs after; log start = %d, reads below it OUT_OF_RANGE, high watermark = prefill + %d produced",
			segsBefore, segsAfter, time.Since(r.end).Seconds(), cut, produced.Load())
		o.set("d1-rpc", rpc)
		sm := newMeas(stats.Summarize(small).Median)
		sm.ratio = rpc.value / sm.value
		sm.note = fmt.Sprintf("large purge %.3f ms vs median of %d one-record purges under the same load %.3f ms (idle, before the load: %.3f ms)",
			rpc.value, d1Small, sm.value, stats.Summarize(idle).Median)
		o.set("d1-small", sm)
		pm := newMeas(during.PercentileMs(99))
		pm.p50, pm.p99 = during.PercentileMs(50), during.PercentileMs(99)
		pm.ratio = during.PercentileMs(99) / base.PercentileMs(99)
		pm.cpu, pm.rss = ph.cpuPerM(produced.Load()), ph.rssMiB
		pm.note = fmt.Sprintf("baseline p50/p99 %.3f/%.3f ms over %d calls; during (purge start .. end+1s) %d calls; %.0f rec/s achieved",
			base.PercentileMs(50), base.PercentileMs(99), base.Len(), during.Len(), float64(produced.Load())/ph.elapsed.Seconds())
		o.set("d1-p99", pm)
		return nil
	})
	return nil
}

func d1Peer(ctx context.Context, e *env, rep int, o *runOut) error {
	total, cut := e.sz.d1Total, e.sz.d1Purge
	dir, err := e.dataDir("d1-nats")
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
	s, err := createStream(ctx, js, "D1", "d1.x")
	if err != nil {
		return err
	}
	value := payload(recordSize, 6)
	if _, err := produceNATS(ctx, p.natsURL, produceSpec{topic: "D1", subject: "d1.x", batch: 1000, producers: 2, total: total, maxDur: 10 * time.Minute, value: value}); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	o.part([]string{"d1-rpc", "d1-small", "d1-p99"}, func() error {
		ss, err := createStream(ctx, js, "D1S", "d1s.x")
		if err != nil {
			return err
		}
		if _, err := produceNATS(ctx, p.natsURL, produceSpec{topic: "D1S", subject: "d1s.x", batch: 20, producers: 1, total: 20, maxDur: time.Minute, value: value}); err != nil {
			return err
		}
		smallPurge := func(i uint64) (float64, error) {
			t := time.Now()
			if err := ss.Purge(ctx, jetstream.WithPurgeSequence(i+1)); err != nil {
				return 0, err
			}
			return float64(time.Since(t).Microseconds()) / 1000, nil
		}
		var idle []float64
		for i := uint64(1); i <= d1Small; i++ {
			d, err := smallPurge(i)
			if err != nil {
				return err
			}
			idle = append(idle, d)
		}
		pubs := make([]jetstream.JetStream, d1Workers)
		for i := range pubs {
			cn, cjs, err := natsConnect(p.natsURL, fmt.Sprintf("d1-pub-%d", i))
			if err != nil {
				return err
			}
			defer cn.Close()
			pubs[i] = cjs
		}
		var produced atomic.Int64
		stop := make(chan struct{})
		type purgeRes struct {
			start, end time.Time
			d          time.Duration
			err        error
		}
		pr := make(chan purgeRes, 1)
		var small []float64
		var smallErr error
		go func() {
			time.Sleep(e.sz.d1Base)
			t := time.Now()
			err := s.Purge(ctx, jetstream.WithPurgeSequence(uint64(cut)+1))
			pr <- purgeRes{t, time.Now(), time.Since(t), err}
			time.Sleep(time.Second + 100*time.Millisecond)
			for i := uint64(d1Small + 1); i <= 2*d1Small && smallErr == nil; i++ {
				var d float64
				d, smallErr = smallPurge(i)
				small = append(small, d)
			}
			time.Sleep(e.sz.d1Base / 2)
			close(stop)
		}()
		m := p.phase()
		t0 := time.Now()
		samples, lerr := pacedLoad(d1Workers, d1Interval, stop, func(w int) error {
			pj := pubs[w]
			futs := make([]jetstream.PubAckFuture, 0, d1Batch)
			for range d1Batch {
				f, err := pj.PublishAsync("d1.x", value)
				if err != nil {
					return err
				}
				futs = append(futs, f)
			}
			select {
			case <-pj.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				return fmt.Errorf("publish acks missing after 30s")
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					return err
				}
			}
			produced.Add(d1Batch)
			return nil
		})
		ph := m.done()
		r := <-pr
		if r.err != nil {
			return r.err
		}
		if lerr != nil {
			return lerr
		}
		if smallErr != nil {
			return smallErr
		}
		base := window(samples, t0.Add(200*time.Millisecond), r.start)
		during := window(samples, r.start, r.end.Add(time.Second))
		if base.Len() < 50 || during.Len() < 50 {
			return fmt.Errorf("too few publish samples (baseline %d, during %d)", base.Len(), during.Len())
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if int64(info.State.FirstSeq) != cut+1 || int64(info.State.LastSeq) != total+produced.Load() {
			return fmt.Errorf("after purge: first seq %d (want %d), last %d (want %d)", info.State.FirstSeq, cut+1, info.State.LastSeq, total+produced.Load())
		}
		rpc := newMeas(float64(r.d.Microseconds()) / 1000)
		o.set("d1-rpc", rpc)
		sm := newMeas(stats.Summarize(small).Median)
		sm.note = fmt.Sprintf("peer: large purge %.3f ms vs median of %d one-message purges under the same load %.3f ms (idle: %.3f ms)",
			rpc.value, d1Small, sm.value, stats.Summarize(idle).Median)
		o.set("d1-small", sm)
		pm := newMeas(during.PercentileMs(99))
		pm.p50, pm.p99 = during.PercentileMs(50), during.PercentileMs(99)
		pm.cpu, pm.rss = ph.cpuPerM(produced.Load()), ph.rssMiB
		pm.note = fmt.Sprintf("peer: baseline p99 %.3f ms, during %.3f ms (ratio %.2f)", base.PercentileMs(99), during.PercentileMs(99), during.PercentileMs(99)/base.PercentileMs(99))
		o.set("d1-p99", pm)
		return nil
	})
	return nil
}

// ---- S3: live tail while producing 20k records/s ----

const (
	s3Workers  = 4
	s3Interval = 2 * time.Millisecond
	s3Batch    = 10
)

func s3Group(e *env) group {
	g := group{name: "S3 live tail", ids: []string{"S3"}, max: 10 * time.Minute}
	g.rows = []rowSpec{
		{key: "s3", id: "S3", name: fmt.Sprintf("produce-ack → delivery, live tail at 20k rec/s for %v (1 KiB, 10 per call)", e.sz.s3Dur), unit: "ms p99",
			dir: report.Custom, peer: true, cpu: true, ratioLabel: "ms (ours p99)", ratioAbs: true, bar: report.AtMostBar(5, "p99 ≤ 5 ms")},
	}
	g.ours = s3Ours
	g.peer = s3Peer
	return g
}

// tailTimes holds per-offset ack and delivery times (ns since t0).
type tailTimes struct {
	t0    time.Time
	ack   []atomic.Int64
	recv  []atomic.Int64
	count atomic.Int64
	bad   atomic.Value
}

func newTailTimes(max int64) *tailTimes {
	return &tailTimes{t0: time.Now(), ack: make([]atomic.Int64, max), recv: make([]atomic.Int64, max)}
}

func (t *tailTimes) now() int64 { return int64(time.Since(t.t0)) + 1 }

func (t *tailTimes) received(off int64) {
	if off < 0 || off >= int64(len(t.recv)) {
		t.bad.CompareAndSwap(nil, fmt.Errorf("delivered offset %d beyond the expected range", off))
		return
	}
	if !t.recv[off].CompareAndSwap(0, t.now()) {
		t.bad.CompareAndSwap(nil, fmt.Errorf("offset %d delivered twice", off))
	}
	t.count.Add(1)
}

func (t *tailTimes) acked(off int64) {
	if off >= 0 && off < int64(len(t.ack)) {
		t.ack[off].Store(t.now())
	}
}

// result checks that every acknowledged offset in [0, n) was delivered and
// returns delivery − ack (negative counts as 0).
func (t *tailTimes) result(n int64) (*stats.Latencies, error) {
	if e := t.bad.Load(); e != nil {
		return nil, e.(error)
	}
	lat := &stats.Latencies{}
	for off := range n {
		a, r := t.ack[off].Load(), t.recv[off].Load()
		if a == 0 {
			return nil, fmt.Errorf("offset %d never acknowledged", off)
		}
		if r == 0 {
			return nil, fmt.Errorf("offset %d acknowledged but never delivered", off)
		}
		lat.Add(time.Duration(max(0, r-a)))
	}
	return lat, nil
}

func (t *tailTimes) waitFor(n int64, d time.Duration) error {
	deadline := time.Now().Add(d)
	for t.count.Load() < n {
		if e := t.bad.Load(); e != nil {
			return e.(error)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tail delivered %d of %d records within %v after the producer stopped", t.count.Load(), n, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func s3Ours(ctx context.Context, e *env, rep int, o *runOut) error {
	p, c, stop, err := e.startDialed("s3", "--fsync", "never")
	if err != nil {
		return err
	}
	defer stop()
	if err := createTopic(ctx, c, "s3", 1, 0); err != nil {
		return err
	}
	o.part([]string{"s3"}, func() error {
		maxN := int64(float64(s3Workers*s3Batch)/s3Interval.Seconds()*e.sz.s3Dur.Seconds()*1.5) + 10000
		tt := newTailTimes(maxN)
		sc, err := dial(p.grpcAddr)
		if err != nil {
			return err
		}
		defer sc.close()
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := sc.cs.StreamChanges(sctx, &sharelogv1.StreamChangesRequest{Topic: "s3", OsoMode: sharelogv1.OsoMode_OSO_MODE_OFF})
		if err != nil {
			return classify("ChangeStreamService.StreamChanges", err)
		}
		recvErr := make(chan error, 1)
		go func() {
			next := int64(0)
			for {
				resp, err := st.Recv()
				if err != nil {
					if sctx.Err() != nil {
						recvErr <- nil
					} else {
						recvErr <- classify("ChangeStreamService.StreamChanges", err)
					}
					return
				}
				for _, ev := range resp.GetEvents() { // a message carries several events
					if mu := ev.GetMutation(); mu != nil {
						if mu.GetOffset() != next {
							tt.bad.CompareAndSwap(nil, fmt.Errorf("tail delivered offset %d, want %d", mu.GetOffset(), next))
						}
						next = mu.GetOffset() + 1
						tt.received(mu.GetOffset())
					}
					if se := ev.GetStreamEnd(); se != nil {
						recvErr <- fmt.Errorf("stream_end %v while tailing", se.GetReason())
						return
					}
				}
			}
		}()
		// An UNIMPLEMENTED stream fails at its first Recv: give it a moment.
		select {
		case err := <-recvErr:
			if err == nil {
				err = errors.New("stream ended")
			}
			return err
		case <-time.After(200 * time.Millisecond):
		}
		clients, closeAll, err := dialN(p.grpcAddr, s3Workers)
		if err != nil {
			return err
		}
		defer closeAll()
		value := payload(recordSize, 8)
		var seq atomic.Int64
		var produced atomic.Int64
		part := int32(0)
		stop := make(chan struct{})
		time.AfterFunc(e.sz.s3Dur, func() { close(stop) })
		m := p.phase()
		_, lerr := pacedLoad(s3Workers, s3Interval, stop, func(w int) error {
			recs := make([]*sharelogv1.Record, s3Batch)
			for i := range recs {
				recs[i] = &sharelogv1.Record{Key: fmt.Appendf(nil, "t/%010d", seq.Add(1)), Value: value}
			}
			resp, err := clients[w].log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "s3", Partition: &part, Records: recs})
			if err != nil {
				return classify("LogService.Produce", err)
			}
			for _, r := range resp.GetResults() {
				tt.acked(r.GetOffset())
			}
			produced.Add(int64(len(recs)))
			return nil
		})
		ph := m.done()
		if lerr != nil {
			return lerr
		}
		n := produced.Load()
		if n > maxN {
			return fmt.Errorf("produced %d > %d tracked", n, maxN)
		}
		if err := tt.waitFor(n, 10*time.Second); err != nil {
			return err
		}
		lat, err := tt.result(n)
		if err != nil {
			return err
		}
		cancel()
		if err := <-recvErr; err != nil {
			return err
		}
		mm := newMeas(lat.PercentileMs(99))
		mm.p50, mm.p99 = lat.PercentileMs(50), lat.PercentileMs(99)
		mm.ratio = mm.p99
		mm.cpu, mm.rss = ph.cpuPerM(n), ph.rssMiB
		mm.note = fmt.Sprintf("%d records (%.0f rec/s achieved) each delivered once, in order", n, float64(n)/ph.elapsed.Seconds())
		o.set("s3", mm)
		return nil
	})
	return nil
}

func s3Peer(ctx context.Context, e *env, rep int, o *runOut) error {
	dir, err := e.dataDir("s3-nats")
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
	s, err := createStream(ctx, js, "S3", "s3.x")
	if err != nil {
		return err
	}
	o.part([]string{"s3"}, func() error {
		maxN := int64(float64(s3Workers*s3Batch)/s3Interval.Seconds()*e.sz.s3Dur.Seconds()*1.5) + 10000
		tt := newTailTimes(maxN)
		cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			md, err := m.Metadata()
			if err != nil {
				tt.bad.CompareAndSwap(nil, err)
				return
			}
			tt.received(int64(md.Sequence.Stream) - 1)
		})
		if err != nil {
			return err
		}
		defer cc.Stop()
		pubs := make([]jetstream.JetStream, s3Workers)
		for i := range pubs {
			cn, cjs, err := natsConnect(p.natsURL, fmt.Sprintf("s3-pub-%d", i))
			if err != nil {
				return err
			}
			defer cn.Close()
			pubs[i] = cjs
		}
		value := payload(recordSize, 8)
		var produced atomic.Int64
		stop := make(chan struct{})
		time.AfterFunc(e.sz.s3Dur, func() { close(stop) })
		m := p.phase()
		_, lerr := pacedLoad(s3Workers, s3Interval, stop, func(w int) error {
			pj := pubs[w]
			futs := make([]jetstream.PubAckFuture, 0, s3Batch)
			for range s3Batch {
				f, err := pj.PublishAsync("s3.x", value)
				if err != nil {
					return err
				}
				futs = append(futs, f)
			}
			select {
			case <-pj.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				return fmt.Errorf("publish acks missing after 30s")
			}
			for _, f := range futs {
				select {
				case a := <-f.Ok():
					tt.acked(int64(a.Sequence) - 1)
				case err := <-f.Err():
					return err
				}
			}
			produced.Add(s3Batch)
			return nil
		})
		ph := m.done()
		if lerr != nil {
			return lerr
		}
		n := produced.Load()
		if err := tt.waitFor(n, 10*time.Second); err != nil {
			return err
		}
		lat, err := tt.result(n)
		if err != nil {
			return err
		}
		mm := newMeas(lat.PercentileMs(99))
		mm.p50, mm.p99 = lat.PercentileMs(50), lat.PercentileMs(99)
		mm.cpu, mm.rss = ph.cpuPerM(n), ph.rssMiB
		mm.note = fmt.Sprintf("peer: %d messages (%.0f msg/s achieved) each delivered once", n, float64(n)/ph.elapsed.Seconds())
		o.set("s3", mm)
		return nil
	})
	return nil
}
