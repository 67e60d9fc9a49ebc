package logstoretest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// RunKeyIndex runs the key-index conformance suite. newIndexed returns a
// fresh, empty store and its key index (the store itself, or a wrapper of
// its index such as the tracing one) for one subtest and arranges (with
// t.Cleanup) for the store to be closed. Subtests run in parallel.
func RunKeyIndex(t *testing.T, newIndexed func(t *testing.T) (logstore.Store, logstore.KeyIndexer)) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s logstore.Store, ki logstore.KeyIndexer)
	}{
		{"LatestBelowEnd", testKeyIndexLatestBelowEnd},
		{"PrefixAndOrder", testKeyIndexPrefixAndOrder},
		{"Model", testKeyIndexModel},
		{"AppendDuringScan", testKeyIndexAppendDuringScan},
		{"Purge", testKeyIndexPurge},
		{"RangeStats", testKeyIndexRangeStats},
		{"SegmentEnd", testKeyIndexSegmentEnd},
		{"TopicID", testKeyIndexTopicID},
		{"ReadEntry", testKeyIndexReadEntry},
		{"CountKeys", testKeyIndexCountKeys},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, ki := newIndexed(t)
			c.fn(t, s, ki)
		})
	}
}

// ScanAll drains a key-index scan into (key, offset, tombstone) triples.
func ScanAll(t testing.TB, ki logstore.KeyIndexer, topic string, part int32, prefix []byte, end int64) []logstore.KeyEntry {
	t.Helper()
	c, err := ki.ScanKeys(ctx, topic, part, prefix, end)
	require.NoError(t, err)
	defer c.Close()
	var out []logstore.KeyEntry
	for c.Next() {
		e := c.Entry()
		out = append(out, logstore.KeyEntry{Key: bytes.Clone(e.Key), Offset: e.Offset, Tombstone: e.Tombstone})
	}
	require.NoError(t, c.Err())
	return out
}

func ent(key string, off int64, tomb bool) logstore.KeyEntry {
	return logstore.KeyEntry{Key: []byte(key), Offset: off, Tombstone: tomb}
}

func testKeyIndexLatestBelowEnd(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	createTopic(t, s, "ki", 1)
	// a@0 x@1 b@2 a@3 b@4=∅ (keyless)@5 ""@6 c@7 a@8
	appendRecs(t, s, "ki", 0, rec("a", "1", 1), rec("x", "9", 1), rec("b", "2", 1), rec("a", "3", 1),
		logstore.Record{Key: []byte("b")}, logstore.Record{Value: []byte("keyless")},
		logstore.Record{Key: []byte{}, Value: []byte("empty key")})
	appendRecs(t, s, "ki", 0, rec("c", "5", 1), rec("a", "8", 1))
	tests := []struct {
		name   string
		prefix string
		end    int64
		want   []logstore.KeyEntry
	}{
		{"everything", "", 9, []logstore.KeyEntry{ent("a", 8, false), ent("b", 4, true), ent("c", 7, false), ent("x", 1, false)}},
		{"end hides the newest version", "", 8, []logstore.KeyEntry{ent("a", 3, false), ent("b", 4, true), ent("c", 7, false), ent("x", 1, false)}},
		{"end hides keys with no older record", "", 3, []logstore.KeyEntry{ent("a", 0, false), ent("b", 2, false), ent("x", 1, false)}},
		{"end beyond the high watermark", "", 100, []logstore.KeyEntry{ent("a", 8, false), ent("b", 4, true), ent("c", 7, false), ent("x", 1, false)}},
		{"prefix", "b", 9, []logstore.KeyEntry{ent("b", 4, true)}},
		{"prefix longer than keys", "bb", 9, nil},
		{"no match", "q", 9, nil},
		{"end zero", "", 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ScanAll(t, ki, "ki", 0, []byte(tc.prefix), tc.end))
		})
	}
}

func testKeyIndexPrefixAndOrder(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	createTopic(t, s, "kio", 1)
	keys := []string{"u/b", "\xff\x00", "u/", "u", "x/z", "u/a", "\x00", "u/a/long", "v"}
	for _, k := range keys {
		appendRecs(t, s, "kio", 0, rec(k, "v", 1))
	}
	var got []string
	for _, e := range ScanAll(t, ki, "kio", 0, nil, 100) {
		got = append(got, string(e.Key))
	}
	want := slices.Clone(keys)
	sort.Strings(want) // Go strings compare as unsigned bytes
	assert.Equal(t, want, got, "unsigned byte-lexicographic order")
	got = nil
	for _, e := range ScanAll(t, ki, "kio", 0, []byte("u/"), 100) {
		got = append(got, string(e.Key))
	}
	assert.Equal(t, []string{"u/", "u/a", "u/a/long", "u/b"}, got)
	got = nil
	for _, e := range ScanAll(t, ki, "kio", 0, []byte("\xff"), 100) {
		got = append(got, string(e.Key))
	}
	assert.Equal(t, []string{"\xff\x00"}, got)
}

