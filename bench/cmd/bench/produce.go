package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sharelog/sharelog/bench/internal/stats"
	"github.com/sharelog/sharelog/bench/internal/verify"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// produceSpec describes one produce load: `producers` goroutines, each with
// its own connection, sending batches of `batch` records until `total`
// records were acknowledged or `maxDur` passed.
type produceSpec struct {
	topic     string // sharelog topic / NATS stream
	subject   string // NATS subject
	partition int32  // sharelog partition
	batch     int
	producers int
	total     int64
	maxDur    time.Duration
	value     []byte
	key       func(i int64) []byte // nil = keyless
	// noHWCheck: the caller checks the high watermark itself, after its
	// measurement window (X4: DescribeTopic on a partitioned instance
	// loads, and from then on follows, every partition of the topic).
	noHWCheck bool
}

// produceResult is what a produce load achieved.
type produceResult struct {
	acked   int64
	elapsed time.Duration
	lat     stats.Latencies // per call (sharelog) or per batch window (NATS)
}

func (r *produceResult) rate() float64 { return float64(r.acked) / r.elapsed.Seconds() }

// claimer hands out record index ranges up to a total.
type claimer struct {
	next  atomic.Int64
	total int64
}

func (c *claimer) claim(n int) (start int64, got int) {
	s := c.next.Add(int64(n)) - int64(n)
	if s >= c.total {
		return s, 0
	}
	if rem := c.total - s; rem < int64(n) {
		n = int(rem)
	}
	return s, n
}

// produceOurs runs the load against partition spec.partition of spec.topic,
// which must be empty, and verifies that every acknowledged record got a
// distinct offset and that the high watermark equals the acknowledged count.
func produceOurs(ctx context.Context, addr string, spec produceSpec) (*produceResult, error) {
	clients, closeAll, err := dialN(addr, spec.producers)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	tr := verify.NewTracker(0, spec.total)
	cl := &claimer{total: spec.total}
	var acked atomic.Int64
	lats := make([]stats.Latencies, spec.producers)
	errs := make([]error, spec.producers)
	deadline := time.Now().Add(spec.maxDur)
	part := spec.partition
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range spec.producers {
		wg.Go(func() {
			c := clients[w]
			for time.Now().Before(deadline) && ctx.Err() == nil {
				start, n := cl.claim(spec.batch)
				if n == 0 {
					return
				}
				recs := make([]*sharelogv1.Record, n)
				for i := range recs {
					r := &sharelogv1.Record{Value: spec.value}
					if spec.key != nil {
						r.Key = spec.key(start + int64(i))
					}
					recs[i] = r
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				t := time.Now()
				resp, err := c.log.Produce(cctx, &sharelogv1.ProduceRequest{Topic: spec.topic, Partition: &part, Records: recs})
				d := time.Since(t)
				cancel()
				if err != nil {
					errs[w] = classify("LogService.Produce", err)
					return
				}
				lats[w].Add(d)
				res := resp.GetResults()
				if len(res) != n {
					errs[w] = fmt.Errorf("produce of %d records answered %d results", n, len(res))
					return
				}
				for i, r := range res {
					if r.GetPartition() != part || r.GetOffset() != res[0].GetOffset()+int64(i) {
						errs[w] = fmt.Errorf("produce results not contiguous in partition %d: %v", part, r)
						return
					}
					if !tr.Deliver(r.GetOffset()) {
						errs[w] = fmt.Errorf("offset %d assigned twice (or beyond %d)", r.GetOffset(), spec.total)
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
		return nil, fmt.Errorf("no record acknowledged within %v", spec.maxDur)
	}
	if !spec.noHWCheck {
		_, hw, _, err := partitionInfo(ctx, clients[0], spec.topic, part)
		if err != nil {
			return nil, err
		}
		if hw != res.acked {
			return nil, fmt.Errorf("high watermark %d != %d records acknowledged", hw, res.acked)
		}
	}
	r := tr.Result()
	if r.Delivered != res.acked || r.Duplicates != 0 || r.OutOfRange != 0 {
		return nil, fmt.Errorf("offsets: %+v for %d acknowledged", r, res.acked)
	}
	return res, nil
}

// natsConnect opens one connection with the client's defaults.
func natsConnect(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// createStream makes a file-storage stream with default limits.
func createStream(ctx context.Context, js jetstream.JetStream, name string, subjects ...string) (jetstream.Stream, error) {
	return js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage})
}

// produceNATS runs the same load as JetStream async publishes: each batch is
// a window of `batch` PublishAsync calls followed by PublishAsyncComplete.
// It verifies distinct sequences and the stream's message count.
func produceNATS(ctx context.Context, url string, spec produceSpec) (*produceResult, error) {
	type pub struct {
		nc *nats.Conn
		js jetstream.JetStream
	}
	pubs := make([]pub, spec.producers)
	for i := range pubs {
		nc, js, err := natsConnect(url, fmt.Sprintf("producer-%d", i))
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		pubs[i] = pub{nc, js}
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
			js := pubs[w].js
			futs := make([]jetstream.PubAckFuture, 0, spec.batch)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				_, n := cl.claim(spec.batch)
				if n == 0 {
					return
				}
				futs = futs[:0]
				t := time.Now()
				for range n {
					f, err := js.PublishAsync(spec.subject, spec.value)
					if err != nil {
						errs[w] = fmt.Errorf("PublishAsync: %w", err)
						return
					}
					futs = append(futs, f)
				}
				select {
				case <-js.PublishAsyncComplete():
				case <-time.After(60 * time.Second):
					errs[w] = fmt.Errorf("PublishAsyncComplete: no acks within 60s")
					return
				}
				lats[w].Add(time.Since(t))
				for _, f := range futs {
					select {
					case a := <-f.Ok():
						if !tr.Deliver(int64(a.Sequence) - 1) {
							errs[w] = fmt.Errorf("sequence %d acknowledged twice", a.Sequence)
							return
						}
					case err := <-f.Err():
						errs[w] = fmt.Errorf("publish: %w", err)
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
		return nil, fmt.Errorf("no message acknowledged within %v", spec.maxDur)
	}
	s, err := pubs[0].js.Stream(ctx, spec.topic)
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
