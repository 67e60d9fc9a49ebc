package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// leaseTTL is the fault tests' --lease-ttl.
const leaseTTL = 2 * time.Second

// startJS starts an in-process 3-node JetStream cluster that fsyncs before
// acknowledging, shut down at t's cleanup.
func startJS(t *testing.T) *jstest.Cluster {
	t.Helper()
	js, err := jstest.Start(jstest.Options{SyncAlways: true, NoAdvertise: true})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	return js
}

// startMember runs a sharelog child in cluster mode.
func startMember(t *testing.T, natsURL, prefix, id string, extra ...string) *child {
	t.Helper()
	return startChild(t, t.TempDir(), append([]string{"--store", "jetstream", "--nats-url", natsURL, "--nats-prefix", prefix,
		"--instance-id", id, "--lease-ttl", leaseTTL.String(), "--share-record-lock-duration", "3s"}, extra...)...)
}

// waitReadyz waits until the child's /readyz answers 200 with want in its
// body, and returns how long that took.
func (c *child) waitReadyz(t *testing.T, want string, within time.Duration) time.Duration {
	t.Helper()
	return testsupport.WaitReadyz(t, c.httpAddr, want, within)
}

func retryable(err error) bool {
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.NotFound || c == codes.FailedPrecondition
}

// workload is produce + fetch (recorded in a history) and a share consumer
// that ACCEPTs everything it gets, against one partition, through one
// instance's connection (which may forward).
type workload struct {
	t     *testing.T
	logc  sharelogv1.LogServiceClient
	sg    sharelogv1.ShareGroupServiceClient
	hist  *history
	topic string

	mu        sync.Mutex
	produced  map[int64]string // acknowledged offsets
	accepted  map[int64]int    // successful ACCEPTs per offset
	unknown   map[int64]bool   // ACCEPTs whose outcome is unknown
	delivered map[int64]int32  // last delivery count seen
	redeliv   map[int64][2]int32
	afterAck  []int64 // offsets delivered again after a successful ACCEPT
	lowWater  int64   // highest low watermark a purge answered
}

func newWorkload(t *testing.T, c *child, topic string) *workload {
	return newWorkloadConn(t, c.conn, topic)
}

func newWorkloadConn(t *testing.T, conn grpc.ClientConnInterface, topic string) *workload {
	return &workload{t: t, logc: sharelogv1.NewLogServiceClient(conn), sg: sharelogv1.NewShareGroupServiceClient(conn),
		hist: newHistory(), topic: topic, produced: map[int64]string{}, accepted: map[int64]int{}, unknown: map[int64]bool{},
		delivered: map[int64]int32{}, redeliv: map[int64][2]int32{}}
}

func (w *workload) produce(ctx context.Context, client, i int) {
	p := int32(0)
	v := fmt.Sprintf("c%d-%d", client, i)
	w.hist.call(client, partIn{kind: opProduce, value: v}, func() partOut {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := w.logc.Produce(cctx, &sharelogv1.ProduceRequest{Topic: w.topic, Partition: &p,
			Records: []*sharelogv1.Record{{Value: []byte(v)}}})
		if err != nil {
			if !retryable(err) && ctx.Err() == nil {
				w.t.Errorf("produce: not a retryable error: %v", err)
			}
			return partOut{unknown: true}
		}
		off := resp.GetResults()[0].GetOffset()
		w.mu.Lock()
		w.produced[off] = v
		w.mu.Unlock()
		return partOut{offset: off}
	})
}

func (w *workload) fetch(ctx context.Context, client int, off int64) {
	w.hist.call(client, partIn{kind: opFetch, offset: off}, func() partOut {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := w.logc.Fetch(cctx, &sharelogv1.FetchRequest{Topic: w.topic, Partition: 0, Offset: off, MaxRecords: 20})
		if status.Code(err) == codes.OutOfRange {
			return partOut{outOfRange: true}
		}
		if err != nil {
			return partOut{unknown: true}
		}
		var vals []string
		for _, r := range resp.GetRecords() {
			vals = append(vals, string(r.GetValue()))
		}
		return partOut{values: vals}
	})
}

