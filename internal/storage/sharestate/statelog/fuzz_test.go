package statelog

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// encodeEntry encodes a decoded entry again (the inverse of decodeEntry).
func encodeEntry(e *entry) []byte {
	if e.typ == entMarker {
		return appendMarker(nil, e.gen)
	}
	return appendEntry(nil, &e.Entry)
}

// FuzzDecodeEntry feeds arbitrary frames to the state-log decoder: it must
// never panic nor over-allocate, and whatever it accepts re-encodes to the
// same bytes.
func FuzzDecodeEntry(f *testing.F) {
	lock, reset := int32(2000), "by_duration:PT1H"
	part := sharestate.Entry{Group: "g", Topic: "orders", TopicID: "0b7c6a52-8f3e-4f7e-9d55-3b1f0a9c2e11", Partition: 3}
	with := func(k sharestate.Kind, mut func(*sharestate.Entry)) []byte {
		e := part
		e.Kind = k
		if mut != nil {
			mut(&e)
		}
		return appendEntry(nil, &e)
	}
	seeds := [][]byte{
		appendEntry(nil, &sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 4,
			Config: sharestate.GroupConfig{RecordLockDurationMs: &lock, AutoOffsetReset: &reset}}),
		appendEntry(nil, &sharestate.Entry{Kind: sharestate.KindGroup, Group: "empty"}),
		appendEntry(nil, &sharestate.Entry{Kind: sharestate.KindGroupDelete, Group: "g"}),
		with(sharestate.KindPartDelete, nil),
		with(sharestate.KindPartOffline, func(e *sharestate.Entry) { e.Reason = "lost" }),
		appendMarker(nil, 7),
	}
	for _, k := range []sharestate.Kind{sharestate.KindPartDelta, sharestate.KindPartFull} {
		seeds = append(seeds, with(k, func(e *sharestate.Entry) {
			e.SPSO = 100
			e.Ranges = []sharestate.Range{
				{First: 100, Last: 109, State: sharestate.Available, Count: 2},
				{First: 110, Last: 110, State: sharestate.Acknowledged},
				{First: 200, Last: 10199, State: sharestate.Archived},
			}
		}))
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
	delta := appendEntry(nil, &sharestate.Entry{Kind: sharestate.KindPartDelta, Group: "g", Topic: "t", TopicID: "id", SPSO: 5,
		Ranges: []sharestate.Range{{First: 5, Last: 6, State: sharestate.Available, Count: 1}, {First: 9, Last: 9, State: sharestate.Archived}}})
	group := appendEntry(nil, &sharestate.Entry{Kind: sharestate.KindGroup, Group: "g", GroupEpoch: 1, Config: sharestate.GroupConfig{RecordLockDurationMs: &lock}})
	for _, s := range [][]byte{delta, group, appendMarker(nil, 1)} {
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
