// Package logstoretest is the conformance suite every logstore.Store
// implementation must pass (in the style of go-cloud's drivertest): the file
// store, the memory store and any later backend run the same Run.
package logstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// waitTimeout bounds every wait for a signal that must arrive; it only
// matters when the test is failing.
const waitTimeout = 5 * time.Second

// Run runs the conformance suite of logstore.Store (RunKeyIndex is the
// key index's). newStore returns a fresh, empty store for
// one subtest and arranges (with t.Cleanup) for it to be closed; closing it
// twice must be harmless. Subtests run in parallel.
func Run(t *testing.T, newStore func(t *testing.T) logstore.Store) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s logstore.Store)
	}{
		{"CreateTopic", testCreateTopic},
		{"CreateTopicDuplicate", testCreateTopicDuplicate},
		{"CreateTopicValidation", testCreateTopicValidation},
		{"TopicsSorted", testTopicsSorted},
		{"DescribeTopic", testDescribeTopic},
		{"DeleteAndRecreate", testDeleteAndRecreate},
		{"AppendContiguous", testAppendContiguous},
		{"AppendAtomic", testAppendAtomic},
		{"NilAndEmptyKeyValue", testNilAndEmpty},
		{"HeadersRoundTrip", testHeaders},
		{"ProducerFieldsRoundTrip", testProducerFields},
		{"BuffersNotShared", testBuffersNotShared},
		{"ReadLimits", testReadLimits},
		{"ReadBounds", testReadBounds},
		{"OffsetForTimestamp", testOffsetForTimestamp},
		{"WatchAppend", testWatchAppend},
		{"WatchPurge", testWatchPurge},
		{"WatchDelete", testWatchDelete},
		{"Purge", testPurge},
		{"PurgeEverything", testPurgeEverything},
		{"ConcurrentAppends", testConcurrentAppends},
		{"ReadWhileAppending", testReadWhileAppending},
		{"UnknownTopicOrPartition", testUnknown},
		{"ContextCanceled", testContextCanceled},
		{"Closed", testClosed},
		{"AlterTopicPartitions", testAlterTopicPartitions},
		{"AlterTopicConfig", testAlterTopicConfig},
		{"AlterTopicRefused", testAlterTopicRefused},
		{"AlterTopicConcurrent", testAlterTopicConcurrent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newStore(t))
		})
	}
}

var ctx = context.Background()

// createTopic creates a one-partition (or n-partition) topic with defaults.
func createTopic(t *testing.T, s logstore.Store, name string, partitions int32) logstore.TopicInfo {
	t.Helper()
	info, err := s.CreateTopic(ctx, name, partitions, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	return info
}

// rec makes a record with a key, a value and a timestamp.
func rec(key, value string, ts int64) logstore.Record {
	return logstore.Record{Key: []byte(key), Value: []byte(value), Timestamp: ts}
}

func appendRecs(t *testing.T, s logstore.Store, topic string, part int32, recs ...logstore.Record) int64 {
	t.Helper()
	base, err := s.Append(ctx, topic, part, recs)
	require.NoError(t, err)
	return base
}

// readAll reads [from, hw) in pages.
func readAll(t *testing.T, s logstore.Store, topic string, part int32, from int64) []logstore.Record {
	t.Helper()
	_, hw, err := s.Bounds(topic, part)
	require.NoError(t, err)
	var out []logstore.Record
	for off := from; off < hw; {
		recs, err := s.Read(ctx, topic, part, off, 1000, 1<<20)
		require.NoError(t, err)
		require.NotEmpty(t, recs, "read at %d below hw %d returned nothing", off, hw)
		out = append(out, recs...)
		off = recs[len(recs)-1].Offset + 1
	}
	return out
}

func requireClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("watch channel not closed after %s", what)
	}
}