// testKeyIndexModel checks scans against a model over many keys, versions
// and segment rolls (tiny segments in the file store).
func testKeyIndexModel(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	_, err := s.CreateTopic(ctx, "km", 1, logstore.TopicConfig{SegmentBytes: logstore.MinSegmentBytes, RetentionMs: -1})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	var all []logstore.Record
	for len(all) < 1500 {
		batch := make([]logstore.Record, 1+rng.IntN(5))
		for i := range batch {
			r := logstore.Record{Timestamp: 1, Value: []byte(fmt.Sprint(len(all) + i))}
			switch n := rng.IntN(20); {
			case n == 0: // keyless
			case n == 1:
				r.Key = []byte(fmt.Sprintf("%c/%03d", 'a'+rng.IntN(3), rng.IntN(200)))
				r.Value = nil // tombstone
			default:
				r.Key = []byte(fmt.Sprintf("%c/%03d", 'a'+rng.IntN(3), rng.IntN(200)))
			}
			batch[i] = r
		}
		base := appendRecs(t, s, "km", 0, batch...)
		for i := range batch {
			batch[i].Offset = base + int64(i)
		}
		all = append(all, batch...)
	}
	model := func(prefix string, end int64) []logstore.KeyEntry {
		latest := map[string]logstore.KeyEntry{}
		for _, r := range all[:min(end, int64(len(all)))] {
			if len(r.Key) > 0 && bytes.HasPrefix(r.Key, []byte(prefix)) {
				latest[string(r.Key)] = ent(string(r.Key), r.Offset, r.Value == nil)
			}
		}
		var out []logstore.KeyEntry
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range latest {
				if !yield(k) {
					return
				}
			}
		}) {
			out = append(out, latest[k])
		}
		return out
	}
	for _, end := range []int64{0, 1, 17, 500, 999, 1000, int64(len(all)) - 1, int64(len(all))} {
		for _, prefix := range []string{"", "a/", "b/1", "c/199", "d"} {
			assert.Equal(t, model(prefix, end), ScanAll(t, ki, "km", 0, []byte(prefix), end), "prefix %q end %d", prefix, end)
		}
	}
}

func testKeyIndexAppendDuringScan(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	_, err := s.CreateTopic(ctx, "kad", 1, logstore.TopicConfig{SegmentBytes: logstore.MinSegmentBytes, RetentionMs: -1})
	require.NoError(t, err)
	for i := range 300 {
		appendRecs(t, s, "kad", 0, rec(fmt.Sprintf("k%03d", i), "v", 1))
	}
	c, err := ki.ScanKeys(ctx, "kad", 0, nil, 300)
	require.NoError(t, err)
	defer c.Close()
	n := 0
	for c.Next() {
		e := c.Entry()
		assert.Equal(t, fmt.Sprintf("k%03d", n), string(e.Key))
		assert.Equal(t, int64(n), e.Offset, "the scan's end fixes the version, whatever is appended")
		if n%50 == 0 {
			// New versions of every key, and new keys, while the scan runs.
			for i := range 300 {
				appendRecs(t, s, "kad", 0, rec(fmt.Sprintf("k%03d", i), "newer", 2), rec(fmt.Sprintf("k%03d+", i), "new", 2))
			}
		}
		n++
	}
	require.NoError(t, c.Err())
	assert.Equal(t, 300, n)
}

func testKeyIndexPurge(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	_, err := s.CreateTopic(ctx, "kp", 1, logstore.TopicConfig{SegmentBytes: logstore.MinSegmentBytes, RetentionMs: -1})
	require.NoError(t, err)
	for i := range 200 {
		appendRecs(t, s, "kp", 0, rec(fmt.Sprintf("k%02d", i%50), fmt.Sprint(i), 1))
	}
	_, err = s.DeleteRecordsBefore(ctx, "kp", 0, 120)
	require.NoError(t, err)
	got := ScanAll(t, ki, "kp", 0, nil, 200)
	require.Len(t, got, 50, "every key has a record above the log start")
	for i, e := range got {
		assert.Equal(t, int64(150+i), e.Offset, "key %s: its latest record", e.Key)
	}
	got = ScanAll(t, ki, "kp", 0, nil, 130)
	for _, e := range got {
		if e.Offset >= 120 {
			assert.Equal(t, int64(120)+(e.Offset-120)%50, e.Offset)
		}
		assert.Less(t, e.Offset, int64(130))
	}
}