func (w *workload) purge(ctx context.Context, client int, off int64) {
	w.hist.call(client, partIn{kind: opPurge, offset: off}, func() partOut {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := w.logc.Purge(cctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: w.topic,
			Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: off}}}}})
		if err != nil {
			return partOut{unknown: true}
		}
		pr := resp.GetTopics()[0].GetPartitions()[0]
		switch pr.GetErrorCode() {
		case sharelogv1.ErrorCode_ERROR_CODE_NONE:
			w.mu.Lock()
			w.lowWater = max(w.lowWater, pr.GetLowWatermark())
			w.mu.Unlock()
			return partOut{lowWater: pr.GetLowWatermark()}
		case sharelogv1.ErrorCode_ERROR_CODE_OFFSET_OUT_OF_RANGE:
			return partOut{outOfRange: true}
		}
		return partOut{unknown: true}
	})
}

// runPurger purges every 400 ms up to 30 offsets below the highest
// acknowledged one, until stop closes.
func (w *workload) runPurger(ctx context.Context, stop <-chan struct{}, client int, wg *sync.WaitGroup) {
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(400 * time.Millisecond):
			}
			w.mu.Lock()
			top := int64(-1)
			for off := range w.produced {
				top = max(top, off)
			}
			w.mu.Unlock()
			if top > 30 {
				w.purge(ctx, client, top-30)
			}
		}
	})
}

// runProducers produces until stop closes, each client in turn fetching
// from a recent offset.
func (w *workload) runProducers(ctx context.Context, stop <-chan struct{}, clients int, wg *sync.WaitGroup) {
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w.produce(ctx, c, i)
				if i%3 == 0 {
					w.mu.Lock()
					n := int64(len(w.produced))
					w.mu.Unlock()
					w.fetch(ctx, clients+c, max(0, n-5))
				}
				time.Sleep(25 * time.Millisecond)
			}
		})
	}
}

// consume runs one share consumer until stop closes, then returns.
func (w *workload) consume(ctx context.Context, member string, stop <-chan struct{}) {
	epoch := int32(0)
	var pending []int64
	for {
		select {
		case <-stop:
			return
		default:
		}
		part := &sharelogv1.ShareFetchPartition{Partition: 0}
		for _, off := range pending {
			part.AcknowledgementBatches = append(part.AcknowledgementBatches, &sharelogv1.AcknowledgementBatch{FirstOffset: off, LastOffset: off,
				AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}})
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := w.sg.ShareFetch(cctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: member, ShareSessionEpoch: epoch,
			MaxWaitMs: 100, Topics: []*sharelogv1.ShareFetchTopic{{Topic: w.topic, Partitions: []*sharelogv1.ShareFetchPartition{part}}}})
		cancel()
		w.mu.Lock()
		if err != nil {
			for _, off := range pending {
				w.unknown[off] = true
			}
			pending, epoch = nil, 0
			w.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			continue
		}
		epoch++
		pr := &sharelogv1.ShareFetchPartitionResponse{}
		for _, tr := range resp.GetResponses() {
			for _, p := range tr.GetPartitions() {
				pr = p
			}
		}
		if pr.GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NOT_LEADER_OR_FOLLOWER {
			// In partitioned mode the session lives on the partition's
			// owner, which changed: the next fetch opens one on the new
			// owner (the routing follows; the acknowledgements below are
			// refused, so their outcome is known to be nothing).
			epoch = 0
		}
		if len(pending) > 0 && len(resp.GetResponses()) == 0 {
			w.t.Errorf("acknowledgements of %d records got no partition response", len(pending))
		}
		if pr.GetAcknowledgeErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NONE {
			for _, off := range pending {
				w.accepted[off]++
			}
		} else {
			for _, off := range pending {
				w.unknown[off] = true
			}
		}
		pending = nil
		for _, a := range pr.GetAcquiredRecords() {
			for off := a.GetFirstOffset(); off <= a.GetLastOffset(); off++ {
				if w.accepted[off] > 0 {
					w.afterAck = append(w.afterAck, off)
				}
				if prev, ok := w.delivered[off]; ok {
					w.redeliv[off] = [2]int32{prev, a.GetDeliveryCount()}
				}
				w.delivered[off] = a.GetDeliveryCount()
				pending = append(pending, off)
			}
		}
		w.mu.Unlock()
	}
}