func requireOpen(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("watch channel closed without a change")
	default:
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func testCreateTopic(t *testing.T, s logstore.Store) {
	info, err := s.CreateTopic(ctx, "orders", 3, logstore.TopicConfig{SegmentBytes: 1 << 20, RetentionMs: -1})
	require.NoError(t, err)
	assert.Equal(t, "orders", info.Name)
	assert.Regexp(t, uuidRE, info.ID)
	assert.Equal(t, int32(3), info.Partitions)
	assert.Equal(t, logstore.TopicConfig{SegmentBytes: 1 << 20, RetentionMs: -1, CleanupPolicy: logstore.CleanupDelete}, info.Config,
		"an empty cleanup policy means delete")

	got, parts, err := s.Topic(ctx, "orders")
	require.NoError(t, err)
	assert.Equal(t, info, got)
	cheap, err := s.TopicInfo(ctx, "orders")
	require.NoError(t, err)
	assert.Equal(t, info, cheap, "TopicInfo answers what Topic does, without partitions")
	require.Len(t, parts, 3)
	for i, p := range parts {
		assert.Equal(t, int32(i), p.Partition)
		assert.Zero(t, p.LogStartOffset)
		assert.Zero(t, p.HighWatermark)
	}

	// Defaults and every cleanup policy are accepted.
	for _, pol := range []string{logstore.CleanupDelete, logstore.CleanupCompact, logstore.CleanupCompactDelete} {
		info, err := s.CreateTopic(ctx, "policy-"+strings.ReplaceAll(pol, ",", "-"), 1, logstore.TopicConfig{RetentionMs: 0, CleanupPolicy: pol})
		require.NoError(t, err, pol)
		assert.Equal(t, pol, info.Config.CleanupPolicy)
		assert.Positive(t, info.Config.SegmentBytes, "a zero segment size takes the default")
	}
}

func testCreateTopicDuplicate(t *testing.T, s logstore.Store) {
	first := createTopic(t, s, "dup", 1)
	_, err := s.CreateTopic(ctx, "dup", 2, logstore.TopicConfig{RetentionMs: -1})
	require.ErrorIs(t, err, logstore.ErrTopicExists)
	got, parts, err := s.Topic(ctx, "dup")
	require.NoError(t, err)
	assert.Equal(t, first, got, "the failed create changed nothing")
	assert.Len(t, parts, 1)
}

func testCreateTopicValidation(t *testing.T, s logstore.Store) {
	ok := logstore.TopicConfig{RetentionMs: -1}
	tests := []struct {
		name       string
		topic      string
		partitions int32
		cfg        logstore.TopicConfig
		valid      bool
	}{
		{"empty name", "", 1, ok, false},
		{"name too long", strings.Repeat("a", 250), 1, ok, false},
		{"longest name", strings.Repeat("a", 249), 1, ok, true},
		{"reserved prefix", "__consumer_offsets", 1, ok, false},
		{"single underscore", "_ok", 1, ok, true},
		{"dot", ".", 1, ok, false},
		{"dot dot", "..", 1, ok, false},
		{"dots inside", "a..b", 1, ok, true},
		{"slash", "a/b", 1, ok, false},
		{"space", "a b", 1, ok, false},
		{"non ascii", "tópico", 1, ok, false},
		{"all allowed characters", "aZ09._-", 1, ok, true},
		{"zero partitions", "p0", 0, ok, false},
		{"negative partitions", "pneg", -1, ok, false},
		{"too many partitions", "pbig", 10001, ok, false},
		{"segment too small", "s1", 1, logstore.TopicConfig{SegmentBytes: 100, RetentionMs: -1}, false},
		{"segment negative", "s2", 1, logstore.TopicConfig{SegmentBytes: -1, RetentionMs: -1}, false},
		{"segment too large", "s3", 1, logstore.TopicConfig{SegmentBytes: 2 << 30, RetentionMs: -1}, false},
		{"smallest segment", "s4", 1, logstore.TopicConfig{SegmentBytes: 1024, RetentionMs: -1}, true},
		{"retention below -1", "r1", 1, logstore.TopicConfig{RetentionMs: -2}, false},
		{"retention zero", "r2", 1, logstore.TopicConfig{RetentionMs: 0}, true},
		{"unknown policy", "c1", 1, logstore.TopicConfig{RetentionMs: -1, CleanupPolicy: "delete,compact"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.CreateTopic(ctx, tc.topic, tc.partitions, tc.cfg)
			if tc.valid {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, logstore.ErrInvalidArgument)
			assert.NotEqual(t, logstore.ErrInvalidArgument.Error(), err.Error(), "the error says what is wrong")
			_, _, err = s.Topic(ctx, tc.topic)
			assert.ErrorIs(t, err, logstore.ErrUnknownTopic, "nothing was created")
		})
	}
}

func testTopicsSorted(t *testing.T, s logstore.Store) {
	topics, err := s.Topics(ctx)
	require.NoError(t, err)
	assert.Empty(t, topics)
	for _, n := range []string{"m", "b", "z", "a", "B"} {
		createTopic(t, s, n, 1)
	}
	topics, err = s.Topics(ctx)
	require.NoError(t, err)
	var names []string
	for _, ti := range topics {
		names = append(names, ti.Name)
		assert.Regexp(t, uuidRE, ti.ID)
	}
	assert.Equal(t, []string{"B", "a", "b", "m", "z"}, names)
}

func testDescribeTopic(t *testing.T, s logstore.Store) {
	createTopic(t, s, "d", 2)
	appendRecs(t, s, "d", 1, rec("k", "vvvv", 1), rec("", "", 2))
	_, parts, err := s.Topic(ctx, "d")
	require.NoError(t, err)
	require.Len(t, parts, 2)
	assert.Equal(t, int64(0), parts[0].HighWatermark)
	assert.Equal(t, int64(2), parts[1].HighWatermark)
	assert.Equal(t, int64(0), parts[1].LogStartOffset)
	assert.Positive(t, parts[1].SizeBytes)
	assert.GreaterOrEqual(t, parts[1].SegmentCount, int32(1))
	_, err = s.DeleteRecordsBefore(ctx, "d", 1, 1)
	require.NoError(t, err)
	_, parts, err = s.Topic(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, int64(1), parts[1].LogStartOffset)
	assert.Equal(t, int64(2), parts[1].HighWatermark)
}

func testDeleteAndRecreate(t *testing.T, s logstore.Store) {
	first := createTopic(t, s, "gone", 2)
	createTopic(t, s, "stays", 1)
	appendRecs(t, s, "gone", 0, rec("a", "1", 1), rec("b", "2", 2))
	appendRecs(t, s, "stays", 0, rec("a", "1", 1))
	require.NoError(t, s.DeleteTopic(ctx, "gone"))

	_, _, err := s.Topic(ctx, "gone")
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	_, err = s.Append(ctx, "gone", 0, []logstore.Record{rec("a", "1", 1)})
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	assert.ErrorIs(t, s.DeleteTopic(ctx, "gone"), logstore.ErrUnknownTopic)
	topics, err := s.Topics(ctx)
	require.NoError(t, err)
	require.Len(t, topics, 1)
	assert.Equal(t, "stays", topics[0].Name)

	second := createTopic(t, s, "gone", 1)
	assert.NotEqual(t, first.ID, second.ID, "a re-created topic gets a new id")
	assert.Equal(t, int32(1), second.Partitions)
	ls, hw, err := s.Bounds("gone", 0)
	require.NoError(t, err)
	assert.Zero(t, ls)
	assert.Zero(t, hw, "a re-created topic starts empty")
	recs, err := s.Read(ctx, "stays", 0, 0, 10, 1<<20)
	require.NoError(t, err)
	assert.Len(t, recs, 1, "other topics are untouched")
}

func testAppendContiguous(t *testing.T, s logstore.Store) {
	createTopic(t, s, "c", 2)
	assert.Equal(t, int64(0), appendRecs(t, s, "c", 0, rec("a", "0", 10), rec("b", "1", 11), rec("c", "2", 12)))
	in := rec("d", "3", 13)
	in.Offset = 999 // ignored on input
	assert.Equal(t, int64(3), appendRecs(t, s, "c", 0, in))
	assert.Equal(t, int64(4), appendRecs(t, s, "c", 0, rec("e", "4", 14), rec("f", "5", 15)))
	assert.Equal(t, int64(0), appendRecs(t, s, "c", 1, rec("x", "y", 1)), "partitions have their own offsets")

	ls, hw, err := s.Bounds("c", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), ls)
	assert.Equal(t, int64(6), hw)
	recs := readAll(t, s, "c", 0, 0)
	require.Len(t, recs, 6)
	for i, r := range recs {
		assert.Equal(t, int64(i), r.Offset)
		assert.Equal(t, fmt.Sprint(i), string(r.Value))
		assert.Equal(t, int64(10+i), r.Timestamp)
	}
}

