package shareconsumer

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// Every test closes its consumers, connections and servers: none may leave a
// goroutine behind (heartbeat loops in particular).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is the real server in-process on loopback TCP, its data in a temp dir.
type env struct {
	t      *testing.T
	cfg    app.Config
	mu     sync.Mutex
	srv    *app.Server
	conn   *grpc.ClientConn
	log    sharelogv1.LogServiceClient
	groups sharelogv1.ShareGroupServiceClient
}

func newEnv(t *testing.T, mutate ...func(*app.Config)) *env {
	t.Helper()
	fast := func(cfg *app.Config) {
		cfg.ShareMinRecordLockDuration = 100 * time.Millisecond
		cfg.ShutdownTimeout = 5 * time.Second
	}
	cfg := testsupport.Config(t, append([]func(*app.Config){fast}, mutate...)...)
	srv, err := app.Start(context.Background(), cfg, nil)
	require.NoError(t, err)
	cfg.GRPCAddr = srv.GRPCAddr() // a restart listens on the same address
	e := &env{t: t, cfg: cfg, srv: srv}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.srv != nil {
			require.NoError(t, e.srv.Close())
		}
	})
	e.conn = dial(t, cfg.GRPCAddr)
	e.log = sharelogv1.NewLogServiceClient(e.conn)
	e.groups = sharelogv1.NewShareGroupServiceClient(e.conn)
	return e
}

// dial connects with a short reconnect backoff, so that clients find a
// restarted server quickly.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	return testsupport.Dial(t, addr, testsupport.FastReconnect())
}

// restart stops the server (gracefully) and starts it again on the same
// data dir and address.
func (e *env) restart() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NoError(e.t, e.srv.Close())
	e.srv = nil
	var err error
	for range 50 { // the port can take a moment to be free again
		if e.srv, err = app.Start(context.Background(), e.cfg, nil); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(e.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = e.log.ListTopics(ctx, &sharelogv1.ListTopicsRequest{}, grpc.WaitForReady(true))
	require.NoError(e.t, err)
}

func (e *env) createTopic(name string, partitions int32) {
	e.t.Helper()
	_, err := e.log.CreateTopic(context.Background(), &sharelogv1.CreateTopicRequest{Name: name, Partitions: partitions})
	require.NoError(e.t, err)
}

// produce appends n records "v-<i>" (key "k-<i>") to a partition of topic,
// i counting from first.
func (e *env) produce(topic string, partition int32, first, n int) {
	e.t.Helper()
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: proto.Int32(partition)}
	for i := first; i < first+n; i++ {
		req.Records = append(req.Records, &sharelogv1.Record{
			Key:     []byte(fmt.Sprintf("k-%d", i)),
			Value:   []byte(fmt.Sprintf("v-%d", i)),
			Headers: []*sharelogv1.RecordHeader{{Key: "i", Value: []byte(fmt.Sprint(i))}},
		})
	}
	_, err := e.log.Produce(context.Background(), req)
	require.NoError(e.t, err)
}

// configureGroup makes the group start at the earliest offset, with the
// given lock duration and fast heartbeats.
func (e *env) configureGroup(group string, lock time.Duration) {
	e.t.Helper()
	_, err := e.groups.UpdateShareGroupConfig(context.Background(), &sharelogv1.UpdateShareGroupConfigRequest{
		GroupId: group,
		Config: &sharelogv1.ShareGroupConfig{
			AutoOffsetReset:      proto.String("earliest"),
			RecordLockDurationMs: proto.Int32(int32(lock / time.Millisecond)),
			SessionTimeoutMs:     proto.Int32(2000),
			HeartbeatIntervalMs:  proto.Int32(200),
		},
	})
	require.NoError(e.t, err)
}

// newConsumer returns a consumer with fast test timings, closed at cleanup.
func newConsumer(t *testing.T, cc grpc.ClientConnInterface, cfg Config) *Consumer {
	t.Helper()
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 100 * time.Millisecond
	}
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	c, err := New(cc, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// abandon stops a consumer as if its process died: no final epoch, no leave,
// the records it holds stay locked until their locks expire.
func (c *Consumer) abandon() {
	c.mu.Lock()
	c.closed, c.acksClosed = true, true
	c.mu.Unlock()
	c.bgCancel()
	<-c.bgDone
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// ackLog records acknowledgement outcomes (Config.OnAcknowledgement).
type ackLog struct {
	mu       sync.Mutex
	accepted map[recordKey]int // successful ACCEPTs per offset
	ok       map[AckType]int64 // successful acknowledgements per type
	failed   []AckResult
	unknown  int64 // offsets with ErrAckOutcomeUnknown
}

func newAckLog() *ackLog {
	return &ackLog{accepted: map[recordKey]int{}, ok: map[AckType]int64{}}
}

func (l *ackLog) hook(r AckResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Err != nil {
		l.failed = append(l.failed, r)
		for _, rg := range r.Ranges {
			if r.Err == ErrAckOutcomeUnknown {
				l.unknown += rg.Len()
			}
		}
		return
	}
	for _, rg := range r.Ranges {
		l.ok[rg.Type] += rg.Len()
		if rg.Type == Accept {
			for off := rg.FirstOffset; off <= rg.LastOffset; off++ {
				l.accepted[recordKey{tp: r.TopicPartition, offset: off}]++
			}
		}
	}
}

func (l *ackLog) acceptedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.accepted)
}

// requireAllAcceptedOnce checks that every offset in want was accepted
// successfully exactly once, and nothing else was.
func (l *ackLog) requireAllAcceptedOnce(t *testing.T, want map[TopicPartition]int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	total := 0
	for tp, n := range want {
		for off := range int64(n) {
			k := recordKey{tp: tp, offset: off}
			require.Equal(t, 1, l.accepted[k], "%s offset %d: successful ACCEPTs", tp, off)
		}
		total += n
	}
	require.Len(t, l.accepted, total, "offsets accepted")
}

// pollN polls until n records have been returned (or fails after timeout).
func pollN(t *testing.T, c *Consumer, n int) []Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []Record
	for len(out) < n {
		recs, err := c.Poll(ctx)
		require.NoError(t, err, "after %d of %d records", len(out), n)
		out = append(out, recs...)
	}
	return out
}

// pollNothing polls for d and requires no records.
func pollNothing(t *testing.T, c *Consumer, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		recs, err := c.Poll(t.Context())
		require.NoError(t, err)
		require.Empty(t, offsets(recs), "no record expected")
	}
}

func offsets(recs []Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func acceptAll(t *testing.T, c *Consumer, recs []Record) {
	t.Helper()
	for _, r := range recs {
		require.NoError(t, c.Acknowledge(r, Accept))
	}
}

type serverConfig = app.Config

// awaitLongPolls waits until n ShareFetch calls hold one of the server's
// long-poll slots (its sharelog_long_polls_waiting gauge), that is, until
// they are waiting for records or for a session slot.
func (e *env) awaitLongPolls(n int) {
	e.t.Helper()
	e.mu.Lock()
	base := "http://" + e.srv.HTTPAddr()
	e.mu.Unlock()
	testsupport.AwaitLongPolls(e.t, http.DefaultClient, base, n)
}