func testKeyIndexRangeStats(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	_, err := s.CreateTopic(ctx, "kr", 1, logstore.TopicConfig{SegmentBytes: logstore.MinSegmentBytes, RetentionMs: -1})
	require.NoError(t, err)
	n, b, err := ki.RangeStats("kr", 0, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{0, 0}, [2]int64{n, b}, "empty")
	for i := range 400 {
		appendRecs(t, s, "kr", 0, rec(fmt.Sprintf("k%d", i), string(make([]byte, 100)), 1))
	}
	n, b, err = ki.RangeStats("kr", 0, 0, 400)
	require.NoError(t, err)
	assert.Equal(t, int64(400), n)
	// Each record is stored as about 100 bytes of value plus key and framing.
	assert.InDelta(t, 400*140, b, 400*60, "stored bytes of the whole range")
	n, b2, err := ki.RangeStats("kr", 0, 100, 300)
	require.NoError(t, err)
	assert.Equal(t, int64(200), n)
	assert.InDelta(t, float64(b)/2, b2, float64(b)/4, "half the records, about half the bytes")
	n, _, err = ki.RangeStats("kr", 0, 300, 1000)
	require.NoError(t, err)
	assert.Equal(t, int64(100), n, "clamped to the high watermark")
	_, err = s.DeleteRecordsBefore(ctx, "kr", 0, 350)
	require.NoError(t, err)
	n, _, err = ki.RangeStats("kr", 0, 0, 400)
	require.NoError(t, err)
	assert.Equal(t, int64(50), n, "clamped to the log start")
}

func testKeyIndexSegmentEnd(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	_, err := s.CreateTopic(ctx, "ks", 1, logstore.TopicConfig{SegmentBytes: logstore.MinSegmentBytes, RetentionMs: -1})
	require.NoError(t, err)
	end, err := ki.SegmentEnd("ks", 0, 0)
	require.NoError(t, err)
	assert.Zero(t, end, "empty partition: the high watermark")
	for i := range 100 {
		appendRecs(t, s, "ks", 0, rec(fmt.Sprintf("k%d", i), string(make([]byte, 50)), 1))
	}
	prev := int64(0)
	for off := int64(0); off < 100; {
		end, err := ki.SegmentEnd("ks", 0, off)
		require.NoError(t, err)
		require.Greater(t, end, off)
		require.LessOrEqual(t, end, int64(100))
		require.GreaterOrEqual(t, end, prev)
		for o := off; o < end; o++ {
			e2, err := ki.SegmentEnd("ks", 0, o)
			require.NoError(t, err)
			assert.Equal(t, end, e2, "every offset of a segment has its end")
		}
		prev, off = end, end
	}
	end, err = ki.SegmentEnd("ks", 0, 100)
	require.NoError(t, err)
	assert.Equal(t, int64(100), end)
	_, err = ki.SegmentEnd("nope", 0, 0)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
}

func testKeyIndexTopicID(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	info := createTopic(t, s, "kt", 1)
	id, err := ki.TopicID("kt")
	require.NoError(t, err)
	assert.Equal(t, info.ID, id)
	require.NoError(t, s.DeleteTopic(ctx, "kt"))
	_, err = ki.TopicID("kt")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	again := createTopic(t, s, "kt", 1)
	id, err = ki.TopicID("kt")
	require.NoError(t, err)
	assert.Equal(t, again.ID, id)
	_, err = ki.ScanKeys(ctx, "nope", 0, nil, 1)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	_, _, err = ki.RangeStats("kt", 1, 0, 1)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
}

// keyModelTopic fills topic with keyed records (versions, tombstones,
// headers, keyless records) over many tiny segments and returns them.
func keyModelTopic(t *testing.T, s logstore.Store, topic string) []logstore.Record {
	_, err := s.CreateTopic(ctx, topic, 1, logstore.TopicConfig{SegmentBytes: logstore.MinSegmentBytes, RetentionMs: -1})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	var all []logstore.Record
	for len(all) < 600 {
		batch := make([]logstore.Record, 1+rng.IntN(4))
		for i := range batch {
			r := logstore.Record{Timestamp: int64(len(all) + i), Value: []byte(fmt.Sprint(len(all) + i))}
			if rng.IntN(10) > 0 {
				r.Key = []byte(fmt.Sprintf("%c/%02d", 'a'+rng.IntN(3), rng.IntN(60)))
			}
			switch rng.IntN(8) {
			case 0:
				r.Value = nil
			case 1:
				r.Headers = []logstore.Header{{Key: "h", Value: []byte("x")}}
			}
			batch[i] = r
		}
		base := appendRecs(t, s, topic, 0, batch...)
		for i := range batch {
			batch[i].Offset = base + int64(i)
		}
		all = append(all, batch...)
	}
	return all
}