func testAppendAtomic(t *testing.T, s logstore.Store) {
	createTopic(t, s, "atomic", 1)
	appendRecs(t, s, "atomic", 0, rec("a", "1", 1))

	_, err := s.Append(ctx, "atomic", 0, nil)
	assert.ErrorIs(t, err, logstore.ErrInvalidArgument, "an empty batch")
	huge := logstore.Record{Value: make([]byte, logstore.MaxRecordBytes)}
	_, err = s.Append(ctx, "atomic", 0, []logstore.Record{rec("ok", "ok", 1), huge})
	assert.ErrorIs(t, err, logstore.ErrInvalidArgument, "a record over the limit")

	_, hw, err := s.Bounds("atomic", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), hw, "a rejected batch appends nothing, not even its valid records")
	assert.Equal(t, int64(1), appendRecs(t, s, "atomic", 0, rec("b", "2", 2)), "offsets continue without a gap")
}

func testNilAndEmpty(t *testing.T, s logstore.Store) {
	createTopic(t, s, "ne", 1)
	in := []logstore.Record{
		{Key: nil, Value: nil, Timestamp: 1},           // keyless tombstone
		{Key: []byte{}, Value: []byte{}, Timestamp: 2}, // empty key, empty value
		{Key: nil, Value: []byte{}, Timestamp: 3},
		{Key: []byte{}, Value: nil, Timestamp: 4},
		{Key: []byte("k"), Value: nil, Timestamp: 5}, // tombstone of k
	}
	appendRecs(t, s, "ne", 0, in...)
	out := readAll(t, s, "ne", 0, 0)
	require.Len(t, out, len(in))
	for i := range in {
		assert.Equal(t, in[i].Key == nil, out[i].Key == nil, "record %d: key presence", i)
		assert.Equal(t, in[i].Value == nil, out[i].Value == nil, "record %d: value presence", i)
		assert.Equal(t, string(in[i].Key), string(out[i].Key), "record %d", i)
		assert.Equal(t, string(in[i].Value), string(out[i].Value), "record %d", i)
	}
}

func testHeaders(t *testing.T, s logstore.Store) {
	createTopic(t, s, "h", 1)
	in := []logstore.Record{
		{Key: []byte("k"), Value: []byte("v"), Timestamp: 7, Headers: []logstore.Header{
			{Key: "trace", Value: []byte("abc")},
			{Key: "trace", Value: []byte("second, same key")},
			{Key: "", Value: []byte("empty key")},
			{Key: "empty", Value: []byte{}},
			{Key: "nil", Value: nil},
			{Key: "bin", Value: []byte{0, 0xff, 0}},
		}},
		{Key: []byte("no headers"), Value: []byte("v"), Timestamp: 8},
	}
	appendRecs(t, s, "h", 0, in...)
	out := readAll(t, s, "h", 0, 0)
	require.Len(t, out, 2)
	require.Len(t, out[0].Headers, len(in[0].Headers))
	for i, h := range in[0].Headers {
		got := out[0].Headers[i]
		assert.Equal(t, h.Key, got.Key, "header %d order and key", i)
		assert.True(t, bytes.Equal(h.Value, got.Value), "header %d value", i)
		assert.Equal(t, h.Value == nil, got.Value == nil, "header %d value presence", i)
	}
	assert.Empty(t, out[1].Headers)
	assert.Equal(t, int64(7), out[0].Timestamp)
}

