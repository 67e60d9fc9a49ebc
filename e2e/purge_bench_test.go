package e2e

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// fillTopic creates a topic and produces n records of 64 bytes in batches of
// 1000, with segments sized so that n records span about `segments` segments.
func fillTopic(tb testing.TB, s *stack, name string, n, segments int) {
	tb.Helper()
	ctx := context.Background()
	segBytes := int64(max(1024, n*100/segments)) // ~100 bytes a stored record
	_, err := s.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: name, Partitions: 1,
		Config: &sharelogv1.TopicConfig{SegmentBytes: proto.Int64(segBytes)}})
	require.NoError(tb, err)
	p := int32(0)
	val := make([]byte, 64)
	for done := 0; done < n; {
		k := min(1000, n-done)
		recs := make([]*sharelogv1.Record, k)
		for i := range recs {
			recs[i] = &sharelogv1.Record{Value: val}
		}
		_, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: name, Partition: &p, Records: recs})
		require.NoError(tb, err)
		done += k
	}
}

// BenchmarkPurge times one Purge RPC (to the high watermark) of a partition
// holding 10 records in one segment, and of one holding 1M records over ~100
// segments. Target: the two within 2x of each other.
//
//	go test -run '^$' -bench BenchmarkPurge -benchtime 5x ./e2e/
func BenchmarkPurge(b *testing.B) {
	for _, tc := range []struct {
		name     string
		fsync    string
		records  int
		segments int
	}{
		{"fsync=never/records=10", "never", 10, 1},
		{"fsync=never/records=1M", "never", 1_000_000, 100},
		{"fsync=always/records=10", "always", 10, 1},
		{"fsync=always/records=1M", "always", 1_000_000, 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := newStack(b, app.Options{}, func(c *app.Config) { c.Fsync = tc.fsync })
			ctx := context.Background()
			var segs int32
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				name := "purge-" + strconv.Itoa(i)
				fillTopic(b, s, name, tc.records, tc.segments)
				d, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: name})
				require.NoError(b, err)
				segs = d.GetPartitions()[0].GetSegmentCount()
				b.StartTimer()
				resp, err := s.log.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{
					{Topic: name, Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: -1}}}}})
				b.StopTimer()
				require.NoError(b, err)
				require.EqualValues(b, tc.records, resp.GetTopics()[0].GetPartitions()[0].GetLowWatermark())
				_, err = s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: name})
				require.NoError(b, err)
				b.StartTimer()
			}
			b.ReportMetric(float64(segs), "segments")
		})
	}
}

// BenchmarkProduceDuringPurge measures the p99 latency of small produces to
// another topic before a purge of 1M records over 100 segments and while it
// and the reclamation of its segments run. Target: within 1.5x.
//
//	go test -run '^$' -bench BenchmarkProduceDuringPurge -benchtime 3x ./e2e/
func BenchmarkProduceDuringPurge(b *testing.B) {
	s := newStack(b, app.Options{})
	ctx := context.Background()
	_, err := s.log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "live", Partitions: 1})
	require.NoError(b, err)
	var baseline, during []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := "big-" + strconv.Itoa(i)
		fillTopic(b, s, name, 1_000_000, 100)
		b.StartTimer()

		var purging atomic.Bool
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			p := int32(0)
			rec := []*sharelogv1.Record{{Value: make([]byte, 1024)}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := s.log.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "live", Partition: &p, Records: rec})
				if err != nil {
					b.Error(err)
					return
				}
				if purging.Load() {
					during = append(during, time.Since(start))
				} else {
					baseline = append(baseline, time.Since(start))
				}
			}
		}()
		time.Sleep(300 * time.Millisecond)
		purging.Store(true)
		_, err := s.log.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{
			{Topic: name, Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: -1}}}}})
		require.NoError(b, err)
		// "During" lasts until the purged segments have left the disk.
		for {
			d, err := s.log.DescribeTopic(ctx, &sharelogv1.DescribeTopicRequest{Name: name})
			require.NoError(b, err)
			if d.GetPartitions()[0].GetSegmentCount() == 1 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		close(stop)
		<-done
		purging.Store(false)
	}
	p99 := func(ds []time.Duration) float64 {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return float64(ds[len(ds)*99/100].Microseconds())
	}
	b.ReportMetric(p99(baseline), "baseline-p99-µs")
	b.ReportMetric(p99(during), "during-purge-p99-µs")
	b.ReportMetric(float64(len(during)), "produces-during")
}
