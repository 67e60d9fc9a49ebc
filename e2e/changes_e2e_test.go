package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// osoEnabled runs the server with --oso-backfill=enabled, as the examples
// assume.
func osoEnabled(c *app.Config) { c.OSOBackfill = "enabled" }

// TestChangesValidation: every request check and its order.
func TestChangesValidation(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	id := s.exampleTopic(t, "v")
	purged := s.exampleTopic(t, "purged")
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, purgeOne(t, s, "purged", 0, 3).GetErrorCode())
	other := "00000000-0000-4000-8000-000000000000"
	cases := []struct {
		name   string
		req    *sharelogv1.StreamChangesRequest
		code   codes.Code
		reason string
		meta   map[string]string
	}{
		{"empty topic", streamReq("", 0), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"negative partition", &sharelogv1.StreamChangesRequest{Topic: "v", Partition: -1}, codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"negative start", streamReq("v", -1), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"end below start", streamReq("v", 3, withEnd(2)), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"topic id not a uuid", streamReq("v", 0, withTopicID("nope")), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"unknown oso mode", streamReq("v", 0, withOSO(9)), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"invalid before unknown topic", streamReq("nope", -1), codes.InvalidArgument, "INVALID_REQUEST", nil},
		{"unknown topic", streamReq("nope", 0), codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION", nil},
		{"unknown partition", &sharelogv1.StreamChangesRequest{Topic: "v", Partition: 1}, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION", nil},
		{"unknown topic before topic id", streamReq("nope", 0, withTopicID(other)), codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION", nil},
		{"topic re-created", streamReq("v", 2, withTopicID(other)), codes.FailedPrecondition, "ROLLBACK_REQUIRED",
			map[string]string{"rollback_offset": "0", "cause": "topic_recreated", "topic_id": id, "log_start_offset": "0", "high_watermark": "8"}},
		{"topic id checked before offsets", streamReq("v", 100, withTopicID(other)), codes.FailedPrecondition, "ROLLBACK_REQUIRED", nil},
		{"start above the high watermark", streamReq("v", 9, withTopicID(id)), codes.OutOfRange, "OFFSET_OUT_OF_RANGE",
			map[string]string{"log_start_offset": "0", "high_watermark": "8"}},
		{"history purged", streamReq("purged", 2, withTopicID(purged)), codes.FailedPrecondition, "ROLLBACK_REQUIRED",
			map[string]string{"rollback_offset": "0", "cause": "history_purged", "topic_id": purged, "log_start_offset": "3", "high_watermark": "8"}},
		{"history purged, start 1", streamReq("purged", 1), codes.FailedPrecondition, "ROLLBACK_REQUIRED", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := s.openChanges(t, tc.req)
			info := requireReason(t, requireRecvError(t, c), tc.code, tc.reason)
			for k, v := range tc.meta {
				assert.Equal(t, v, info.GetMetadata()[k], "metadata %s", k)
			}
		})
	}

	t.Run("start 0 never rolls back and starts at the LSO", func(t *testing.T) {
		assert.Equal(t, []string{"marker(3..7, DISK)", "mut(u/a@3)", "del(u/b@4)", "mut(x/y@5)", "mut(u/c@6)", "del(x/z@7)", "end(OK)"},
			s.streamAll(t, streamReq("purged", 0, withEnd(8))))
	})
	t.Run("start at the LSO", func(t *testing.T) {
		assert.Equal(t, []string{"marker(3..7, DISK)", "mut(u/a@3)", "del(u/b@4)", "mut(x/y@5)", "mut(u/c@6)", "del(x/z@7)", "end(OK)"},
			s.streamAll(t, streamReq("purged", 3, withEnd(8), withTopicID(purged))))
	})
	t.Run("end equal to start sends only stream_end", func(t *testing.T) {
		assert.Equal(t, []string{"end(OK)"}, s.streamAll(t, streamReq("v", 5, withEnd(5))))
		assert.Equal(t, []string{"end(OK)"}, s.streamAll(t, streamReq("v", 8, withEnd(8), withOSO(osoAdv))))
	})
	t.Run("start at the high watermark is valid", func(t *testing.T) {
		c := s.openChanges(t, streamReq("v", 8))
		c.quiet(t, 100*time.Millisecond)
	})
}

// TestChangesOrderedExamples: ordered snapshots, unfiltered and filtered.
func TestChangesOrderedExamples(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	s.exampleTopic(t, "ex")

	t.Run("Ex1", func(t *testing.T) {
		c := s.openChanges(t, streamReq("ex", 0, withPrefix("u/")))
		assert.Equal(t, []string{"marker(0..7, DISK)", "mut(u/a@0)", "mut(u/b@2)", "mut(u/a@3)", "del(u/b@4)", "mut(u/c@6)", "adv(7)"}, c.take(t, 7))
		s.produceKV(t, "ex", "u/d", "4")
		assert.Equal(t, []string{"marker(8..8, MEMORY)", "mut(u/d@8)"}, c.take(t, 2))
	})
	t.Run("Ex2", func(t *testing.T) {
		assert.Equal(t, []string{"marker(0..5, DISK)", "mut(u/a@0)", "mut(u/b@2)", "mut(u/a@3)", "del(u/b@4)", "adv(5)", "end(OK)"},
			s.streamAll(t, streamReq("ex", 0, withPrefix("u/"), withEnd(6))))
	})
	t.Run("no prefix: every keyed record, every version, no adv when e was sent", func(t *testing.T) {
		assert.Equal(t, []string{"marker(0..3, DISK)", "mut(u/a@0)", "mut(x/z@1)", "mut(u/b@2)", "mut(u/a@3)", "end(OK)"},
			s.streamAll(t, streamReq("ex", 0, withEnd(4))))
	})
	t.Run("end above the HW tails until the HW gets there", func(t *testing.T) {
		c := s.openChanges(t, streamReq("ex", 9, withPrefix("u/"), withEnd(11)))
		s.produceKV(t, "ex", "u/e", "1", "x/q", "2")
		assert.Equal(t, []string{"marker(9..10, MEMORY)", "mut(u/e@9)", "adv(10)", "end(OK)"}, c.take(t, 4))
		evs, err := c.drain(t)
		require.NoError(t, err, "the call completes with status OK after stream_end")
		assert.Empty(t, evs, "nothing after stream_end")
	})
}

// TestChangesRecordContent: mutations carry headers and timestamps,
// deletions no headers; keyless and empty-key records never match.
func TestChangesRecordContent(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	s.createTopic(t, "rc", 1, nil)
	p := int32(0)
	_, err := s.log.Produce(context.Background(), &sharelogv1.ProduceRequest{Topic: "rc", Partition: &p, Records: []*sharelogv1.Record{
		{Key: []byte("k"), Value: []byte("v"), Timestamp: 42, Headers: []*sharelogv1.RecordHeader{{Key: "h", Value: []byte("1")}}},
		{Value: []byte("keyless")},
		{Key: []byte{}, Value: []byte("empty key")},
		{Key: []byte("k"), Timestamp: 43, Headers: []*sharelogv1.RecordHeader{{Key: "h", Value: []byte("2")}}},
		{Key: []byte("k"), Value: []byte("again"), Timestamp: 44},
	}})
	require.NoError(t, err)
	for _, mode := range []sharelogv1.OsoMode{osoOff, osoOn} {
		c := s.openChanges(t, streamReq("rc", 0, withEnd(5), withOSO(mode)))
		var got []*sharelogv1.ChangeEvent
		for {
			r, err := c.next(t)
			require.NoError(t, err)
			got = append(got, r)
			if r.GetStreamEnd() != nil {
				break
			}
		}
		var strs []string
		for _, r := range got {
			strs = append(strs, evString(r))
		}
		if mode == osoOff {
			require.Equal(t, []string{"marker(0..4, DISK)", "mut(k@0)", "del(k@3)", "mut(k@4)", "end(OK)"}, strs, "no deduplication")
			m := got[1].GetMutation()
			assert.Equal(t, int64(42), m.GetTimestamp())
			assert.Equal(t, "v", string(m.GetValue()))
			require.Len(t, m.GetHeaders(), 1)
			assert.Equal(t, "h", m.GetHeaders()[0].GetKey())
			assert.Equal(t, int64(43), got[2].GetDeletion().GetTimestamp())
		} else {
			require.Equal(t, []string{"oso(START)", "mut(k@4)", "oso(END)", "end(OK)"}, strs, "one event per key, its latest record")
			assert.Equal(t, "again", string(got[1].GetMutation().GetValue()))
		}
	}
}

// TestChangesOSOExamples: OSO snapshots in their three modes.
func TestChangesOSOExamples(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	for _, name := range []string{"ex3", "ex4", "ex5", "all"} {
		s.exampleTopic(t, name)
	}

	t.Run("Ex3", func(t *testing.T) {
		c := s.openChanges(t, streamReq("ex3", 0, withPrefix("u/"), withOSO(osoAdv)))
		evs := c.take(t, 6)
		items, rest := osoSplit(t, evs)
		assert.Equal(t, []string{"adv(7)", "del(u/b@4)", "mut(u/a@3)", "mut(u/c@6)"}, items)
		assert.Equal(t, "adv(7)", evs[4], "offset_advanced{E-1} right before END")
		assert.Empty(t, rest)
		s.produceKV(t, "ex3", "u/d", "4")
		assert.Equal(t, []string{"marker(8..8, MEMORY)", "mut(u/d@8)"}, c.take(t, 2), "then the tail of Ex1 from 8")
	})
	t.Run("Ex4", func(t *testing.T) {
		c := s.openChanges(t, streamReq("ex4", 0, withPrefix("u/"), withOSO(osoOn), withEnd(9)))
		items, rest := osoSplit(t, c.take(t, 5))
		assert.Equal(t, []string{"del(u/b@4)", "mut(u/a@3)", "mut(u/c@6)"}, items, "ON: no offset_advanced")
		assert.Empty(t, rest)
		s.produceKV(t, "ex4", "u/d", "4")
		evs, err := c.drain(t)
		require.NoError(t, err)
		assert.Equal(t, []string{"marker(8..8, MEMORY)", "mut(u/d@8)", "end(OK)"}, evs)
		assert.Equal(t, []string{"marker(7..7, DISK)", "adv(7)", "end(OK)"},
			s.streamAll(t, streamReq("ex4", 7, withPrefix("u/"), withOSO(osoOn), withEnd(8))), "a reconnect from 7 (above the LSO) gets no OSO")
	})
	t.Run("Ex5", func(t *testing.T) {
		assert.Equal(t, []string{"oso(START)", "adv(7)", "oso(END)", "end(OK)"},
			s.streamAll(t, streamReq("ex5", 0, withPrefix("q/"), withOSO(osoAdv), withEnd(8))))
		assert.Equal(t, []string{"oso(START)", "oso(END)", "end(OK)"},
			s.streamAll(t, streamReq("ex5", 0, withPrefix("q/"), withOSO(osoOn), withEnd(8))), "START and END even when nothing matches")
	})
	t.Run("no prefix", func(t *testing.T) {
		items, rest := osoSplit(t, s.streamAll(t, streamReq("all", 0, withOSO(osoAdv), withEnd(8))))
		assert.Equal(t, []string{"del(u/b@4)", "del(x/z@7)", "mut(u/a@3)", "mut(u/c@6)", "mut(x/y@5)"}, items,
			"the greatest offset sent is E-1: no offset_advanced")
		assert.Equal(t, []string{"end(OK)"}, rest, "end_offset = E: stream_end right after END")
	})
}

// TestChangesOSOEligibility: each condition that makes a call ordered instead of OSO.
func TestChangesOSOEligibility(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	id := s.exampleTopic(t, "el")
	s.createTopic(t, "empty", 1, nil)
	disabled := newStack(t, app.Options{}, func(c *app.Config) { c.OSOBackfill = "disabled" })
	disabled.exampleTopic(t, "el")
	cases := []struct {
		name string
		s    *stack
		req  *sharelogv1.StreamChangesRequest
		oso  bool
	}{
		{"ON", s, streamReq("el", 0, withOSO(osoOn), withEnd(8)), true},
		{"ON_WITH_OFFSET_ADVANCED", s, streamReq("el", 0, withOSO(osoAdv), withEnd(8)), true},
		{"OFF", s, streamReq("el", 0, withOSO(osoOff), withEnd(8)), false},
		{"UNSPECIFIED means OFF", s, streamReq("el", 0, withEnd(8)), false},
		{"resuming above the LSO", s, streamReq("el", 1, withOSO(osoOn), withEnd(8), withTopicID(id)), false},
		{"end_offset below E", s, streamReq("el", 0, withOSO(osoOn), withEnd(7)), false},
		{"disabled", disabled, streamReq("el", 0, withOSO(osoOn), withEnd(8)), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			evs := tc.s.streamAll(t, tc.req)
			assert.Equal(t, tc.oso, evs[0] == "oso(START)", "events: %v", evs)
		})
	}
	t.Run("nothing to backfill", func(t *testing.T) {
		c := s.openChanges(t, streamReq("empty", 0, withOSO(osoOn)))
		s.produceKV(t, "empty", "a", "1")
		assert.Equal(t, []string{"marker(0..0, MEMORY)", "mut(a@0)"}, c.take(t, 2))
	})
}