// testProducerFields: an idempotent producer's fields are stored with each
// record and read back; a record without them reads back without.
func testProducerFields(t *testing.T, s logstore.Store) {
	createTopic(t, s, "pf", 1)
	in := []logstore.Record{
		{Key: []byte("a"), Value: []byte("1"), Timestamp: 1, ProducerID: 42, ProducerEpoch: 2, Sequence: 10},
		{Key: []byte("b"), Value: []byte("2"), Timestamp: 1, ProducerID: 42, ProducerEpoch: 2, Sequence: 11},
	}
	appendRecs(t, s, "pf", 0, in...)
	appendRecs(t, s, "pf", 0, rec("c", "3", 1))
	out := readAll(t, s, "pf", 0, 0)
	require.Len(t, out, 3)
	for i, r := range in {
		assert.Equal(t, [3]int64{r.ProducerID, int64(r.ProducerEpoch), int64(r.Sequence)},
			[3]int64{out[i].ProducerID, int64(out[i].ProducerEpoch), int64(out[i].Sequence)}, "record %d", i)
	}
	assert.Zero(t, out[2].ProducerID)
}

func testBuffersNotShared(t *testing.T, s logstore.Store) {
	createTopic(t, s, "buf", 1)
	key, val, hv := []byte("key"), []byte("value"), []byte("hval")
	appendRecs(t, s, "buf", 0, logstore.Record{Key: key, Value: val, Headers: []logstore.Header{{Key: "h", Value: hv}}})
	copy(key, "XXX")
	copy(val, "XXXXX")
	copy(hv, "XXXX")
	out, err := s.Read(ctx, "buf", 0, 0, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, out, 1)
	assert.Equal(t, "key", string(out[0].Key), "the store kept its own copy")
	assert.Equal(t, "value", string(out[0].Value))
	assert.Equal(t, "hval", string(out[0].Headers[0].Value))
	out[0].Key[0], out[0].Value[0], out[0].Headers[0].Value[0] = 'Y', 'Y', 'Y'
	again, err := s.Read(ctx, "buf", 0, 0, 10, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, "key", string(again[0].Key), "a read result is the caller's")
	assert.Equal(t, "value", string(again[0].Value))
	assert.Equal(t, "hval", string(again[0].Headers[0].Value))
}

func testReadLimits(t *testing.T, s logstore.Store) {
	createTopic(t, s, "lim", 1)
	// Sizes (key+value): 10, 10, 100, 10, 10.
	appendRecs(t, s, "lim", 0,
		rec("k0", "01234567", 0), rec("k1", "01234567", 0), rec("k2", strings.Repeat("x", 98), 0),
		rec("k3", "01234567", 0), rec("k4", "01234567", 0))
	tests := []struct {
		name       string
		offset     int64
		maxRecords int
		maxBytes   int
		want       []int64
	}{
		{"max records", 0, 2, 1 << 20, []int64{0, 1}},
		{"max records one", 3, 1, 1 << 20, []int64{3}},
		{"everything", 0, 100, 1 << 20, []int64{0, 1, 2, 3, 4}},
		{"max bytes stops before a record that does not fit", 0, 100, 50, []int64{0, 1}},
		{"max bytes exact", 0, 100, 20, []int64{0, 1}},
		{"max bytes includes the big one exactly", 0, 100, 120, []int64{0, 1, 2}},
		{"first record always, even if larger", 2, 100, 5, []int64{2}},
		{"first record always at max bytes 1", 0, 100, 1, []int64{0}},
		{"from the middle", 3, 100, 1 << 20, []int64{3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := s.Read(ctx, "lim", 0, tc.offset, tc.maxRecords, tc.maxBytes)
			require.NoError(t, err)
			var offs []int64
			for _, r := range recs {
				offs = append(offs, r.Offset)
			}
			assert.Equal(t, tc.want, offs)
		})
	}
	for _, lim := range [][2]int{{0, 100}, {-1, 100}, {10, 0}, {10, -1}} {
		_, err := s.Read(ctx, "lim", 0, 0, lim[0], lim[1])
		assert.ErrorIs(t, err, logstore.ErrInvalidArgument, "limits %v", lim)
	}
}

func testReadBounds(t *testing.T, s logstore.Store) {
	createTopic(t, s, "rb", 1)
	recs, err := s.Read(ctx, "rb", 0, 0, 10, 1<<20)
	require.NoError(t, err, "reading an empty partition at its high watermark")
	assert.Empty(t, recs)
	for i := range 10 {
		appendRecs(t, s, "rb", 0, rec("k", fmt.Sprint(i), int64(i)))
	}
	recs, err = s.Read(ctx, "rb", 0, 10, 10, 1<<20)
	require.NoError(t, err, "read at the high watermark")
	assert.Empty(t, recs)
	for _, off := range []int64{11, 1000, -1} {
		_, err = s.Read(ctx, "rb", 0, off, 10, 1<<20)
		assert.ErrorIs(t, err, logstore.ErrOffsetOutOfRange, "offset %d", off)
	}
	_, err = s.DeleteRecordsBefore(ctx, "rb", 0, 4)
	require.NoError(t, err)
	for _, off := range []int64{0, 3} {
		_, err = s.Read(ctx, "rb", 0, off, 10, 1<<20)
		assert.ErrorIs(t, err, logstore.ErrOffsetOutOfRange, "offset %d below the log start", off)
	}
	recs, err = s.Read(ctx, "rb", 0, 4, 10, 1<<20)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	assert.Equal(t, int64(4), recs[0].Offset, "a read at the log start returns that record first")
	assert.Equal(t, "4", string(recs[0].Value))
}

