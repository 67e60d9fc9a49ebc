package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
	"github.com/sharelog/sharelog/internal/testsupport/keyhistory"
)

// keyOrderingNone runs TestKafkaShareConsumerKeyOrdering's group without
// ordering, to see the checker fail: go test ./e2e -run
// TestKafkaShareConsumerKeyOrdering -keyorder.none.
var keyOrderingNone = flag.Bool("keyorder.none", false, "run the key-ordering history test with share.ordering=none (it must then fail)")

// restartable is the real server on loopback TCP (gRPC and the Kafka
// listener) over a file data dir, which restart stops and starts again on
// the same data dir and ports.
type restartable struct {
	t   *testing.T
	cfg app.Config
	mu  sync.Mutex
	srv *app.Server
}

func newRestartable(t *testing.T, mutate ...func(*app.Config)) *restartable {
	t.Helper()
	cfg := testsupport.Config(t, append([]func(*app.Config){func(c *app.Config) {
		c.KafkaAddr = "127.0.0.1:0"
		c.ShutdownTimeout = 5 * time.Second
	}}, mutate...)...)
	srv, err := app.Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	cfg.GRPCAddr, cfg.KafkaAddr = srv.GRPCAddr(), srv.KafkaAddr() // a restart listens on the same ports
	r := &restartable{t: t, cfg: cfg, srv: srv}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.srv != nil {
			require.NoError(t, r.srv.Close())
		}
	})
	return r
}

// restart closes the server (gracefully) and starts it again.
func (r *restartable) restart() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NoError(r.t, r.srv.Close())
	r.srv = nil
	var err error
	for range 50 { // the ports can take a moment to be free again
		if r.srv, err = app.Start(context.Background(), r.cfg, nil); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(r.t, err)
}

// setGroupConfig sets GROUP configs through the Kafka admin API
// (IncrementalAlterConfigs), as kafka-configs.sh does.
func setGroupConfig(t *testing.T, cl *kgo.Client, group string, kv ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i < len(kv); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		v := kv[i+1]
		c.Name, c.Op, c.Value = kv[i], kmsg.IncrementalAlterConfigOpSet, &v
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, resp.Resources[0].ErrorCode, "alter group config: %v %v", kerr.ErrorForCode(resp.Resources[0].ErrorCode), resp.Resources[0].ErrorMessage)
}

