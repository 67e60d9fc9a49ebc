package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sharelog/sharelog/client/changestream"
	"github.com/sharelog/sharelog/client/router"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
)

// countingDialer dials instances and counts the calls sent to each.
type countingDialer struct {
	mu    sync.Mutex
	calls map[string]int
}

func (d *countingDialer) count(addr string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[addr]
}

func (d *countingDialer) dial(t *testing.T) router.Dialer {
	return func(addr string) (grpc.ClientConnInterface, error) {
		inc := func() {
			d.mu.Lock()
			d.calls[addr]++
			d.mu.Unlock()
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				inc()
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				inc()
				return streamer(ctx, desc, cc, method, opts...)
			}))
		if err == nil {
			t.Cleanup(func() { cc.Close() })
		}
		return cc, err
	}
}

func TestClusterRouterSkipsTheHop(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startClusterInstance(t, js, prefix, "b")
	b.waitReadyz(t, "cluster: standby, forwarding to a", 10*time.Second)
	ctx := context.Background()
	createTopic(t, b.log, "t", 2)

	// The seed is the standby; calls go straight to the active instance.
	d := &countingDialer{calls: map[string]int{}}
	rc := router.New(b.conn, d.dial(t), router.Options{})
	t.Cleanup(func() { _ = rc.Close() })
	log := sharelogv1.NewLogServiceClient(rc)
	p := int32(1)
	for i := range 3 {
		resp, err := log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p,
			Records: []*sharelogv1.Record{{Value: fmt.Appendf(nil, "v%d", i)}}})
		require.NoError(t, err)
		require.Equal(t, int64(i), resp.GetResults()[0].GetOffset())
	}
	require.Equal(t, 3, d.count(a.srv.GRPCAddr()))
	// A server stream is routed by its request too.
	end := int64(3)
	cs, err := sharelogv1.NewChangeStreamServiceClient(rc).StreamChanges(ctx, &sharelogv1.StreamChangesRequest{Topic: "t", Partition: 1, EndOffset: &end})
	require.NoError(t, err)
	for {
		_, err := cs.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	require.Equal(t, 4, d.count(a.srv.GRPCAddr()))
	require.Zero(t, d.count(b.srv.GRPCAddr()))

	// The owner goes away: a routed call fails (it is not resent), the
	// view is read again and the caller's retry reaches the new owner.
	aAddr := a.srv.GRPCAddr()
	require.NoError(t, a.srv.Close())
	b.waitReadyz(t, "cluster: active", 5*time.Second)
	require.Eventually(t, func() bool {
		_, err = log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p, Records: []*sharelogv1.Record{{Value: []byte("v3")}}})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "produce after the owner left: %v", err)
	require.Positive(t, d.count(b.srv.GRPCAddr()), "the retry went straight to b")
	fr, err := log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "t", Partition: 1})
	require.NoError(t, err)
	var got []string
	for _, r := range fr.GetRecords() {
		got = append(got, string(r.GetValue()))
	}
	require.Equal(t, []string{"v0", "v1", "v2", "v3"}, got)
	t.Logf("calls: a %d, b %d", d.count(aAddr), d.count(b.srv.GRPCAddr()))
}

// keyState is a change-stream handler keeping the latest value of each key.
type keyState struct {
	mu     sync.Mutex
	values map[string]string
	resets int
}

func (k *keyState) OnSnapshot(context.Context, changestream.Snapshot) error { return nil }
func (k *keyState) OnMutation(_ context.Context, m changestream.Mutation) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.values[string(m.Key)] = string(m.Value)
	return nil
}
func (k *keyState) OnDeletion(_ context.Context, d changestream.Deletion) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.values, string(d.Key))
	return nil
}
func (k *keyState) OnReset(context.Context, changestream.Reset) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.values, k.resets = map[string]string{}, k.resets+1
	return nil
}
func (k *keyState) OnCheckpoint(context.Context, changestream.Checkpoint) error { return nil }

func (k *keyState) snapshot() (map[string]string, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.values), k.resets
}

// A change stream through the router follows the owner across a failover
// with its normal resume rules: it resumes from its checkpoint on the new
// owner, and ends up with every key's latest value.
func TestClusterRouterChangeStreamFollowsTheOwner(t *testing.T) {
	js, err := jstest.Start(jstest.Options{})
	require.NoError(t, err)
	t.Cleanup(js.Shutdown)
	prefix := js.Prefix()
	a := startClusterInstance(t, js, prefix, "a")
	a.waitReadyz(t, "cluster: active", 10*time.Second)
	b := startClusterInstance(t, js, prefix, "b")
	b.waitReadyz(t, "cluster: standby, forwarding to a", 10*time.Second)
	ctx := context.Background()
	createTopic(t, b.log, "t", 1)
	p := int32(0)
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				_, err := b.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "t", Partition: &p,
					Records: []*sharelogv1.Record{{Key: fmt.Appendf(nil, "k%d", i%4), Value: fmt.Appendf(nil, "v%d", i)}}})
				assert.NoError(c, err)
			}, 10*time.Second, 50*time.Millisecond)
		}
	}
	produce(0, 6)

	d := &countingDialer{calls: map[string]int{}}
	rc := router.New(b.conn, d.dial(t), router.Options{})
	t.Cleanup(func() { _ = rc.Close() })
	h := &keyState{values: map[string]string{}}
	st, err := changestream.New(rc, changestream.Config{Topic: "t", Partition: 0,
		Backoff: changestream.Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}}, h)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })

	want := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i%4)] = fmt.Sprintf("v%d", i)
		}
		return m
	}
	require.Eventually(t, func() bool { v, _ := h.snapshot(); return maps.Equal(v, want(6)) }, 10*time.Second, 20*time.Millisecond)
	// The topic's description and the stream went straight to the owner.
	require.Equal(t, 2, d.count(a.srv.GRPCAddr()))

	require.NoError(t, a.srv.Close())
	b.waitReadyz(t, "cluster: active", 5*time.Second)
	produce(6, 11)
	require.Eventually(t, func() bool { v, _ := h.snapshot(); return maps.Equal(v, want(11)) }, 10*time.Second, 20*time.Millisecond,
		"state after the failover")
	require.Equal(t, int64(11), st.Checkpoint().NextOffset)
	// The resumed stream went to b straight or through the seed (b too),
	// depending on whether b answered DescribeCluster before it was done
	// taking over; either way the next calls go straight to b.
	before := d.count(b.srv.GRPCAddr())
	require.Eventually(t, func() bool {
		_, err := sharelogv1.NewLogServiceClient(rc).ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: "t", Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
		return err == nil && d.count(b.srv.GRPCAddr()) > before
	}, 5*time.Second, 50*time.Millisecond)
}