func testOffsetForTimestamp(t *testing.T, s logstore.Store) {
	createTopic(t, s, "ts", 1)
	off, ts, err := s.OffsetForTimestamp(ctx, "ts", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{-1, -1}, [2]int64{off, ts}, "empty partition")

	// Timestamps need not be monotonic: 10 20 20 30 25 40.
	for _, ts := range []int64{10, 20, 20, 30, 25, 40} {
		appendRecs(t, s, "ts", 0, rec("k", "v", ts))
	}
	check := func(name string, query, wantOff, wantTs int64) {
		t.Helper()
		off, ts, err := s.OffsetForTimestamp(ctx, "ts", 0, query)
		require.NoError(t, err, name)
		assert.Equal(t, [2]int64{wantOff, wantTs}, [2]int64{off, ts}, name)
	}
	check("before everything", -5, 0, 10)
	check("exact first", 10, 0, 10)
	check("between", 15, 1, 20)
	check("exact duplicate takes the first", 20, 1, 20)
	check("first record at or after, not the closest", 26, 3, 30)
	check("exact last", 40, 5, 40)
	check("after everything", 41, -1, -1)

	_, err = s.DeleteRecordsBefore(ctx, "ts", 0, 2)
	require.NoError(t, err)
	check("never below the log start", 0, 2, 20)
	check("still found above the log start", 30, 3, 30)
	_, err = s.DeleteRecordsBefore(ctx, "ts", 0, 4)
	require.NoError(t, err)
	check("purged match gives the next one", 26, 5, 40)
	check("lower timestamp after the log start", 0, 4, 25)
	_, err = s.DeleteRecordsBefore(ctx, "ts", 0, 6)
	require.NoError(t, err)
	check("every match purged", 0, -1, -1)
}

func testWatchAppend(t *testing.T, s logstore.Store) {
	createTopic(t, s, "w", 2)
	ch, err := s.Watch("w", 0)
	require.NoError(t, err)
	other, err := s.Watch("w", 1)
	require.NoError(t, err)
	requireOpen(t, ch)
	appendRecs(t, s, "w", 0, rec("a", "b", 1))
	requireClosed(t, ch, "an append")
	requireOpen(t, other)

	next, err := s.Watch("w", 0)
	require.NoError(t, err)
	requireOpen(t, next)
	_, hw, err := s.Bounds("w", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), hw, "the append is visible once the watch fires")

	// A watcher blocked before the append is woken too.
	woke := make(chan struct{})
	go func() {
		<-next
		close(woke)
	}()
	appendRecs(t, s, "w", 0, rec("c", "d", 2))
	requireClosed(t, woke, "an append, with a blocked waiter")
}

func testWatchPurge(t *testing.T, s logstore.Store) {
	createTopic(t, s, "wp", 1)
	appendRecs(t, s, "wp", 0, rec("a", "b", 1), rec("a", "b", 1))
	ch, err := s.Watch("wp", 0)
	require.NoError(t, err)
	_, err = s.DeleteRecordsBefore(ctx, "wp", 0, 0)
	require.NoError(t, err)
	requireOpen(t, ch) // a no-op purge is no change
	_, err = s.DeleteRecordsBefore(ctx, "wp", 0, 1)
	require.NoError(t, err)
	requireClosed(t, ch, "a purge")
}

func testWatchDelete(t *testing.T, s logstore.Store) {
	createTopic(t, s, "wd", 2)
	ch0, err := s.Watch("wd", 0)
	require.NoError(t, err)
	ch1, err := s.Watch("wd", 1)
	require.NoError(t, err)
	require.NoError(t, s.DeleteTopic(ctx, "wd"))
	requireClosed(t, ch0, "topic deletion")
	requireClosed(t, ch1, "topic deletion")
	_, err = s.Watch("wd", 0)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
	_, _, err = s.Bounds("wd", 0)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
}

func testPurge(t *testing.T, s logstore.Store) {
	createTopic(t, s, "p", 1)
	for i := range 10 {
		appendRecs(t, s, "p", 0, rec("k", fmt.Sprint(i), int64(i)))
	}
	tests := []struct {
		name    string
		offset  int64
		wantLS  int64
		wantErr error
	}{
		{"no-op at the log start", 0, 0, nil},
		{"moves the log start", 3, 3, nil},
		{"no-op below the log start", 2, 3, nil},
		{"minus one is not special here", -1, 3, nil},
		{"other negatives are a no-op too", -7, 3, nil},
		{"beyond the high watermark", 11, 0, logstore.ErrOffsetOutOfRange},
		{"to the middle", 7, 7, nil},
	}
	for _, tc := range tests { // sequential: each step builds on the last
		ls, err := s.DeleteRecordsBefore(ctx, "p", 0, tc.offset)
		if tc.wantErr != nil {
			assert.ErrorIs(t, err, tc.wantErr, tc.name)
		} else {
			require.NoError(t, err, tc.name)
			assert.Equal(t, tc.wantLS, ls, tc.name)
		}
	}
	ls, hw, err := s.Bounds("p", 0)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{7, 10}, [2]int64{ls, hw}, "an out-of-range purge does not move the log start")
	recs := readAll(t, s, "p", 0, 7)
	require.Len(t, recs, 3)
	assert.Equal(t, "7", string(recs[0].Value))

	assert.Equal(t, int64(10), appendRecs(t, s, "p", 0, rec("k", "10", 10)), "appends continue after a purge")
	_, parts, err := s.Topic(ctx, "p")
	require.NoError(t, err)
	assert.Equal(t, int64(7), parts[0].LogStartOffset)
	assert.Equal(t, int64(11), parts[0].HighWatermark)
}