// verify: every acknowledged offset was ACCEPTed exactly once (or once
// with an unknown outcome), nothing was delivered after a successful
// ACCEPT, redeliveries kept their counts, and the history is linearizable.
func (w *workload) verify(t *testing.T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	require.NotEmpty(t, w.produced)
	var missing []int64
	for off := range w.produced {
		if w.accepted[off] == 0 && !w.unknown[off] && off >= w.lowWater {
			missing = append(missing, off)
		}
		require.LessOrEqual(t, w.accepted[off], 1, "offset %d ACCEPTed more than once", off)
	}
	require.Empty(t, missing, "acknowledged offsets never ACCEPTed")
	require.Empty(t, w.afterAck, "offsets delivered again after a successful ACCEPT")
	for off, r := range w.redeliv {
		require.GreaterOrEqual(t, r[1], int32(1), "offset %d", off)
	}
	t.Logf("%d offsets produced, %d redelivered, %d ACCEPTs of unknown outcome", len(w.produced), len(w.redeliv), len(w.unknown))
	w.mu.Unlock()
	w.resolveAndCheck(t)
	w.mu.Lock()
}

// resolveAndCheck reads the whole partition, checks that every
// acknowledged produce is there at its offset, settles the produces of
// unknown outcome with it and checks the history.
func (w *workload) resolveAndCheck(t *testing.T) {
	final := map[string]int64{}
	logStart := int64(0)
	for off := int64(0); ; {
		// UNAVAILABLE is retryable: under load a lease renewal may lapse
		// and the instance take over again while this reads.
		var resp *sharelogv1.FetchResponse
		var err error
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			resp, err = w.logc.Fetch(context.Background(), &sharelogv1.FetchRequest{Topic: w.topic, Partition: 0, Offset: off, MaxRecords: 1000})
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
				break
			}
		}
		if st := status.Convert(err); st.Code() == codes.OutOfRange && off == 0 {
			for _, d := range st.Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					logStart, _ = strconv.ParseInt(info.GetMetadata()["log_start_offset"], 10, 64)
				}
			}
			require.NotZero(t, logStart, "%v", err)
			off = logStart
			continue
		}
		require.NoError(t, err)
		if len(resp.GetRecords()) == 0 {
			break
		}
		for _, r := range resp.GetRecords() {
			final[string(r.GetValue())] = r.GetOffset()
			off = r.GetOffset() + 1
		}
	}
	w.mu.Lock()
	for off, v := range w.produced {
		if off >= logStart {
			require.Equal(t, off, final[v], "acknowledged record %q is not at its offset", v)
		}
	}
	require.GreaterOrEqual(t, logStart, w.lowWater, "an acknowledged purge was lost")
	w.mu.Unlock()
	w.hist.resolve(final, logStart)
	w.hist.check(t)
}

// setup creates the topic and the group (earliest) through c.
func (w *workload) setup(t *testing.T) {
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := w.logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: w.topic, Partitions: 1})
		return err == nil || status.Code(err) == codes.AlreadyExists
	}, 10*time.Second, 100*time.Millisecond)
	// UNAVAILABLE is retryable (a freshly active instance's share-state
	// bucket may still be electing its leader), as for CreateTopic above.
	var err error
	require.Eventually(t, func() bool {
		_, err = w.sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
			Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
		return status.Code(err) != codes.Unavailable
	}, 10*time.Second, 100*time.Millisecond, "last error: %v", err)
	require.NoError(t, err)
}

