package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// BenchmarkOSOHeap measures the heap growth of an OSO snapshot of a whole
// partition of SHARELOG_BENCH_KEYS distinct keys (default 1,000,000; small
// values, 8 MiB segments so the index has many runs plus the active
// segment's in-memory entries), streamed through the real server over gRPC
// to a slow reader. runtime.MemStats.HeapInuse is sampled every 10 ms while
// the snapshot runs; the reported figure is peak - baseline (after the data
// was written and a GC). Server and client share the process, so the figure
// includes the client's receive buffers (bounded by flow control).
//
//	SHARELOG_BENCH_KEYS=1000000 go test -run '^$' -bench BenchmarkOSOHeap -benchtime 1x -timeout 30m ./e2e/
//	SHARELOG_BENCH_KEYS=4000000 go test -run '^$' -bench BenchmarkOSOHeap -benchtime 1x -timeout 30m ./e2e/
func BenchmarkOSOHeap(b *testing.B) {
	keys := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SHARELOG_BENCH_KEYS")); err == nil && v > 0 {
		keys = v
	}
	s := newStack(b, app.Options{}, osoEnabled)
	s.createTopic(b, "heap", 1, &sharelogv1.TopicConfig{SegmentBytes: proto.Int64(8 << 20)})
	p := int32(0)
	for i := 0; i < keys; i += 10000 {
		req := &sharelogv1.ProduceRequest{Topic: "heap", Partition: &p}
		for j := i; j < min(i+10000, keys); j++ {
			req.Records = append(req.Records, &sharelogv1.Record{Key: []byte(fmt.Sprintf("key/%010d", j)), Value: []byte("value-0123456789")})
		}
		_, err := s.log.Produce(context.Background(), req)
		require.NoError(b, err)
	}
	end := int64(keys)
	for b.Loop() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		var peak atomic.Uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peak.Load() {
						peak.Store(ms.HeapInuse)
					}
				}
			}
		})
		cl := sharelogv1.NewChangeStreamServiceClient(s.conn)
		st, err := cl.StreamChanges(context.Background(), &sharelogv1.StreamChangesRequest{
			Topic: "heap", EndOffset: &end, OsoMode: sharelogv1.OsoMode_OSO_MODE_ON_WITH_OFFSET_ADVANCED})
		require.NoError(b, err)
		items := 0
		began := time.Now()
		for n := 0; ; {
			resp, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(b, err)
			for _, r := range resp.GetEvents() {
				if n == 0 {
					require.NotNil(b, r.GetOsoSnapshot(), "an OSO snapshot")
				}
				if r.GetMutation() != nil {
					items++
				}
				if n%2000 == 0 {
					time.Sleep(2 * time.Millisecond) // a slow reader: the server waits on flow control
				}
				n++
			}
		}
		elapsed := time.Since(began)
		close(stop)
		wg.Wait()
		require.Equal(b, keys, items)
		growth := float64(peak.Load()) - float64(base)
		b.ReportMetric(growth/(1<<20), "MiB_heap_growth")
		b.ReportMetric(float64(base)/(1<<20), "MiB_heap_base")
		b.ReportMetric(float64(keys)/elapsed.Seconds(), "keys/s")
	}
}
