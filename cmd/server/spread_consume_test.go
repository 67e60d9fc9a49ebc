package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharelog/sharelog/client/shareconsumer"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// spreadWorkload produces to every partition of a topic spread over the
// instances and consumes it through one share group with
// client/shareconsumer, which keeps a session on each partition's owner:
// the cluster tests' check that share-partitions served by their owners
// survive owner changes. Every produced record must be ACCEPTed
// successfully exactly once (or with an outcome the consumer could not
// learn: the answer was lost), and none delivered again after a
// successful ACCEPT.
type spreadWorkload struct {
	t     *testing.T
	log   sharelogv1.LogServiceClient
	topic string
	group string

	mu       sync.Mutex
	produced map[string]bool     // "p/offset", acknowledged by a produce
	accepted map[string]int      // successful ACCEPTs
	unknown  map[string]bool     // ACCEPTs whose outcome is unknown (sent, answer lost)
	history  map[string][]string // each record's deliveries and acknowledgement outcomes, for a failure's report
	afterAck []string            // delivered again after a successful ACCEPT
	deliv    int
}

func newSpreadWorkload(t *testing.T, conn grpc.ClientConnInterface, topic, group string) *spreadWorkload {
	return &spreadWorkload{t: t, log: sharelogv1.NewLogServiceClient(conn), topic: topic, group: group,
		produced: map[string]bool{}, accepted: map[string]int{}, unknown: map[string]bool{}, history: map[string][]string{}}
}

// setup makes the group read from the earliest offset.
func (w *spreadWorkload) setup(t *testing.T, conn grpc.ClientConnInterface) {
	sg := sharelogv1.NewShareGroupServiceClient(conn)
	earliest := "earliest"
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: w.group,
			Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: &earliest}})
		return err == nil
	}, 15*time.Second, 100*time.Millisecond)
}

// runProducer produces keyed records (spread by key over the partitions)
// until stop.
func (w *spreadWorkload) runProducer(ctx context.Context, stop <-chan struct{}, wg *sync.WaitGroup) {
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			resp, err := w.log.Produce(cctx, &sharelogv1.ProduceRequest{Topic: w.topic,
				Records: []*sharelogv1.Record{{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}}})
			cancel()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			w.mu.Lock()
			for _, r := range resp.GetResults() {
				k := fmt.Sprintf("%d/%d", r.GetPartition(), r.GetOffset())
				w.produced[k] = true
				w.history[k] = append(w.history[k], time.Now().Format("15:04:05.000")+" produced")
			}
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// runConsumer consumes through conn (any instance) until stop, then until
// every produced record is accepted or drain passes.
func (w *spreadWorkload) runConsumer(ctx context.Context, conn grpc.ClientConnInterface, stop <-chan struct{}, drain time.Duration, wg *sync.WaitGroup) {
	sc, err := shareconsumer.New(conn, shareconsumer.Config{GroupID: w.group, Topics: []string{w.topic}, AckMode: shareconsumer.AckExplicit,
		MaxWait: 100 * time.Millisecond, RequestTimeout: 5 * time.Second,
		Dial: func(addr string) (grpc.ClientConnInterface, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		},
		OnAcknowledgement: func(r shareconsumer.AckResult) {
			unknown := errors.Is(r.Err, shareconsumer.ErrAckOutcomeUnknown)
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, rg := range r.Ranges {
				for off := rg.FirstOffset; off <= rg.LastOffset; off++ {
					k := fmt.Sprintf("%d/%d", r.Partition, off)
					w.history[k] = append(w.history[k], fmt.Sprintf("%s ack: %v", time.Now().Format("15:04:05.000"), r.Err))
					switch {
					case r.Err != nil && !unknown: // not applied: delivered again
					case unknown:
						w.unknown[k] = true // applied or not: if not, delivered again after its lock
					default:
						w.accepted[k]++
					}
				}
			}
		}})
	require.NoError(w.t, err)
	wg.Go(func() {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = sc.Close(cctx)
		}()
		var until time.Time
		for {
			select {
			case <-stop:
				if until.IsZero() {
					until = time.Now().Add(drain)
				}
			default:
			}
			if !until.IsZero() && (time.Now().After(until) || w.done()) {
				_, _ = sc.Commit(ctx)
				return
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			recs, err := sc.Poll(pctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				w.t.Logf("poll: %v", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			w.mu.Lock()
			for _, r := range recs {
				k := fmt.Sprintf("%d/%d", r.Partition, r.Offset)
				w.history[k] = append(w.history[k], fmt.Sprintf("%s delivered, count %d", time.Now().Format("15:04:05.000"), r.DeliveryCount))
				w.deliv++
				if w.accepted[k] > 0 {
					w.afterAck = append(w.afterAck, k)
				}
			}
			w.mu.Unlock()
			for _, r := range recs {
				_ = sc.Acknowledge(r, shareconsumer.Accept)
			}
		}
	})
}

// done reports whether every produced record was accepted.
func (w *spreadWorkload) done() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.produced {
		if w.accepted[k] == 0 && !w.unknown[k] {
			return false
		}
	}
	return true
}

func (w *spreadWorkload) verify(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	require.NotEmpty(t, w.produced)
	var missing []string
	for k := range w.produced {
		if w.accepted[k] == 0 && !w.unknown[k] {
			missing = append(missing, k)
		}
	}
	for k, n := range w.accepted {
		require.LessOrEqual(t, n, 1, "record %s ACCEPTed successfully %d times", k, n)
	}
	require.Empty(t, w.afterAck, "records delivered again after a successful ACCEPT")
	for _, k := range missing {
		t.Logf("never accepted: %s: %v", k, w.history[k])
	}
	require.Empty(t, missing, "produced records never accepted (of %d)", len(w.produced))
	t.Logf("spread share consumption: %d records produced, %d deliveries, %d ACCEPTs of unknown outcome", len(w.produced), w.deliv, len(w.unknown))
}
