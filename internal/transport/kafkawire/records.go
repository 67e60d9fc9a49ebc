package kafkawire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/broker"
)

var (
	errCorruptBatch     = errors.New("corrupt record batch")
	errInvalidRecord    = errors.New("invalid record")
	errUnsupportedCodec = errors.New("unsupported compression codec")
	errRecordTooLarge   = errors.New("record batch too large")
	errUnknownProducer  = errors.New("unknown producer id")
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// RecordBatch v2 layout: the fixed header is 61 bytes; batchLength counts
// from byte 12 (after baseOffset and itself); the CRC-32C covers byte 21
// (attributes) to the end.
const (
	batchHeaderLen = 61
	batchCRCStart  = 21
	attrCodecMask  = 0x07
	attrLogAppend  = 0x08
	attrTxn        = 0x10
	attrControl    = 0x20
)

const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLz4    = 3
	codecZstd   = 4
)

// batchDecoder decodes client record batches into log records, capping the
// decompressed bytes of one request at max: one decoder serves one
// request, and every partition's batches draw from the same budget.
type batchDecoder struct {
	max, budget int
	// txn: the last decodeProduceTo's batch is transactional (its
	// producer's open transaction; docs/kafka.md "Transactions").
	txn bool

	zstdOnce sync.Once
	zstd     *zstd.Decoder
	zstdErr  error
}

func newBatchDecoder(max int) *batchDecoder { return &batchDecoder{max: max, budget: max} }

// decodeBatches validates every batch in raw (one partition's records of a
// Produce) and returns their records, timestamps resolved (a batch without
// a create time, or with LogAppendTime, gets now). Nothing is returned
// unless every batch is valid.
func (d *batchDecoder) decodeBatches(raw []byte, now int64) ([]broker.Record, error) {
	recs, _, err := d.decodeProduce(raw, now)
	return recs, err
}

// decodeProduce is decodeBatches that also returns the batch's idempotent
// producer (nil for none): a batch with a producer id >= 0, as Kafka's
// hasProducerId, which must then be the partition's only batch in the
// request (Kafka allows one batch per partition from Produce v3 on; sharelog
// keeps accepting several without a producer, each appended in order).
func (d *batchDecoder) decodeProduce(raw []byte, now int64) ([]broker.Record, *broker.BatchProducer, error) {
	return d.decodeProduceTo(raw, now, "", nil)
}

// decodeProduceTo is decodeProduce for a partition of topic, whose config
// cfg (nil: none) rules its batches: a batch larger, as sent, than its
// max.message.bytes is MESSAGE_TOO_LARGE (broker.CheckBatchSize), and with
// message.timestamp.type LogAppendTime every record gets now
// (broker.LogAppendTime).
func (d *batchDecoder) decodeProduceTo(raw []byte, now int64, topic string, cfg *broker.TopicConfig) ([]broker.Record, *broker.BatchProducer, error) {
	topicLogAppend := cfg != nil && broker.LogAppendTime(*cfg)
	if len(raw) == 0 {
		return nil, nil, fmt.Errorf("%w: no record batch", errCorruptBatch)
	}
	var out []broker.Record
	var producer *broker.BatchProducer
	budget := d.budget
	d.txn = false
	for batches := 0; len(raw) > 0; batches++ {
		if len(raw) < batchHeaderLen {
			return nil, nil, fmt.Errorf("%w: %d bytes, shorter than a batch header", errCorruptBatch, len(raw))
		}
		length := int32(binary.BigEndian.Uint32(raw[8:12]))
		if length < batchHeaderLen-12 || int64(length) > int64(len(raw)-12) {
			return nil, nil, fmt.Errorf("%w: batch length %d with %d bytes left", errCorruptBatch, length, len(raw)-12)
		}
		one := raw[:12+int(length)]
		raw = raw[len(one):]
		if cfg != nil {
			if err := broker.CheckBatchSize(topic, *cfg, len(one)); err != nil {
				return nil, nil, err
			}
		}
		var b kmsg.RecordBatch
		if err := b.ReadFrom(one); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", errCorruptBatch, err)
		}
		if b.Magic != 2 {
			return nil, nil, fmt.Errorf("%w: magic %d, only 2 is accepted", errCorruptBatch, b.Magic)
		}
		if crc32Checksum(one[batchCRCStart:]) != uint32(b.CRC) {
			return nil, nil, fmt.Errorf("%w: CRC-32C mismatch", errCorruptBatch)
		}
		if b.Attributes&attrControl != 0 {
			return nil, nil, fmt.Errorf("%w: control batches are not accepted from clients", errInvalidRecord)
		}
		if b.Attributes&attrTxn != 0 {
			if b.ProducerID < 0 {
				return nil, nil, fmt.Errorf("%w: a transactional batch without a producer id", errInvalidRecord)
			}
			d.txn = true
		}
		if b.NumRecords <= 0 || b.LastOffsetDelta != b.NumRecords-1 {
			return nil, nil, fmt.Errorf("%w: %d records with last offset delta %d", errInvalidRecord, b.NumRecords, b.LastOffsetDelta)
		}
		if b.ProducerID >= 0 || producer != nil {
			if batches > 0 {
				return nil, nil, fmt.Errorf("%w: an idempotent producer's batch must be the only batch of its partition in a request", errInvalidRecord)
			}
			if b.ProducerID == 0 {
				return nil, nil, fmt.Errorf("%w: producer id 0 was never allocated by this server (its ids start at 1)", errUnknownProducer)
			}
			producer = &broker.BatchProducer{ID: b.ProducerID, Epoch: b.ProducerEpoch, BaseSequence: b.FirstSequence}
		}
		payload, err := d.decompress(int(b.Attributes&attrCodecMask), b.Records, budget)
		if err != nil {
			return nil, nil, err
		}
		budget -= len(payload)
		logAppend := topicLogAppend || b.Attributes&attrLogAppend != 0 || b.FirstTimestamp < 0
		out, err = appendRecords(out, payload, b.NumRecords, b.FirstTimestamp, logAppend, now)
		if err != nil {
			return nil, nil, err
		}
	}
	d.budget = budget
	return out, producer, nil
}

