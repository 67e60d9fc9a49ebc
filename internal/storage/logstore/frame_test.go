package logstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func encodeOne(r Record, offset int64, last bool) []byte {
	return appendFrame(make([]byte, 0, frameSize(&r)), &r, offset, last)
}

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		rec  Record
	}{
		{"nil key, nil value", Record{Timestamp: 1}},
		{"empty key, empty value", Record{Key: []byte{}, Value: []byte{}, Timestamp: -1}},
		{"key and value", Record{Key: []byte("k"), Value: []byte("value"), Timestamp: 1 << 40}},
		{"headers", Record{Value: []byte("v"), Headers: []Header{{Key: "a", Value: []byte("1")}, {Key: "", Value: nil}, {Key: "e", Value: []byte{}}}}},
		{"binary", Record{Key: []byte{0, 0xff}, Value: bytes.Repeat([]byte{0xab}, 10000)}},
		{"producer", Record{Key: []byte("k"), Value: []byte("v"), ProducerID: 7, ProducerEpoch: 3, Sequence: 41}},
		{"transactional", Record{Key: []byte("k"), Value: []byte("v"), ProducerID: 7, ProducerEpoch: 3, Sequence: 41, Transactional: true}},
		{"marker", Record{Value: []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, ProducerID: 7, ProducerEpoch: 3, Sequence: -1, Transactional: true, Control: true}},
		{"producer extremes", Record{Value: []byte("v"), Headers: []Header{{Key: "h"}}, ProducerID: -1 << 63, ProducerEpoch: -1, Sequence: 1<<31 - 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := encodeOne(tc.rec, 42, true)
			assert.Len(t, b, frameSize(&tc.rec))
			var got Record
			n, fi, err := decodeFrame(b, &got)
			require.NoError(t, err)
			assert.Equal(t, len(b), n)
			assert.Equal(t, frameInfo{offset: 42, timestamp: tc.rec.Timestamp, batchEnd: true}, fi)
			want := tc.rec
			want.Offset = 42
			assert.Equal(t, want, got)
			for i := range len(b) {
				_, _, err := decodeFrame(b[:i], nil)
				assert.ErrorIs(t, err, errShortFrame, "prefix of %d bytes", i)
			}
		})
	}
}

func TestDecodeFrameRejectsDamage(t *testing.T) {
	good := encodeOne(Record{Key: []byte("key"), Value: []byte("value"), Headers: []Header{{Key: "h", Value: []byte("v")}}}, 7, false)
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		_, _, err := decodeFrame(b, nil)
		assert.Error(t, err, "bit flip at byte %d", i)
	}
	// A producer bit without the producer fields, and producer id 0 (which
	// means "none" and is never written), are damage.
	noFields := bytes.Clone(good)
	noFields[8] |= attrProducer
	binary.BigEndian.PutUint32(noFields[4:], crc32.Checksum(noFields[frameHeaderSize:], castagnoli))
	_, _, err := decodeFrame(noFields, nil)
	assert.ErrorIs(t, err, errBadFrame)
	zeroID := encodeOne(Record{Value: []byte("v"), ProducerID: 1}, 7, false)
	binary.BigEndian.PutUint64(zeroID[len(zeroID)-producerSize:], 0)
	binary.BigEndian.PutUint32(zeroID[4:], crc32.Checksum(zeroID[frameHeaderSize:], castagnoli))
	_, _, err = decodeFrame(zeroID, nil)
	assert.ErrorIs(t, err, errBadFrame)

	// A transactional bit without a producer, and a marker bit without the
	// transactional one, are damage.
	for _, bits := range []byte{attrTxn, attrControl, attrControl | attrProducer} {
		b := encodeOne(Record{Value: []byte("v"), ProducerID: 1}, 7, false)
		if bits&attrProducer == 0 {
			b = bytes.Clone(good)
		}
		b[8] |= bits
		binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[frameHeaderSize:], castagnoli))
		_, _, err = decodeFrame(b, nil)
		assert.ErrorIs(t, err, errBadFrame, "attributes %#x", b[8])
	}

	huge := bytes.Clone(good)
	huge[0] = 0x7f // body length ~2 GiB: refused before anything is allocated
	_, _, err = decodeFrame(huge, nil)
	assert.ErrorIs(t, err, errBadFrame)
}

// FuzzDecodeFrame feeds arbitrary bytes to the decoder of on-disk frames: it
// must never panic or over-allocate, and whatever it accepts must re-encode
// to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(encodeOne(Record{}, 0, true))
	f.Add(encodeOne(Record{Key: []byte{}, Value: []byte{}}, 1, false))
	f.Add(encodeOne(Record{Key: []byte("k"), Value: []byte("v"), Timestamp: 5, Headers: []Header{{Key: "a", Value: nil}, {Key: "b", Value: []byte("c")}}}, 1<<40, true))
	two := append(encodeOne(Record{Value: []byte("1")}, 0, false), encodeOne(Record{Value: []byte("2")}, 1, true)...)
	f.Add(two)
	f.Add(two[:len(two)-3])
	f.Add(encodeOne(Record{Key: []byte("k"), Value: []byte("v"), ProducerID: 9, ProducerEpoch: 1, Sequence: 4}, 3, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
		// Random bytes rarely pass the CRC; also try them as a body inside
		// a valid header so the body parser is fuzzed too.
		framed := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
		framed = binary.BigEndian.AppendUint32(framed, crc32.Checksum(b, castagnoli))
		checkDecode(t, append(framed, b...))
	})
}

func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	var rec Record
	n, fi, err := decodeFrame(b, &rec)
	if err != nil {
		if !errors.Is(err, errShortFrame) && !errors.Is(err, errBadFrame) {
			t.Fatalf("unexpected error type %v", err)
		}
		return
	}
	if n < minFrameSize || n > len(b) {
		t.Fatalf("length %d outside [%d, %d]", n, minFrameSize, len(b))
	}
	if rec.Offset != fi.offset || rec.Timestamp != fi.timestamp {
		t.Fatalf("record %+v disagrees with info %+v", rec, fi)
	}
	again := appendFrame(nil, &rec, fi.offset, fi.batchEnd)
	if !bytes.Equal(again, b[:n]) {
		t.Fatalf("re-encoding differs:\n%x\n%x", again, b[:n])
	}
	// The validation-only path agrees.
	n2, fi2, err := decodeFrame(b, nil)
	if err != nil || n2 != n || fi2 != fi {
		t.Fatalf("decode without record: %d %+v %v", n2, fi2, err)
	}
}
