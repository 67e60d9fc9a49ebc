package logstore_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

const (
	benchValueSize = 1024
	benchBatch     = 100
)

func benchRecords() []logstore.Record {
	recs := make([]logstore.Record, benchBatch)
	for i := range recs {
		v := make([]byte, benchValueSize)
		for j := range v {
			v[j] = byte(i + j)
		}
		recs[i] = logstore.Record{Key: []byte(fmt.Sprintf("key-%08d", i)), Value: v, Timestamp: time.Now().UnixMilli()}
	}
	return recs
}

// BenchmarkAppend measures Append of 100 records of 1 KiB per call. With
// several producers (one partition) fsync=always shows group commit.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []logstore.FsyncMode{logstore.FsyncNever, logstore.FsyncAlways} {
		for _, producers := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("fsync=%s/producers=%d", mode, producers), func(b *testing.B) {
				s, err := logstore.Open(b.TempDir(), logstore.Options{Fsync: mode})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if _, err := s.CreateTopic(ctx, "bench", 1, logstore.TopicConfig{RetentionMs: -1}); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(benchBatch * benchValueSize)
				b.ReportAllocs()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range producers {
					recs := benchRecords() // each producer its own batch, as separate clients
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if _, err := s.Append(ctx, "bench", 0, recs); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "records/s")
			})
		}
	}
}

// BenchmarkRead measures sequential Reads of 100 records of 1 KiB.
func BenchmarkRead(b *testing.B) {
	const total = 50_000 // ~52 MB: several default-size segments are not needed, page cache is warm
	s, err := logstore.Open(b.TempDir(), logstore.Options{Fsync: logstore.FsyncNever})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateTopic(ctx, "bench", 1, logstore.TopicConfig{RetentionMs: -1, SegmentBytes: 16 << 20}); err != nil {
		b.Fatal(err)
	}
	recs := benchRecords()
	for i := 0; i < total; i += benchBatch {
		if _, err := s.Append(ctx, "bench", 0, recs); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(benchBatch * benchValueSize)
	b.ReportAllocs()
	b.ResetTimer()
	off := int64(0)
	n := 0
	for range b.N {
		got, err := s.Read(ctx, "bench", 0, off, benchBatch, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != benchBatch {
			b.Fatalf("read %d records at %d", len(got), off)
		}
		n += len(got)
		off += int64(len(got))
		if off >= total {
			off = 0
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
