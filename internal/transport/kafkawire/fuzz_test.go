package kafkawire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// compressedBatch is a valid batch of recs with its records section
// compressed by codec (kgo's compressor, as a client would).
func compressedBatch(t testing.TB, codec kgo.CompressionCodec, recs []logstore.Record) []byte {
	t.Helper()
	plain := appendBatch(nil, recs)
	var b kmsg.RecordBatch
	if err := b.ReadFrom(plain); err != nil {
		t.Fatal(err)
	}
	c, err := kgo.DefaultCompressor(codec)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	out, typ := c.Compress(&buf, b.Records)
	b.Records = append([]byte(nil), out...)
	b.Attributes = int16(typ)
	return finishBatch(&b)
}

// finishBatch encodes b with its length and CRC computed.
func finishBatch(b *kmsg.RecordBatch) []byte {
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	fixCRC(raw)
	return raw
}

// bombBatch claims one record whose compressed records section inflates to
// n zero bytes.
func bombBatch(t testing.TB, codec kgo.CompressionCodec, n int) []byte {
	t.Helper()
	c, err := kgo.DefaultCompressor(codec)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	out, typ := c.Compress(&buf, make([]byte, n))
	b := kmsg.RecordBatch{Magic: 2, Attributes: int16(typ), NumRecords: 1, Records: append([]byte(nil), out...),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1} // no producer, as a client without idempotence
	return finishBatch(&b)
}

func xerialBatch(t testing.TB, recs []logstore.Record, blocks int) []byte {
	t.Helper()
	plain := appendBatch(nil, recs)
	var b kmsg.RecordBatch
	if err := b.ReadFrom(plain); err != nil {
		t.Fatal(err)
	}
	x := append(append([]byte(nil), xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1)
	src := b.Records
	step := (len(src) + blocks - 1) / blocks
	for len(src) > 0 {
		n := min(step, len(src))
		blk := s2.EncodeSnappy(nil, src[:n])
		x = binary.BigEndian.AppendUint32(x, uint32(len(blk)))
		x = append(x, blk...)
		src = src[n:]
	}
	b.Records, b.Attributes = x, codecSnappy
	return finishBatch(&b)
}

var sampleRecs = []logstore.Record{
	{Offset: 0, Timestamp: 1000, Key: []byte("k"), Value: []byte("v"), Headers: []logstore.Header{{Key: "h", Value: []byte("x")}}},
	{Offset: 1, Timestamp: 1001, Key: nil, Value: nil},
	{Offset: 2, Timestamp: 999, Value: bytes.Repeat([]byte("abc"), 100)},
}

func TestDecodeEveryCodecAndXerial(t *testing.T) {
	d := newBatchDecoder(1 << 20)
	check := func(name string, raw []byte) {
		recs, err := d.decodeBatches(raw, 5)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(recs) != 3 || string(recs[0].Key) != "k" || recs[1].Value != nil || recs[1].Key != nil ||
			recs[2].Timestamp != 999 || len(recs[2].Value) != 300 || recs[0].Headers[0].Key != "h" {
			t.Fatalf("%s: decoded %+v", name, recs)
		}
	}
	check("none", appendBatch(nil, sampleRecs))
	for name, c := range map[string]kgo.CompressionCodec{"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()} {
		check(name, compressedBatch(t, c, sampleRecs))
	}
	check("xerial", xerialBatch(t, sampleRecs, 3))
}

// TestCompressionBombsAreCapped: a small batch inflating beyond the cap is
// MESSAGE_TOO_LARGE for every codec, and nothing is returned.
func TestCompressionBombsAreCapped(t *testing.T) {
	const limit = 64 << 10
	for name, c := range map[string]kgo.CompressionCodec{"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()} {
		bomb := bombBatch(t, c, 1<<20) // 16 times the cap
		if len(bomb) > limit {
			t.Fatalf("%s: the bomb itself is %d bytes", name, len(bomb))
		}
		recs, err := newBatchDecoder(limit).decodeBatches(bomb, 0)
		if !errors.Is(err, errRecordTooLarge) || recs != nil {
			t.Fatalf("%s: %d records, %v; want errRecordTooLarge", name, len(recs), err)
		}
	}
	// Two batches each under the cap but together over it.
	half := compressedBatch(t, kgo.GzipCompression(), []logstore.Record{{Timestamp: 1, Value: make([]byte, limit/2)}})
	if _, err := newBatchDecoder(limit).decodeBatches(half, 0); err != nil {
		t.Fatalf("one half: %v", err)
	}
	if _, err := newBatchDecoder(limit).decodeBatches(append(append([]byte(nil), half...), half...), 0); !errors.Is(err, errRecordTooLarge) {
		t.Fatalf("two halves in one partition: %v", err)
	}
	// Two partitions of one request share the budget too.
	one := newBatchDecoder(limit)
	if _, err := one.decodeBatches(half, 0); err != nil {
		t.Fatalf("first partition: %v", err)
	}
	if _, err := one.decodeBatches(half, 0); !errors.Is(err, errRecordTooLarge) {
		t.Fatalf("second partition of the same request: %v", err)
	}
}

// FuzzDecodeBatches: any bytes decode or fail cleanly, never panic, and
// never yield more record bytes than the cap allows.
func FuzzDecodeBatches(f *testing.F) {
	f.Add(appendBatch(nil, sampleRecs))
	for _, c := range []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		f.Add(compressedBatch(f, c, sampleRecs))
		f.Add(bombBatch(f, c, 1<<20))
	}
	f.Add(xerialBatch(f, sampleRecs, 2))
	good := appendBatch(nil, sampleRecs)
	f.Add(good[:len(good)-1])
	f.Add(good[:61])
	lying := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(lying[57:], 1<<30) // record count far beyond the bytes
	fixCRC(lying)
	f.Add(lying)
	truncatedVarint := append([]byte(nil), good[:61]...)
	truncatedVarint = append(truncatedVarint, 0xff, 0xff, 0xff)
	binary.BigEndian.PutUint32(truncatedVarint[8:], uint32(len(truncatedVarint)-12))
	fixCRC(truncatedVarint)
	f.Add(truncatedVarint)
	const limit = 256 << 10
	f.Fuzz(func(t *testing.T, raw []byte) {
		d := newBatchDecoder(limit)
		recs, err := d.decodeBatches(raw, 1)
		if err != nil {
			if recs != nil {
				t.Fatal("records returned with an error")
			}
			return
		}
		n := 0
		for i := range recs {
			n += recs[i].Size()
		}
		if n > limit {
			t.Fatalf("decoded %d record bytes past the cap %d", n, limit)
		}
	})
}