// TestChangesOSOFixedPoint: records appended while an OSO snapshot runs are
// not in it; they follow after END in ordered snapshots from E.
func TestChangesOSOFixedPoint(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	s.createTopic(t, "fp", 1, nil)
	var kvs []string
	for i := range 50 {
		kvs = append(kvs, fmt.Sprintf("k%02d", i), "old")
	}
	s.produceKV(t, "fp", kvs...)
	c := s.openChanges(t, streamReq("fp", 0, withOSO(osoAdv), withEnd(100)))
	require.Equal(t, "oso(START)", c.nextStr(t))
	// Every key gets a newer version (and a new key comes) while the
	// snapshot runs.
	for i := range 49 {
		kvs[2*i+1] = "new"
	}
	s.produceKV(t, "fp", append(kvs[:98], "k99", "new", "k00", "")...)
	evs, err := c.drain(t)
	require.NoError(t, err)
	items, rest := osoSplit(t, append([]string{"oso(START)"}, evs...))
	require.Len(t, items, 50)
	for i, it := range items {
		assert.Equal(t, fmt.Sprintf("mut(k%02d@%d)", i, i), it, "the versions below E=50")
	}
	require.Regexp(t, `^marker\(50\.\.99, (DISK|MEMORY)\)$`, rest[0], "ordered from E (the source is informational)")
	assert.Len(t, rest, 1+50+1)
	assert.Equal(t, "end(OK)", rest[len(rest)-1])
}