func testPurgeEverything(t *testing.T, s logstore.Store) {
	createTopic(t, s, "pe", 1)
	appendRecs(t, s, "pe", 0, rec("a", "1", 1), rec("b", "2", 2), rec("c", "3", 3))
	ls, err := s.DeleteRecordsBefore(ctx, "pe", 0, 3)
	require.NoError(t, err, "purge to the high watermark")
	assert.Equal(t, int64(3), ls)
	recs, err := s.Read(ctx, "pe", 0, 3, 10, 1<<20)
	require.NoError(t, err)
	assert.Empty(t, recs)
	_, err = s.Read(ctx, "pe", 0, 2, 10, 1<<20)
	assert.ErrorIs(t, err, logstore.ErrOffsetOutOfRange)
	assert.Equal(t, int64(3), appendRecs(t, s, "pe", 0, rec("d", "4", 4)))
	recs, err = s.Read(ctx, "pe", 0, 3, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Equal(t, "4", string(recs[0].Value))
}

func testConcurrentAppends(t *testing.T, s logstore.Store) {
	createTopic(t, s, "conc", 1)
	const writers, batches = 8, 40
	type batch struct {
		base int64
		n    int
	}
	results := make([][]batch, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				n := 1 + (w+b)%4
				recs := make([]logstore.Record, n)
				for i := range recs {
					recs[i] = rec(fmt.Sprintf("w%d", w), fmt.Sprintf("w%d-b%d-r%d", w, b, i), int64(b))
				}
				base, err := s.Append(ctx, "conc", 0, recs)
				if !assert.NoError(t, err) {
					return
				}
				results[w] = append(results[w], batch{base, n})
			}
		})
	}
	wg.Wait()
	recs := readAll(t, s, "conc", 0, 0)
	total := 0
	for w := range writers {
		total += len(results[w])
		prev := int64(-1)
		for b, bt := range results[w] {
			assert.Greater(t, bt.base, prev, "a writer's batches get increasing offsets")
			prev = bt.base
			for i := range bt.n {
				require.Less(t, bt.base+int64(i), int64(len(recs)))
				assert.Equal(t, fmt.Sprintf("w%d-b%d-r%d", w, b, i), string(recs[bt.base+int64(i)].Value),
					"batch records are contiguous at the returned base")
			}
		}
	}
	assert.Equal(t, writers*batches, total)
	seen := make(map[string]bool)
	for i, r := range recs {
		require.Equal(t, int64(i), r.Offset, "offsets are dense")
		require.False(t, seen[string(r.Value)], "record %q stored twice", r.Value)
		seen[string(r.Value)] = true
	}
}

func testReadWhileAppending(t *testing.T, s logstore.Store) {
	createTopic(t, s, "rwa", 1)
	const total = 600
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < total; i += 3 {
			_, err := s.Append(ctx, "rwa", 0, []logstore.Record{
				rec("k", fmt.Sprint(i), int64(i)), rec("k", fmt.Sprint(i+1), int64(i+1)), rec("k", fmt.Sprint(i+2), int64(i+2)),
			})
			if !assert.NoError(t, err) {
				return
			}
		}
	}()
	// Follow the log with Watch, as a long-polling fetch does: every record
	// is seen once, in order, and none is ever half visible.
	// "Stuck" means no progress for waitTimeout: a replicated store on a
	// loaded machine may take longer than that for all 600 records.
	next := int64(0)
	for next < total {
		ch, err := s.Watch("rwa", 0)
		require.NoError(t, err)
		recs, err := s.Read(ctx, "rwa", 0, next, 7, 1<<20)
		require.NoError(t, err)
		for _, r := range recs {
			require.Equal(t, next, r.Offset)
			require.Equal(t, fmt.Sprint(next), string(r.Value))
			next++
		}
		if len(recs) == 0 {
			select {
			case <-ch:
			case <-time.After(waitTimeout):
				t.Fatalf("stuck at offset %d: no new record for %v", next, waitTimeout)
			}
		}
	}
	<-done
}

func testUnknown(t *testing.T, s logstore.Store) {
	createTopic(t, s, "known", 2)
	targets := []struct {
		name  string
		topic string
		part  int32
	}{
		{"unknown topic", "nope", 0},
		{"negative partition", "known", -1},
		{"partition = count", "known", 2},
		{"huge partition", "known", 1 << 30},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			calls := map[string]error{}
			_, calls["Append"] = s.Append(ctx, tg.topic, tg.part, []logstore.Record{rec("a", "b", 1)})
			_, calls["Read"] = s.Read(ctx, tg.topic, tg.part, 0, 1, 1)
			_, _, calls["Bounds"] = s.Bounds(tg.topic, tg.part)
			_, _, calls["OffsetForTimestamp"] = s.OffsetForTimestamp(ctx, tg.topic, tg.part, 0)
			_, calls["Watch"] = s.Watch(tg.topic, tg.part)
			_, calls["DeleteRecordsBefore"] = s.DeleteRecordsBefore(ctx, tg.topic, tg.part, 0)
			if tg.topic == "nope" {
				_, _, calls["Topic"] = s.Topic(ctx, tg.topic)
				_, calls["TopicInfo"] = s.TopicInfo(ctx, tg.topic)
				calls["DeleteTopic"] = s.DeleteTopic(ctx, tg.topic)
			}
			for _, name := range slices.Sorted(maps.Keys(calls)) {
				assert.ErrorIs(t, calls[name], logstore.ErrUnknownTopic, name)
			}
		})
	}
}