// FuzzConnection feeds arbitrary bytes to a connection's frame reader and
// handlers: no panic, no frame over the cap, at most that connection closed.
func FuzzConnection(f *testing.F) {
	hdr := func(key, version int16, body []byte) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(key))
		b = binary.BigEndian.AppendUint16(b, uint16(version))
		b = binary.BigEndian.AppendUint32(b, 1)
		b = append(b, 0xff, 0xff) // null client id
		if version >= 9 || key == apiVersionsKey && version >= 3 {
			b = append(b, 0)
		}
		return append(b, body...)
	}
	frame := func(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }
	f.Add(frame(hdr(18, 0, nil)))
	f.Add(frame(hdr(18, 9, nil)))
	f.Add(frame(hdr(3, 1, []byte{0xff, 0xff, 0xff, 0xff})))
	f.Add(frame(hdr(0, 9, produceRequest("t", appendBatch(nil, sampleRecs)).AppendTo(nil))))
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0})
	f.Add(frame(hdr(1, 12, []byte{0x80, 0x80, 0x80, 0x80, 0x80})))

	store := logstore.NewMem()
	f.Cleanup(func() { store.Close() })
	if _, err := store.CreateTopic(context.Background(), "t", 2, logstore.TopicConfig{SegmentBytes: 1 << 20, RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete}); err != nil {
		f.Fatal(err)
	}
	groups, err := consumergroup.Open(consumergroup.Options{Store: groupoffsets.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { groups.Close() })
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = 9, "g", 10000, 10000, "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: (&kmsg.ConsumerMemberMetadata{Topics: []string{"t"}}).AppendTo(nil)}}
	f.Add(frame(hdr(11, 9, join.AppendTo(nil))))
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 8, "g", -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 1, Offset: 3, LeaderEpoch: -1}}}}
	f.Add(frame(hdr(8, 8, commit.AppendTo(nil))))
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version, fetch.Group = 5, "g"
	f.Add(frame(hdr(9, 5, fetch.AppendTo(nil))))
	f.Add(frame(hdr(16, 2, nil)))
	l := &Listener{cfg: Config{MaxRequestBytes: 1 << 16, DefaultPartitions: 1, Groups: groups},
		log:    broker.New(store, broker.Config{SegmentBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)}),
		logger: slog.New(slog.DiscardHandler), clusterID: "fuzz", host: "127.0.0.1", port: 9092}
	l.handlers = l.handlerTable()
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		var buf bytes.Buffer
		c := &conn{l: l}
		for {
			fr, err := readFrame(r, &buf, l.cfg.MaxRequestBytes)
			if err != nil {
				if buf.Cap() > 2*len(in)+4096 {
					t.Fatalf("buffer grew to %d for %d input bytes", buf.Cap(), len(in))
				}
				return
			}
			if len(fr) > int(l.cfg.MaxRequestBytes) {
				t.Fatalf("frame of %d bytes over the cap", len(fr))
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // nothing may wait
			if _, err := c.handle(ctx, fr, nil); err != nil {
				if l.panics.Load() > 0 {
					t.Fatalf("handler panicked: %v", err)
				}
				return // the connection would close
			}
		}
	})
}