// appendRecords parses n records from payload. Record offset deltas must be
// 0..n-1 and the payload must hold exactly n records.
func appendRecords(out []broker.Record, payload []byte, n int32, baseTs int64, logAppend bool, now int64) ([]broker.Record, error) {
	for i := int32(0); i < n; i++ {
		l, sz := kbin.Varint(payload)
		if sz <= 0 || l <= 0 || int64(l) > int64(len(payload)-sz) {
			return nil, fmt.Errorf("%w: record %d: bad length", errInvalidRecord, i)
		}
		var r kmsg.Record
		if err := r.ReadFrom(payload[:sz+int(l)]); err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", errInvalidRecord, i, err)
		}
		payload = payload[sz+int(l):]
		if r.OffsetDelta != i {
			return nil, fmt.Errorf("%w: record %d has offset delta %d", errInvalidRecord, i, r.OffsetDelta)
		}
		ts := now
		if !logAppend {
			ts = baseTs + r.TimestampDelta64
			if ts < 0 {
				return nil, fmt.Errorf("%w: record %d has negative timestamp %d", errInvalidRecord, i, ts)
			}
		}
		rec := broker.Record{Timestamp: ts, Key: r.Key, Value: r.Value}
		if len(r.Headers) > 0 {
			rec.Headers = make([]broker.Header, len(r.Headers))
			for j, h := range r.Headers {
				rec.Headers[j] = broker.Header{Key: h.Key, Value: h.Value}
			}
		}
		out = append(out, rec)
	}
	if len(payload) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last record", errInvalidRecord, len(payload))
	}
	return out, nil
}

// decompress returns src decoded by codec, at most max bytes.
func (d *batchDecoder) decompress(codec int, src []byte, max int) ([]byte, error) {
	if max < 0 {
		max = 0
	}
	tooLarge := func() error {
		return fmt.Errorf("%w: decompressed records exceed --kafka-max-request-bytes (%d)", errRecordTooLarge, d.max)
	}
	switch codec {
	case codecNone:
		if len(src) > max {
			return nil, tooLarge()
		}
		return src, nil
	case codecGzip:
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", errCorruptBatch, err)
		}
		defer zr.Close()
		return readBounded(zr, max, "gzip", tooLarge)
	case codecSnappy:
		return decodeSnappy(src, max, tooLarge)
	case codecLz4:
		return readBounded(lz4.NewReader(bytes.NewReader(src)), max, "lz4", tooLarge)
	case codecZstd:
		d.zstdOnce.Do(func() {
			d.zstd, d.zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderMaxMemory(uint64(d.max)+1))
		})
		if d.zstdErr != nil {
			return nil, d.zstdErr
		}
		out, err := d.zstd.DecodeAll(src, nil)
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return nil, tooLarge()
		}
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %w", errCorruptBatch, err)
		}
		if len(out) > max {
			return nil, tooLarge()
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%w: codec %d", errUnsupportedCodec, codec)
	}
}

