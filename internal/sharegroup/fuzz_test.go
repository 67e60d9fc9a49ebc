package sharegroup

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// encodeEntry encodes a decoded entry again (the inverse of decodeEntry).
func encodeEntry(e *entry) []byte {
	sp := &sharePartition{topic: e.topic, topicID: e.topicID, part: e.part}
	switch e.typ {
	case entGroup:
		return appendGroupEntry(nil, e.group, e.groupEpoch, &e.config)
	case entGroupDelete:
		return appendGroupDelete(nil, e.group)
	case entPartDelete:
		return appendPartDelete(nil, e.group, sp)
	case entMarker:
		return appendMarker(nil, e.gen)
	}
	b, start := partKeyStart(nil, e.typ, e.group, sp)
	b = appendRanges(b, e.spso, e.ranges)
	return frameEnd(b, start)
}

// FuzzDecodeEntry feeds arbitrary frames to the state-log decoder: it must
// never panic nor over-allocate, and whatever it accepts re-encodes to the
// same bytes.
func FuzzDecodeEntry(f *testing.F) {
	lock, reset := int32(2000), "by_duration:PT1H"
	sp := &sharePartition{topic: "orders", topicID: "0b7c6a52-8f3e-4f7e-9d55-3b1f0a9c2e11", part: 3}
	seeds := [][]byte{
		appendGroupEntry(nil, "g", 4, &GroupConfig{RecordLockDurationMs: &lock, AutoOffsetReset: &reset}),
		appendGroupEntry(nil, "empty", 0, &GroupConfig{}),
		appendGroupDelete(nil, "g"),
		appendPartDelete(nil, "g", sp),
		appendMarker(nil, 7),
	}
	for _, typ := range []byte{entPartDelta, entPartFull} {
		b, start := partKeyStart(nil, typ, "g", sp)
		b = appendRanges(b, 100, []durRange{
			{first: 100, last: 109, state: stAvailable, count: 2},
			{first: 110, last: 110, state: stAcknowledged},
			{first: 200, last: 10199, state: stArchived},
		})
		seeds = append(seeds, frameEnd(b, start))
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		payload, n, err := readFrame(data)
		if err != nil {
			if payload != nil {
				_, _, _ = decodeKey(payload) // naming a damaged entry must not panic either
			}
			return
		}
		e, err := decodeEntry(payload)
		if err != nil {
			return
		}
		require.Equal(t, data[:n], encodeEntry(&e), "%+v", e)
	})
}

// FuzzDecodePayload skips the frame checksum to reach the body decoder with
// arbitrary bytes: no panic, and an accepted entry survives a round trip.
func FuzzDecodePayload(f *testing.F) {
	lock := int32(1000)
	sp := &sharePartition{topic: "t", topicID: "id", part: 0}
	b, start := partKeyStart(nil, entPartDelta, "g", sp)
	b = appendRanges(b, 5, []durRange{{first: 5, last: 6, state: stAvailable, count: 1}, {first: 9, last: 9, state: stArchived}})
	for _, s := range [][]byte{frameEnd(b, start), appendGroupEntry(nil, "g", 1, &GroupConfig{RecordLockDurationMs: &lock}), appendMarker(nil, 1)} {
		f.Add(s[frameHeader:])
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		e, err := decodeEntry(payload)
		if err != nil {
			return
		}
		enc := encodeEntry(&e)
		p, _, err := readFrame(enc)
		require.NoError(t, err)
		e2, err := decodeEntry(p)
		require.NoError(t, err)
		require.Equal(t, e, e2)
	})
}