// drain consumes until every acknowledged offset is ACCEPTed or unknown,
// or the deadline passes.
func (w *workload) drain(ctx context.Context, member string, within time.Duration) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { w.consume(ctx, member, stop); close(done) }()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		left := 0
		for off := range w.produced {
			if w.accepted[off] == 0 && !w.unknown[off] && off >= w.lowWater {
				left++
			}
		}
		w.mu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// One more round so the last acknowledgements are sent.
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
}

// (b) SIGKILL of the active instance under produce and share-ack load: the
// standby serves within the lease TTL + 2 s; every acknowledged offset is
// delivered and ACCEPTed exactly once across the failover; unacknowledged
// records come back.
func TestClusterKillActiveInstance(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startMember(t, js.URL(), prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startMember(t, js.URL(), prefix, "b")
	b.waitReadyz(t, "forwarding to a", 10*time.Second)

	w := newWorkload(t, b, "orders") // every call through the standby
	w.setup(t)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			close(stop)
			wg.Wait()
		}
		if t.Failed() {
			t.Logf("last log lines of the standby:\n%s", strings.Join(b.logs.Tail(40), "\n"))
		}
	})
	w.runProducers(ctx, stop, 3, &wg)
	wg.Go(func() { w.consume(ctx, "m1", stop) })
	time.Sleep(1500 * time.Millisecond)
	// A member that acquires records and never acknowledges them, so the
	// kill always leaves locks behind (m1 alone may have none in flight
	// at the instant of the kill): they must come back.
	held := w.hold(ctx, t, "holder")

	a.kill(t)
	killed := time.Now()
	took := b.waitReadyz(t, "cluster: active", leaseTTL+2*time.Second)
	t.Logf("standby active %v after the kill", took)
	// It serves: a produce through it succeeds within the bound.
	var served atomic.Bool
	var lastErr error
	for time.Since(killed) < leaseTTL+2*time.Second && !served.Load() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, lastErr = w.logc.DescribeTopic(cctx, &sharelogv1.DescribeTopicRequest{Name: w.topic})
		cancel()
		served.Store(lastErr == nil)
	}
	require.True(t, served.Load(), "the standby did not serve within --lease-ttl + 2s: %v", lastErr)
	time.Sleep(1500 * time.Millisecond) // load goes on after the failover
	close(stop)
	stopped = true
	wg.Wait()
	w.drain(ctx, "m2", 15*time.Second)
	w.verify(t)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, off := range held {
		require.Contains(t, w.redeliv, off, "offset %d, locked by the killed instance's session, did not come back", off)
	}
}

// hold opens a share session for member, acquires records and never
// acknowledges them; it records them as delivered and returns their
// offsets.
func (w *workload) hold(ctx context.Context, t *testing.T, member string) []int64 {
	var held []int64
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := w.sg.ShareFetch(cctx, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: member, MaxWaitMs: 500,
			MaxRecords: proto.Int32(5), Topics: []*sharelogv1.ShareFetchTopic{{Topic: w.topic,
				Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}}}}})
		if err != nil {
			return false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, tr := range resp.GetResponses() {
			for _, p := range tr.GetPartitions() {
				for _, a := range p.GetAcquiredRecords() {
					for off := a.GetFirstOffset(); off <= a.GetLastOffset(); off++ {
						w.delivered[off] = a.GetDeliveryCount()
						held = append(held, off)
					}
				}
			}
		}
		return len(held) > 0
	}, 10*time.Second, 50*time.Millisecond, "the holder acquired nothing")
	return held
}

// proxy is a TCP proxy to a NATS server that the test can cut.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	return p
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { io.Copy(u, c); u.Close() }()
		go func() { io.Copy(c, u); c.Close() }()
	}
}