func readBounded(r io.Reader, max int, name string, tooLarge func() error) ([]byte, error) {
	var out bytes.Buffer
	n, err := out.ReadFrom(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errCorruptBatch, name, err)
	}
	if n > int64(max) {
		return nil, tooLarge()
	}
	return out.Bytes(), nil
}

// xerialMagic starts a snappy stream in the xerial framing Java clients use:
// the magic, two int32 versions, then blocks of int32 length + raw snappy.
var xerialMagic = []byte{130, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

func decodeSnappy(src []byte, max int, tooLarge func() error) ([]byte, error) {
	block := func(dst, b []byte) ([]byte, error) {
		l, err := s2.DecodedLen(b)
		if err != nil {
			return nil, fmt.Errorf("%w: snappy: %w", errCorruptBatch, err)
		}
		if l > max-len(dst) {
			return nil, tooLarge()
		}
		out, err := s2.Decode(nil, b)
		if err != nil {
			return nil, fmt.Errorf("%w: snappy: %w", errCorruptBatch, err)
		}
		return append(dst, out...), nil
	}
	if len(src) < 16 || !bytes.HasPrefix(src, xerialMagic) {
		return block(nil, src)
	}
	var out []byte
	for rest := src[16:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: xerial snappy: truncated block length", errCorruptBatch)
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: xerial snappy: block of %d bytes with %d left", errCorruptBatch, n, len(rest))
		}
		var err error
		if out, err = block(out, rest[:n]); err != nil {
			return nil, err
		}
		rest = rest[n:]
	}
	return out, nil
}

// appendBatch encodes recs (ascending offsets, possibly with gaps) as
// uncompressed RecordBatch v2s with CreateTime timestamps: one batch per
// run of records of one idempotent producer (sameBatch), with its producer
// id, epoch and base sequence in the header, and one per run of records
// without a producer (producer id -1, epoch -1, base sequence -1).
func appendBatch(dst []byte, recs []broker.Record) []byte {
	return appendBatchAt(dst, recs, 0)
}

// appendBatchAt is appendBatch with the partition leader epoch of the
// leader that serves it (Fetch: a consumer validates its position with
// that epoch after a change of leader, OffsetForLeaderEpoch).
func appendBatchAt(dst []byte, recs []broker.Record, leaderEpoch int32) []byte {
	return appendTopicBatches(dst, recs, leaderEpoch, false)
}

// appendTopicBatches is appendBatchAt for a topic whose records carry the
// log append time when logAppend (message.timestamp.type LogAppendTime):
// then each batch holds records of one timestamp and is marked
// LogAppendTime, its MaxTimestamp that time, as Kafka's (a consumer gives
// every record of such a batch the batch's MaxTimestamp).
func appendTopicBatches(dst []byte, recs []broker.Record, leaderEpoch int32, logAppend bool) []byte {
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && sameBatch(&recs[i], &recs[j]) && (!logAppend || recs[j].Timestamp == recs[i].Timestamp) {
			j++
		}
		dst = appendOneBatch(dst, recs[i:j], leaderEpoch, logAppend)
		i = j
	}
	return dst
}

// sameBatch reports whether r can follow first in first's batch: both
// without a producer, or both of one producer and epoch with r's sequence
// as far after first's as its offset (the batch header's base sequence
// plus a record's offset delta is its sequence, as in Kafka, wrapping
// after math.MaxInt32). Two batches a producer appended back to back are
// one run and answered as one batch, which says the same of each record.
//
// A transaction marker is a control batch of its own, and a run of
// transactional records is a transactional batch, as Kafka's.
func sameBatch(first, r *broker.Record) bool {
	if first.Control || r.Control || first.Transactional != r.Transactional {
		return false
	}
	if first.ProducerID == 0 || r.ProducerID == 0 {
		return first.ProducerID == r.ProducerID
	}
	if r.ProducerID != first.ProducerID || r.ProducerEpoch != first.ProducerEpoch {
		return false
	}
	const seqSpace = int64(math.MaxInt32) + 1
	d := r.Offset - first.Offset
	return d < seqSpace && (int64(first.Sequence)+d)%seqSpace == int64(r.Sequence)
}