func testContextCanceled(t *testing.T, s logstore.Store) {
	createTopic(t, s, "ctx", 1)
	appendRecs(t, s, "ctx", 0, rec("a", "b", 1))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls := map[string]error{}
	_, calls["CreateTopic"] = s.CreateTopic(cctx, "ctx2", 1, logstore.TopicConfig{RetentionMs: -1})
	_, calls["Append"] = s.Append(cctx, "ctx", 0, []logstore.Record{rec("a", "b", 1)})
	_, calls["Read"] = s.Read(cctx, "ctx", 0, 0, 1, 1)
	_, calls["Topics"] = s.Topics(cctx)
	_, _, calls["Topic"] = s.Topic(cctx, "ctx")
	_, _, calls["OffsetForTimestamp"] = s.OffsetForTimestamp(cctx, "ctx", 0, 0)
	_, calls["DeleteRecordsBefore"] = s.DeleteRecordsBefore(cctx, "ctx", 0, 1)
	calls["DeleteTopic"] = s.DeleteTopic(cctx, "ctx")
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		assert.ErrorIs(t, calls[name], context.Canceled, name)
	}
	ls, hw, err := s.Bounds("ctx", 0)
	require.NoError(t, err, "a canceled DeleteTopic did nothing")
	assert.Equal(t, [2]int64{0, 1}, [2]int64{ls, hw}, "canceled calls changed nothing")
}

func testClosed(t *testing.T, s logstore.Store) {
	createTopic(t, s, "cl", 1)
	appendRecs(t, s, "cl", 0, rec("a", "b", 1))
	ch, err := s.Watch("cl", 0)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	requireClosed(t, ch, "Close")
	calls := map[string]error{}
	_, calls["CreateTopic"] = s.CreateTopic(ctx, "x", 1, logstore.TopicConfig{RetentionMs: -1})
	_, calls["Append"] = s.Append(ctx, "cl", 0, []logstore.Record{rec("a", "b", 1)})
	_, calls["Read"] = s.Read(ctx, "cl", 0, 0, 1, 1)
	_, calls["Topics"] = s.Topics(ctx)
	_, _, calls["Topic"] = s.Topic(ctx, "cl")
	_, _, calls["Bounds"] = s.Bounds("cl", 0)
	_, _, calls["OffsetForTimestamp"] = s.OffsetForTimestamp(ctx, "cl", 0, 0)
	_, calls["Watch"] = s.Watch("cl", 0)
	_, calls["DeleteRecordsBefore"] = s.DeleteRecordsBefore(ctx, "cl", 0, 1)
	calls["DeleteTopic"] = s.DeleteTopic(ctx, "cl")
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		assert.True(t, errors.Is(calls[name], logstore.ErrClosed), "%s after Close: %v", name, calls[name])
	}
	assert.NoError(t, s.Close(), "a second Close is harmless")
}

// grow returns an AlterTopic function that sets the partition count to n.
func grow(n int32) func(logstore.TopicInfo) (logstore.TopicInfo, error) {
	return func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
		cur.Partitions = n
		return cur, nil
	}
}

func testAlterTopicPartitions(t *testing.T, s logstore.Store) {
	before := createTopic(t, s, "grow", 2)
	appendRecs(t, s, "grow", 0, rec("a", "1", 1), rec("b", "2", 2))
	ch0, err := s.Watch("grow", 0)
	require.NoError(t, err)
	ch1, err := s.Watch("grow", 1)
	require.NoError(t, err)

	info, err := s.AlterTopic(ctx, "grow", grow(5))
	require.NoError(t, err)
	assert.Equal(t, int32(5), info.Partitions)
	assert.Equal(t, before.ID, info.ID, "the topic keeps its id")
	assert.Equal(t, before.Config, info.Config)
	requireClosed(t, ch0, "partitions added")
	requireClosed(t, ch1, "partitions added")

	got, parts, err := s.Topic(ctx, "grow")
	require.NoError(t, err)
	assert.Equal(t, info, got)
	require.Len(t, parts, 5)
	for _, p := range parts[2:] {
		assert.Zero(t, p.LogStartOffset, "partition %d", p.Partition)
		assert.Zero(t, p.HighWatermark, "partition %d", p.Partition)
	}
	ti, err := s.TopicInfo(ctx, "grow")
	require.NoError(t, err)
	assert.Equal(t, int32(5), ti.Partitions)
	topics, err := s.Topics(ctx)
	require.NoError(t, err)
	require.Len(t, topics, 1)
	assert.Equal(t, int32(5), topics[0].Partitions)

	// The old partitions keep their records and take appends; the new
	// ones start at 0.
	assert.Equal(t, int64(2), appendRecs(t, s, "grow", 0, rec("c", "3", 3)))
	assert.Len(t, readAll(t, s, "grow", 0, 0), 3)
	for p := int32(2); p < 5; p++ {
		ch, err := s.Watch("grow", p)
		require.NoError(t, err)
		assert.Equal(t, int64(0), appendRecs(t, s, "grow", p, rec("k", fmt.Sprint(p), 4)))
		requireClosed(t, ch, "an append to a new partition")
		recs := readAll(t, s, "grow", p, 0)
		require.Len(t, recs, 1)
		assert.Equal(t, fmt.Sprint(p), string(recs[0].Value))
	}
	_, err = s.Append(ctx, "grow", 5, []logstore.Record{rec("k", "v", 1)})
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic, "partition 5 is still beyond the count")

	// Growing again, and an alteration that changes nothing.
	info, err = s.AlterTopic(ctx, "grow", grow(6))
	require.NoError(t, err)
	assert.Equal(t, int32(6), info.Partitions)
	info, err = s.AlterTopic(ctx, "grow", grow(6))
	require.NoError(t, err)
	assert.Equal(t, int32(6), info.Partitions)
	assert.Len(t, readAll(t, s, "grow", 4, 0), 1)

	// A deleted topic takes its new partitions with it.
	require.NoError(t, s.DeleteTopic(ctx, "grow"))
	_, _, err = s.Bounds("grow", 5)
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
}