// setCut closes every proxied connection and refuses new ones (true), or
// lets connections through again (false).
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// (c) The active instance loses NATS: it stops serving within the TTL, the
// other instance takes the lease, and the cut instance cannot write after
// that: once it reaches NATS again it is a standby and forwards.
func TestClusterCutFromNATS(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	px := startProxy(t, strings.TrimPrefix(strings.Split(js.URL(), ",")[0], "nats://"))
	a := startMember(t, "nats://"+px.ln.Addr().String(), prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startMember(t, js.URL(), prefix, "b")
	b.waitReadyz(t, "forwarding to a", 10*time.Second)

	wa := newWorkload(t, a, "events")
	wa.setup(t)
	ctx := context.Background()
	for i := range 20 {
		wa.produce(ctx, 0, i)
	}
	px.setCut(true)
	cut := time.Now()
	took := testsupport.WaitReadyzStatus(t, a.httpAddr, http.StatusServiceUnavailable, "not ready", leaseTTL-100*time.Millisecond)
	t.Logf("the cut instance stopped serving %v after the cut", took)
	// Its calls fail fast and retryably; none hangs.
	p := int32(0)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := wa.logc.Produce(cctx, &sharelogv1.ProduceRequest{Topic: "events", Partition: &p, Records: []*sharelogv1.Record{{Value: []byte("x")}}})
	cancel()
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	b.waitReadyz(t, "cluster: active", leaseTTL+2*time.Second)
	t.Logf("b active %v after the cut", time.Since(cut))

	// b serves; then a comes back and must not write: it is a standby.
	wb := newWorkload(t, b, "events")
	wb.hist = wa.hist
	wb.produced = wa.produced
	for i := range 10 {
		wb.produce(ctx, 1, i)
	}
	px.setCut(false)
	a.waitReadyz(t, "forwarding to b", 10*time.Second)
	for i := 20; i < 30; i++ {
		wa.produce(ctx, 0, i) // through a, forwarded to b
	}
	wa.fetch(ctx, 2, 0)
	wb.resolveAndCheck(t)
}

// (a) SIGKILL of the NATS node leading the partition's stream, under
// produce, fetch, purge and share-ack load: no acknowledged record, ACCEPT
// or purge is lost, and writes resume.
func TestClusterKillNATSStreamLeader(t *testing.T) {
	np := startNATSProcs(t)
	prefix := "FA"
	a := startMember(t, np.url(), prefix, "a")
	a.waitReadyz(t, "cluster: active", 20*time.Second)
	b := startMember(t, np.url(), prefix, "b")
	b.waitReadyz(t, "forwarding to a", 10*time.Second)

	w := newWorkload(t, b, "orders")
	w.setup(t)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			close(stop)
			wg.Wait()
		}
		if t.Failed() {
			for _, c := range []*child{a, b} {
				t.Logf("last log lines of %s:\n%s", c.grpcAddr, strings.Join(c.logs.Tail(40), "\n"))
			}
		}
	})
	w.runProducers(ctx, stop, 2, &wg)
	w.runPurger(ctx, stop, 10, &wg)
	wg.Go(func() { w.consume(ctx, "m1", stop) })
	time.Sleep(1500 * time.Millisecond)

	leader := streamLeader(t, np, prefix)
	t.Logf("killing NATS node %s, leader of the partition stream", leader)
	np.kill(t, leader)
	killed := time.Now()
	// Writes resume: an acknowledged produce after the kill.
	w.mu.Lock()
	before := len(w.produced)
	w.mu.Unlock()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.produced) > before+20
	}, 30*time.Second, 50*time.Millisecond, "writes did not resume")
	t.Logf("writes resumed within %v of the kill", time.Since(killed))
	close(stop)
	stopped = true
	wg.Wait()
	w.drain(ctx, "m2", 20*time.Second)
	w.verify(t)
}

// streamLeader is the NATS server leading the one partition stream of
// prefix.
func streamLeader(t *testing.T, np *natsProcs, prefix string) string {
	t.Helper()
	nc, err := nats.Connect(np.url())
	require.NoError(t, err)
	defer nc.Close()
	js, err := njs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if !strings.HasPrefix(name, prefix+"_") || strings.HasSuffix(name, "_META") || strings.HasSuffix(name, "_SHARE") {
			continue
		}
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		require.NotNil(t, info.Cluster)
		return info.Cluster.Leader
	}
	t.Fatal("no partition stream found")
	return ""
}