// appendOneBatch encodes recs as one batch, with recs[0]'s producer fields.
func appendOneBatch(dst []byte, recs []broker.Record, leaderEpoch int32, logAppend bool) []byte {
	if recs[0].Control {
		// The marker's stored value is the control record's key and
		// value (broker.MarkerKeyValue); clients skip the batch.
		if k, v, ok := broker.MarkerKeyValue(recs[0].Value); ok {
			m := recs[0]
			m.Key, m.Value = k, v
			recs = []broker.Record{m}
		}
	}
	pid, epoch, seq := int64(-1), int16(-1), int32(-1)
	if recs[0].ProducerID != 0 {
		pid, epoch, seq = recs[0].ProducerID, recs[0].ProducerEpoch, recs[0].Sequence
	}
	base := recs[0].Offset
	firstTs, maxTs := recs[0].Timestamp, recs[0].Timestamp
	for i := range recs {
		firstTs = min(firstTs, recs[i].Timestamp)
		maxTs = max(maxTs, recs[i].Timestamp)
	}
	// Size the buffer once: growing it record by record was most of the
	// Fetch path's CPU (benchmark K1).
	need := 61 // batch header
	for i := range recs {
		need += 5 + recordLen(&recs[i], base, firstTs)
	}
	dst = slices.Grow(dst, need)
	start := len(dst)
	dst = kbin.AppendInt64(dst, base)
	dst = kbin.AppendInt32(dst, 0) // length, set below
	dst = kbin.AppendInt32(dst, leaderEpoch)
	dst = kbin.AppendInt8(dst, 2)  // magic
	dst = kbin.AppendInt32(dst, 0) // crc, set below
	var attrs int16                // no codec, CreateTime
	if logAppend {
		attrs |= attrLogAppend
	}
	if recs[0].Transactional {
		attrs |= attrTxn
	}
	if recs[0].Control {
		attrs |= attrControl
	}
	dst = kbin.AppendInt16(dst, attrs)
	dst = kbin.AppendInt32(dst, int32(recs[len(recs)-1].Offset-base))
	dst = kbin.AppendInt64(dst, firstTs)
	dst = kbin.AppendInt64(dst, maxTs)
	dst = kbin.AppendInt64(dst, pid)
	dst = kbin.AppendInt16(dst, epoch)
	dst = kbin.AppendInt32(dst, seq) // base sequence
	dst = kbin.AppendInt32(dst, int32(len(recs)))
	for i := range recs {
		dst = appendRecord(dst, &recs[i], base, firstTs)
	}
	binary.BigEndian.PutUint32(dst[start+8:], uint32(len(dst)-start-12))
	binary.BigEndian.PutUint32(dst[start+17:], crc32Checksum(dst[start+batchCRCStart:]))
	return dst
}

// recordLen is the encoded size of r in a batch starting at base and
// firstTs, without its own length prefix.
func recordLen(r *broker.Record, base, firstTs int64) int {
	n := 1 + kbin.VarlongLen(r.Timestamp-firstTs) + kbin.VarintLen(int32(r.Offset-base)) + varintBytesLen(r.Key) +
		varintBytesLen(r.Value) + kbin.VarintLen(int32(len(r.Headers)))
	for _, h := range r.Headers {
		n += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + varintBytesLen(h.Value)
	}
	return n
}

func appendRecord(dst []byte, r *broker.Record, base, firstTs int64) []byte {
	tsd := r.Timestamp - firstTs
	od := int32(r.Offset - base)
	n := recordLen(r, base, firstTs)
	dst = kbin.AppendVarint(dst, int32(n))
	dst = kbin.AppendInt8(dst, 0)
	dst = kbin.AppendVarlong(dst, tsd)
	dst = kbin.AppendVarint(dst, od)
	dst = kbin.AppendVarintBytes(dst, r.Key)
	dst = kbin.AppendVarintBytes(dst, r.Value)
	dst = kbin.AppendVarint(dst, int32(len(r.Headers)))
	for _, h := range r.Headers {
		dst = kbin.AppendVarintString(dst, h.Key)
		dst = kbin.AppendVarintBytes(dst, h.Value)
	}
	return dst
}

func varintBytesLen(b []byte) int {
	if b == nil {
		return kbin.VarintLen(-1)
	}
	return kbin.VarintLen(int32(len(b))) + len(b)
}

func crc32Checksum(b []byte) uint32 { return crc32.Checksum(b, crc32c) }