func testAlterTopicConfig(t *testing.T, s logstore.Store) {
	createTopic(t, s, "conf", 1)
	appendRecs(t, s, "conf", 0, rec("a", "1", 1))
	ch, err := s.Watch("conf", 0)
	require.NoError(t, err)
	info, err := s.AlterTopic(ctx, "conf", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
		cur.Config.RetentionMs = 3600000
		cur.Config.RetentionBytes = 1 << 30
		cur.Config.MaxMessageBytes = 2048
		cur.Config.CompressionType = logstore.CompressionZstd
		cur.Config.MessageTimestampType = logstore.TimestampLogAppendTime
		cur.Config.SegmentMs = 60000
		cur.Config.MinInsyncReplicas = 2
		cur.Config.Overrides = []string{"retention.ms", "max.message.bytes", "retention.ms"}
		return cur, nil
	})
	require.NoError(t, err)
	requireClosed(t, ch, "a config change")
	want := logstore.TopicConfig{SegmentBytes: info.Config.SegmentBytes, RetentionMs: 3600000, CleanupPolicy: logstore.CleanupDelete,
		RetentionBytes: 1 << 30, MaxMessageBytes: 2048, CompressionType: logstore.CompressionZstd,
		MessageTimestampType: logstore.TimestampLogAppendTime, SegmentMs: 60000, MinInsyncReplicas: 2,
		Overrides: []string{"max.message.bytes", "retention.ms"}}
	assert.Equal(t, want, info.Config, "normalized: overrides sorted, once each")
	got, err := s.TopicInfo(ctx, "conf")
	require.NoError(t, err)
	assert.Equal(t, want, got.Config)
	assert.Len(t, readAll(t, s, "conf", 0, 0), 1)

	// Turning compaction on: keyless records are refused from then on.
	_, err = s.AlterTopic(ctx, "conf", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
		cur.Config.CleanupPolicy = logstore.CleanupCompact
		return cur, nil
	})
	require.NoError(t, err)
	_, err = s.Append(ctx, "conf", 0, []logstore.Record{{Value: []byte("no key")}})
	assert.ErrorIs(t, err, logstore.ErrInvalidArgument)
	got, err = s.TopicInfo(ctx, "conf")
	require.NoError(t, err)
	assert.Equal(t, int64(logstore.DefaultDeleteRetentionMs), got.Config.DeleteRetentionMs, "compaction settings filled in")

	// Back to delete: keyless records are taken again.
	_, err = s.AlterTopic(ctx, "conf", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
		cur.Config.CleanupPolicy = logstore.CleanupDelete
		return cur, nil
	})
	require.NoError(t, err)
	_, err = s.Append(ctx, "conf", 0, []logstore.Record{{Value: []byte("no key")}})
	assert.NoError(t, err)
}

func testAlterTopicRefused(t *testing.T, s logstore.Store) {
	before := createTopic(t, s, "ref", 3)
	appendRecs(t, s, "ref", 1, rec("a", "1", 1))
	mine := errors.New("refused by fn")
	cases := []struct {
		name string
		fn   func(logstore.TopicInfo) (logstore.TopicInfo, error)
		want error
	}{
		{"fewer partitions", grow(2), logstore.ErrInvalidArgument},
		{"too many partitions", grow(logstore.MaxPartitions + 1), logstore.ErrInvalidArgument},
		{"other name", func(c logstore.TopicInfo) (logstore.TopicInfo, error) { c.Name = "other"; return c, nil }, logstore.ErrInvalidArgument},
		{"other id", func(c logstore.TopicInfo) (logstore.TopicInfo, error) { c.ID = "x"; return c, nil }, logstore.ErrInvalidArgument},
		{"bad config", func(c logstore.TopicInfo) (logstore.TopicInfo, error) {
			c.Config.CompressionType = "brotli"
			return c, nil
		}, logstore.ErrInvalidArgument},
		{"bad timestamp type", func(c logstore.TopicInfo) (logstore.TopicInfo, error) {
			c.Config.MessageTimestampType = "logappendtime"
			return c, nil
		}, logstore.ErrInvalidArgument},
		{"fn's error", func(logstore.TopicInfo) (logstore.TopicInfo, error) { return logstore.TopicInfo{}, mine }, mine},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.AlterTopic(ctx, "ref", tc.fn)
			require.ErrorIs(t, err, tc.want)
			got, _, err := s.Topic(ctx, "ref")
			require.NoError(t, err)
			assert.Equal(t, before, got, "nothing changed")
			assert.Len(t, readAll(t, s, "ref", 1, 0), 1)
		})
	}
	_, err := s.AlterTopic(ctx, "missing", grow(2))
	assert.ErrorIs(t, err, logstore.ErrUnknownTopic)
}

// testAlterTopicConcurrent: alterations of one topic from many goroutines
// are each applied to the result of the one before (none is lost).
func testAlterTopicConcurrent(t *testing.T, s logstore.Store) {
	createTopic(t, s, "conc", 1)
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := s.AlterTopic(ctx, "conc", func(cur logstore.TopicInfo) (logstore.TopicInfo, error) {
				cur.Partitions++
				return cur, nil
			})
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	info, parts, err := s.Topic(ctx, "conc")
	require.NoError(t, err)
	assert.Equal(t, int32(1+n), info.Partitions)
	assert.Len(t, parts, 1+n)
}
