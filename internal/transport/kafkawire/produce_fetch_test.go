package kafkawire

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProduceConsumeEveryCodec produces with each codec kgo has and reads
// the records back through the store and through a direct kgo consumer.
func TestProduceConsumeEveryCodec(t *testing.T) {
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.createTopic("t", 1)
			ctx := testCtx(t)
			p := f.client(kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic("t"))
			var want []*kgo.Record
			for i := range 20 {
				r := &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: bytes.Repeat([]byte{byte(i)}, 100),
					Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}
				want = append(want, r)
			}
			want = append(want, &kgo.Record{Key: []byte("tomb")}) // nil value: a tombstone
			if err := p.ProduceSync(ctx, want...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			_, hw, err := f.store.Bounds("t", 0)
			if err != nil || hw != int64(len(want)) {
				t.Fatalf("high watermark %d, %v; want %d", hw, err, len(want))
			}
			c := f.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart()}}))
			got := poll(t, c, len(want))
			for i, r := range got {
				w := want[i]
				if r.Offset != int64(i) || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) ||
					(r.Value == nil) != (w.Value == nil) || len(r.Headers) != len(w.Headers) {
					t.Fatalf("record %d: got offset %d key %q value %x headers %v", i, r.Offset, r.Key, r.Value, r.Headers)
				}
				if r.Timestamp.UnixMilli() != w.Timestamp.UnixMilli() {
					t.Fatalf("record %d: timestamp %v, produced %v", i, r.Timestamp, w.Timestamp)
				}
			}
		})
	}
}

// poll reads exactly n records or fails.
func poll(t *testing.T, c *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	var got []*kgo.Record
	for len(got) < n {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d records before the deadline", len(got), n)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("fetch errors: %v", errs)
		}
		got = append(got, fs.Records()...)
	}
	if len(got) != n {
		t.Fatalf("got %d records, want %d", len(got), n)
	}
	return got
}

// TestConsumeFromLatestAndTimestamp starts consumers at the end and at a
// timestamp and checks where their first record is.
func TestConsumeFromLatestAndTimestamp(t *testing.T) {
	f := newFixture(t)
	f.createTopic("t", 1)
	ctx := testCtx(t)
	p := f.client(kgo.DefaultProduceTopic("t"))
	base := time.UnixMilli(1_700_000_000_000)
	for i := range 10 {
		r := &kgo.Record{Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * time.Second)}
		if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	byTime := f.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AfterMilli(base.Add(6500 * time.Millisecond).UnixMilli())}}))
	got := poll(t, byTime, 3)
	if got[0].Offset != 7 {
		t.Fatalf("by timestamp: first offset %d, want 7", got[0].Offset)
	}
	byTime.Close() // its long-poll must not be mistaken for the next consumer's
	waitFor(t, func() bool { return f.log.Polling() == 0 })

	latest := f.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtEnd()}}))
	done := make(chan []*kgo.Record, 1)
	go func() { done <- latest.PollFetches(ctx).Records() }()
	// The consumer long-polls at the end; the next record is the only one it sees.
	waitFor(t, func() bool { return f.log.Polling() > 0 })
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("new")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; len(r) != 1 || r[0].Offset != 10 || string(r[0].Value) != "new" {
		if len(r) == 0 {
			t.Fatal("from latest: no record")
		}
		t.Fatalf("from latest: got offset %d value %q", r[0].Offset, r[0].Value)
	}
}
