package kafkawire

import (
	"errors"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// batchHeader is what a Fetch batch says of its records.
type batchHeader struct {
	base, last int64
	pid        int64
	epoch      int16
	seq        int32
	n          int32
}

func readBatches(t *testing.T, raw []byte) []batchHeader {
	t.Helper()
	var out []batchHeader
	for len(raw) > 0 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			t.Fatal(err)
		}
		if crc32Checksum(raw[batchCRCStart:12+int(b.Length)]) != uint32(b.CRC) {
			t.Fatalf("batch at %d: bad CRC", b.FirstOffset)
		}
		out = append(out, batchHeader{b.FirstOffset, b.FirstOffset + int64(b.LastOffsetDelta), b.ProducerID, b.ProducerEpoch, b.FirstSequence, b.NumRecords})
		raw = raw[12+int(b.Length):]
	}
	return out
}

// Fetch answers each run of one idempotent producer's records as one batch
// with its producer id, epoch and base sequence, and records without a
// producer in batches of -1s: a new batch where the producer, its epoch or
// the sequence-to-offset step changes.
func TestFetchBatchesKeepProducerFields(t *testing.T) {
	rec := func(off int64, pid int64, epoch int16, seq int32) logstore.Record {
		return logstore.Record{Offset: off, Timestamp: 1, Value: []byte("v"), ProducerID: pid, ProducerEpoch: epoch, Sequence: seq}
	}
	recs := []logstore.Record{
		rec(0, 0, 0, 0), rec(1, 0, 0, 0), // no producer
		rec(2, 7, 0, 0), rec(3, 7, 0, 1), rec(4, 7, 0, 2), // producer 7 from sequence 0
		rec(5, 7, 0, 3),                  // its next batch: the same run
		rec(7, 7, 0, 5),                  // offset 6 compacted away: sequence still matches
		rec(8, 7, 1, 0), rec(9, 7, 1, 1), // a new epoch
		rec(10, 9, 0, 4),                               // another producer
		rec(11, 9, 0, 9),                               // a sequence that does not follow
		rec(12, 0, 0, 0),                               // no producer again
		rec(13, 3, 2, math.MaxInt32), rec(14, 3, 2, 0), // the sequence wraps
	}
	got := readBatches(t, appendBatch(nil, recs))
	want := []batchHeader{
		{0, 1, -1, -1, -1, 2},
		{2, 7, 7, 0, 0, 5},
		{8, 9, 7, 1, 0, 2},
		{10, 10, 9, 0, 4, 1},
		{11, 11, 9, 0, 9, 1},
		{12, 12, -1, -1, -1, 1},
		{13, 14, 3, 2, math.MaxInt32, 2},
	}
	if len(got) != len(want) {
		t.Fatalf("batches %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("batch %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A produce's batch with a producer id is the idempotent producer's, alone
// in its partition as Kafka requires; producer id 0 is never one of ours.
func TestDecodeProduceProducer(t *testing.T) {
	batch := func(pid int64, epoch int16, seq int32) []byte {
		plain := appendBatch(nil, []logstore.Record{{Offset: 0, Timestamp: 1, Value: []byte("a")}, {Offset: 1, Timestamp: 1, Value: []byte("b")}})
		var b kmsg.RecordBatch
		if err := b.ReadFrom(plain); err != nil {
			t.Fatal(err)
		}
		b.ProducerID, b.ProducerEpoch, b.FirstSequence = pid, epoch, seq
		return finishBatch(&b)
	}
	recs, p, err := newBatchDecoder(1<<20).decodeProduce(batch(5, 2, 10), 0)
	if err != nil || p == nil || len(recs) != 2 {
		t.Fatalf("idempotent batch: %d records, producer %+v, %v", len(recs), p, err)
	}
	if p.ID != 5 || p.Epoch != 2 || p.BaseSequence != 10 {
		t.Errorf("producer %+v, want id 5 epoch 2 sequence 10", *p)
	}
	if _, p, err := newBatchDecoder(1<<20).decodeProduce(append(batch(-1, -1, -1), batch(-1, -1, -1)...), 0); err != nil || p != nil {
		t.Errorf("two batches without a producer: producer %+v, %v", p, err)
	}
	for name, raw := range map[string][]byte{
		"idempotent then plain": append(batch(5, 0, 0), batch(-1, -1, -1)...),
		"plain then idempotent": append(batch(-1, -1, -1), batch(5, 0, 0)...),
		"two idempotent":        append(batch(5, 0, 0), batch(5, 0, 2)...),
	} {
		if recs, _, err := newBatchDecoder(1<<20).decodeProduce(raw, 0); !errors.Is(err, errInvalidRecord) || recs != nil {
			t.Errorf("%s: %d records, %v; want errInvalidRecord", name, len(recs), err)
		}
	}
	if _, _, err := newBatchDecoder(1<<20).decodeProduce(batch(0, 0, 0), 0); !errors.Is(err, errUnknownProducer) {
		t.Errorf("producer id 0: %v; want errUnknownProducer", err)
	}
}