// TestChangesDiskSnapshotsPerSegment: DISK snapshots never span a segment,
// so a filtered catch-up moves the resume point at least once per segment.
func TestChangesDiskSnapshotsPerSegment(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	s.createTopic(t, "seg", 1, &sharelogv1.TopicConfig{SegmentBytes: proto.Int64(1024)})
	for i := range 20 {
		var kvs []string
		for j := range 10 {
			kvs = append(kvs, fmt.Sprintf("k%d", (i*10+j)%7), fmt.Sprintf("value-%03d", i*10+j))
		}
		s.produceKV(t, "seg", kvs...)
	}
	topic, err := s.log.DescribeTopic(context.Background(), &sharelogv1.DescribeTopicRequest{Name: "seg"})
	require.NoError(t, err)
	segments := int(topic.GetPartitions()[0].GetSegmentCount())
	require.Greater(t, segments, 3)
	evs := s.streamAll(t, streamReq("seg", 0, withPrefix("nothing"), withEnd(200)))
	markers := 0
	next := int64(0)
	for i := 0; i < len(evs)-1; i += 2 {
		var a, b int64
		_, err := fmt.Sscanf(evs[i], "marker(%d..%d, DISK)", &a, &b)
		require.NoError(t, err, evs[i])
		assert.Equal(t, next, a, "snapshots leave no gap")
		assert.Equal(t, fmt.Sprintf("adv(%d)", b), evs[i+1])
		next = b + 1
		markers++
	}
	assert.Equal(t, int64(200), next)
	assert.Equal(t, segments, markers, "one DISK snapshot per segment")
}