// franz-go's share consumer, unmodified, in a group with share.ordering=key
// (docs/queues.md) on the real server: four consumers with random RELEASEs
// and REJECTs, one closed midway (its session ends, its records come back)
// and replaced, and the server restarted (same data dir and ports) while
// they consume. The history checker (internal/testsupport/keyhistory)
// proves per key: no two records locked at once (a lock of the old server
// ends when its stop begins), the applied ACCEPTs in offset order over the
// whole run, and every record accepted, rejected or archived; the
// server's start offsets reach the end.
//
// kgo reports acknowledgement outcomes per partition and request
// (ShareAckCallback), so each consumer flushes its acknowledgements after
// every poll: a record's acknowledgement counts as applied when every
// result of its partition in that flush is a success, refused when every
// one failed, unknown otherwise. The group's locks (30 s, the default)
// outlast the test, so a refused acknowledgement's lock ended with the
// old server.
func TestKafkaShareConsumerKeyOrdering(t *testing.T) {
	s := newRestartable(t)
	conn := testsupport.Dial(t, s.cfg.GRPCAddr, testsupport.FastReconnect())
	_, err := sharelogv1.NewLogServiceClient(conn).CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: "q", Partitions: 2})
	require.NoError(t, err)
	kopts := []kgo.Opt{kgo.SeedBrokers(s.cfg.KafkaAddr), kgo.MetadataMinAge(50 * time.Millisecond), kgo.RetryTimeout(10 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }), kgo.FetchMaxWait(100 * time.Millisecond)}
	p, err := kgo.NewClient(append(kopts, kgo.DefaultProduceTopic("q"))...)
	require.NoError(t, err)
	defer p.Close()

	const keys, n, limit = 20, 1000, 5
	produced := map[string]map[int64]string{"q-0": {}, "q-1": {}}
	for i := range n {
		k := fmt.Sprintf("k%d", i%keys)
		r := &kgo.Record{Key: []byte(k), Value: []byte(fmt.Sprint(i))}
		require.NoError(t, p.ProduceSync(context.Background(), r).FirstErr())
		produced[fmt.Sprintf("q-%d", r.Partition)][r.Offset] = k
	}
	ordering := "key"
	if *keyOrderingNone {
		ordering = "none"
	}
	setGroupConfig(t, p, "g", "share.auto.offset.reset", "earliest", "share.ordering", ordering,
		"share.delivery.count.limit", fmt.Sprint(limit))

	var h keyhistory.History
	var settled atomic.Int64 // applied ACCEPTs and REJECTs
	// consumer is one kgo share consumer: its flush's results per partition.
	type consumer struct {
		cl      *kgo.Client
		mu      sync.Mutex
		results map[int32][]error
	}
	// consume polls until poll ends; acks are flushed with ctx, so that a
	// consumer told to stop still learns the outcome of its last acks.
	consume := func(ctx, poll context.Context, c *consumer, seed uint64) {
		rnd := rand.New(rand.NewPCG(seed, 1))
		for poll.Err() == nil {
			recs := c.cl.PollFetches(poll).Records()
			if len(recs) == 0 {
				continue
			}
			ids := make([]int, len(recs))
			for i, r := range recs {
				ids[i] = h.Got(fmt.Sprintf("q-%d", r.Partition), string(r.Key), r.Offset, int(r.DeliveryCount()))
			}
			time.Sleep(time.Duration(rnd.IntN(1000)) * time.Microsecond) // the work: holds that last
			c.mu.Lock()
			c.results = map[int32][]error{}
			c.mu.Unlock()
			acks := make([]keyhistory.Ack, len(recs))
			for i, r := range recs {
				st, a := kgo.AckAccept, keyhistory.Accept
				switch v := rnd.IntN(20); {
				case v == 0:
					st, a = kgo.AckReject, keyhistory.Reject
				case v <= 2:
					st, a = kgo.AckRelease, keyhistory.Release
				}
				acks[i] = a
				h.Let(ids[i], a) // before the server can let go
				r.Ack(st)
			}
			if err := c.cl.FlushAcks(ctx); err != nil {
				t.Errorf("flush acks: %v", err)
				return
			}
			c.mu.Lock()
			for i, r := range recs {
				o, res := keyhistory.Applied, c.results[r.Partition]
				failed, answered := 0, 0
				for _, err := range res {
					if err != nil {
						failed++
					}
					// Only the server's own error code says it refused the
					// acknowledgement: a connection that broke (the restart)
					// may have taken an ack the server had applied.
					var ke *kerr.Error
					if errors.As(err, &ke) {
						answered++
					}
				}
				switch {
				case len(res) == 0:
					o = keyhistory.Unknown
				case failed == len(res) && answered == failed:
					o = keyhistory.Refused
				case failed > 0:
					o = keyhistory.Unknown
				}
				h.Outcome(ids[i], o)
				if o == keyhistory.Applied && acks[i] != keyhistory.Release {
					settled.Add(1)
				}
			}
			c.mu.Unlock()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// start runs a consumer; the func it returns stops it: its loop ends
	// (its last acks flushed), then the client closes (its session ends).
	start := func(seed uint64) func() {
		c := &consumer{results: map[int32][]error{}}
		var err error
		c.cl, err = kgo.NewClient(append(kopts, kgo.ShareGroup("g"), kgo.ConsumeTopics("q"),
			kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, r := range rs {
					c.results[r.Partition] = append(c.results[r.Partition], r.Err)
				}
			}))...)
		require.NoError(t, err)
		poll, cancelPoll := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			consume(ctx, poll, c, seed)
		}()
		return func() {
			cancelPoll()
			<-done
			c.cl.Close()
		}
	}
	waitSettled := func(want int) {
		t.Helper()
		require.Eventually(t, func() bool { return settled.Load() >= int64(want) }, 15*time.Second, 5*time.Millisecond,
			"records accepted or rejected (%d of %d wanted)", settled.Load(), want)
	}
	const consumers = 4
	var stops []func()
	for i := range consumers {
		stops = append(stops, start(uint64(i)))
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	waitSettled(n / 4)
	// One consumer goes away with what it holds and another joins.
	stops[0]()
	stops[0] = start(99)
	waitSettled(n / 2)
	// The server restarts under the running consumers.
	h.Stopping()
	began := time.Now()
	s.restart()
	t.Logf("restart at %d of %d records settled: %v from the stop to the new server listening", settled.Load(), n, time.Since(began).Round(time.Millisecond))
	groups := sharelogv1.NewShareGroupServiceClient(conn)
	startOffsets := func() (sum int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := groups.DescribeSharePartitionState(ctx, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: "g"}, grpc.WaitForReady(true))
		if err != nil {
			return -1
		}
		for _, tp := range resp.GetTopics() {
			for _, p := range tp.GetPartitions() {
				sum += p.GetStartOffset()
			}
		}
		return sum
	}
	require.Eventually(t, func() bool { return startOffsets() == n }, 30*time.Second, 20*time.Millisecond,
		"the share-partition start offsets reach the end of the log (%d of %d)", startOffsets(), n)
	for _, stop := range stops {
		stop()
	}
	stops = nil

	r := h.Check(produced, limit)
	t.Logf("%d records, %d consumers (one replaced), one restart: %v", n, consumers+1, r)
	if len(r.Violations) > 0 {
		t.Errorf("%d violations, first: %q", len(r.Violations), r.Violations[:min(5, len(r.Violations))])
	}
}