func testKeyIndexReadEntry(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	er := ki
	all := keyModelTopic(t, s, "kre")
	check := func(end int64) int {
		c, err := ki.ScanKeys(ctx, "kre", 0, nil, end)
		require.NoError(t, err)
		defer c.Close()
		n := 0
		for c.Next() {
			e := c.Entry()
			got, err := er.ReadEntry(ctx, "kre", 0, e)
			require.NoError(t, err, "key %q offset %d", e.Key, e.Offset)
			want := all[e.Offset]
			assert.Equal(t, want.Offset, got.Offset)
			assert.Equal(t, want.Key, got.Key)
			assert.Equal(t, want.Value, got.Value)
			assert.Equal(t, want.Timestamp, got.Timestamp)
			assert.Equal(t, len(want.Headers), len(got.Headers))
			assert.Equal(t, e.Tombstone, got.Value == nil)
			n++
		}
		require.NoError(t, c.Err())
		return n
	}
	assert.Equal(t, len(ScanAll(t, ki, "kre", 0, nil, 1000)), check(1000))
	check(301)
	// An entry built by hand (no location) reads by offset.
	got, err := er.ReadEntry(ctx, "kre", 0, logstore.KeyEntry{Key: all[5].Key, Offset: 5})
	require.NoError(t, err)
	assert.Equal(t, all[5].Value, got.Value)
	// Entries the log start has passed are out of range, as Read.
	c, err := ki.ScanKeys(ctx, "kre", 0, nil, 1000)
	require.NoError(t, err)
	var ents []logstore.KeyEntry
	for c.Next() {
		e := c.Entry()
		e.Key = bytes.Clone(e.Key)
		ents = append(ents, e)
	}
	require.NoError(t, c.Err())
	c.Close()
	_, err = s.DeleteRecordsBefore(ctx, "kre", 0, 400)
	require.NoError(t, err)
	for _, e := range ents {
		got, err := er.ReadEntry(ctx, "kre", 0, e)
		if e.Offset < 400 {
			assert.ErrorIs(t, err, logstore.ErrOffsetOutOfRange, "offset %d", e.Offset)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, all[e.Offset].Value, got.Value)
	}
	_, err = er.ReadEntry(ctx, "kre", 0, logstore.KeyEntry{Offset: int64(len(all))})
	assert.ErrorIs(t, err, logstore.ErrOffsetOutOfRange, "the high watermark")
}

func testKeyIndexCountKeys(t *testing.T, s logstore.Store, ki logstore.KeyIndexer) {
	kc := ki
	keyModelTopic(t, s, "kck")
	appendRecs(t, s, "kck", 0, logstore.Record{Key: []byte{}, Value: []byte("empty key")})
	for _, end := range []int64{0, 1, 100, 333, 601, 2000} {
		for _, prefix := range []string{"", "a/", "b/1", "c/59", "d", "a"} {
			m := int64(len(ScanAll(t, ki, "kck", 0, []byte(prefix), end)))
			for _, limit := range []int64{1, 5, m, m + 1, 1 << 40} {
				lo, hi, err := kc.CountKeys(ctx, "kck", 0, []byte(prefix), end, limit)
				require.NoError(t, err)
				assert.LessOrEqual(t, lo, m, "prefix %q end %d limit %d: lower bound", prefix, end, limit)
				assert.LessOrEqual(t, lo, hi)
				if lo < limit {
					assert.GreaterOrEqual(t, hi, m, "prefix %q end %d limit %d: upper bound", prefix, end, limit)
				}
			}
		}
	}
	_, err := s.DeleteRecordsBefore(ctx, "kck", 0, 300)
	require.NoError(t, err)
	m := int64(len(ScanAll(t, ki, "kck", 0, nil, 2000)))
	lo, hi, err := kc.CountKeys(ctx, "kck", 0, nil, 2000, 1<<40)
	require.NoError(t, err)
	assert.LessOrEqual(t, lo, m)
	assert.GreaterOrEqual(t, hi, m)
}
