package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// bigValue is large enough that a few dozen unread events fill the stream's
// flow-control window, so the server blocks in Send mid-snapshot.
var bigValue = strings.Repeat("v", 64<<10)

// produceBig produces n keyed records with big values (keys k000...).
func (s *stack) produceBig(t testing.TB, topic string, n int) {
	t.Helper()
	for i := 0; i < n; i += 10 {
		var kvs []string
		for j := i; j < min(i+10, n); j++ {
			kvs = append(kvs, fmt.Sprintf("k%03d", j), bigValue)
		}
		s.produceKV(t, topic, kvs...)
	}
}

// lastEvents drains a call and returns its events.
func drainOK(t *testing.T, c *changeCall) []string {
	t.Helper()
	evs, err := c.drain(t)
	require.NoError(t, err, "the call completes with status OK after stream_end")
	return evs
}

// TestChangesPurgeOvertakes: a purge past the reader ends the stream with ROLLBACK.
func TestChangesPurgeOvertakes(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)

	t.Run("a lagging ordered reader gets stream_end{ROLLBACK}", func(t *testing.T) {
		s.createTopic(t, "lag", 1, nil)
		s.produceBig(t, "lag", 300)
		c := s.openChanges(t, streamReq("lag", 0))
		require.Equal(t, "marker(0..299, DISK)", c.nextStr(t))
		require.Equal(t, "mut(k000@0)", c.nextStr(t))
		require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, purgeOne(t, s, "lag", 0, 300).GetErrorCode())
		evs := drainOK(t, c)
		require.NotEmpty(t, evs)
		assert.Equal(t, "end(ROLLBACK)", evs[len(evs)-1])
		assert.Less(t, len(evs), 299, "the purge stopped the reader before the end of the backlog")
	})
	t.Run("an OSO snapshot overtaken mid-way", func(t *testing.T) {
		s.createTopic(t, "lagoso", 1, nil)
		s.produceBig(t, "lagoso", 300)
		c := s.openChanges(t, streamReq("lagoso", 0, withOSO(osoAdv)))
		require.Equal(t, "oso(START)", c.nextStr(t))
		require.Equal(t, "mut(k000@0)", c.nextStr(t))
		require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, purgeOne(t, s, "lagoso", 0, 300).GetErrorCode())
		evs := drainOK(t, c)
		assert.Equal(t, "end(ROLLBACK)", evs[len(evs)-1])
		assert.NotContains(t, evs, "oso(END)", "the rollback cuts the open snapshot")
	})
	t.Run("the move to ordered after END when E < LSO", func(t *testing.T) {
		s.createTopic(t, "afterend", 1, nil)
		s.produceKV(t, "afterend", "a", "1", "b", "2")
		c := s.openChanges(t, streamReq("afterend", 0, withOSO(osoAdv), withPrefix("nothing")))
		assert.Equal(t, []string{"oso(START)", "adv(1)", "oso(END)"}, c.take(t, 3))
		s.produceKV(t, "afterend", "c", "3", "d", "4")
		require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, purgeOne(t, s, "afterend", 0, 4).GetErrorCode())
		evs := drainOK(t, c)
		// The stream may have covered [2, 3] before the purge (then it tails
		// at the HW and is not overtaken) or not (then it is).
		if evs[0] == "end(ROLLBACK)" {
			return
		}
		assert.Equal(t, []string{"marker(2..3, MEMORY)", "adv(3)"}, evs[:2])
	})
	t.Run("a tailing stream at the HW is never overtaken", func(t *testing.T) {
		s.createTopic(t, "tailpurge", 1, nil)
		s.produceKV(t, "tailpurge", "a", "1")
		c := s.openChanges(t, streamReq("tailpurge", 1))
		require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, purgeOne(t, s, "tailpurge", 0, 1).GetErrorCode())
		s.produceKV(t, "tailpurge", "b", "2")
		assert.Equal(t, []string{"marker(1..1, MEMORY)", "mut(b@1)"}, c.take(t, 2))
	})
}

// TestChangesTopicDeleted: deleting the topic ends the stream with TOPIC_DELETED.
func TestChangesTopicDeleted(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	ctx := context.Background()

	t.Run("a tail", func(t *testing.T) {
		s.createTopic(t, "del-tail", 1, nil)
		c := s.openChanges(t, streamReq("del-tail", 0))
		_, err := s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "del-tail"})
		require.NoError(t, err)
		assert.Equal(t, []string{"end(TOPIC_DELETED)"}, drainOK(t, c))
	})
	t.Run("inside an OSO snapshot: no END", func(t *testing.T) {
		old := s.createTopic(t, "del-oso", 1, nil).GetTopicId()
		s.produceBig(t, "del-oso", 300)
		c := s.openChanges(t, streamReq("del-oso", 0, withOSO(osoAdv)))
		require.Equal(t, "oso(START)", c.nextStr(t))
		_, err := s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "del-oso"})
		require.NoError(t, err)
		evs := drainOK(t, c)
		assert.Equal(t, "end(TOPIC_DELETED)", evs[len(evs)-1])
		assert.NotContains(t, evs, "oso(END)")
		assert.Less(t, len(evs), 300)

		requireReason(t, requireRecvError(t, s.openChanges(t, streamReq("del-oso", 0))), codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION")
		fresh := s.createTopic(t, "del-oso", 1, nil).GetTopicId()
		info := requireReason(t, requireRecvError(t, s.openChanges(t, streamReq("del-oso", 0, withTopicID(old)))),
			codes.FailedPrecondition, "ROLLBACK_REQUIRED")
		assert.Equal(t, "topic_recreated", info.GetMetadata()["cause"])
		assert.Equal(t, fresh, info.GetMetadata()["topic_id"])
		s.produceKV(t, "del-oso", "new", "1")
		assert.Equal(t, []string{"marker(0..0, DISK)", "mut(new@0)", "end(OK)"},
			s.streamAll(t, streamReq("del-oso", 0, withEnd(1))), "without topic_id the new topic is read silently")
	})
	t.Run("deleted and re-created while a stream tails", func(t *testing.T) {
		s.createTopic(t, "del-re", 1, nil)
		c := s.openChanges(t, streamReq("del-re", 0))
		_, err := s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "del-re"})
		require.NoError(t, err)
		s.createTopic(t, "del-re", 1, nil)
		s.produceKV(t, "del-re", "x", "1")
		assert.Equal(t, []string{"end(TOPIC_DELETED)"}, drainOK(t, c), "the stream never reads the new topic")
	})
}

// TestChangesShutdown: a server shutdown ends the stream with SHUTDOWN.
func TestChangesShutdown(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	s.createTopic(t, "sd", 1, nil)
	s.produceBig(t, "sd", 100)
	tail := s.openChanges(t, streamReq("sd", 100))
	oso := s.openChanges(t, streamReq("sd", 0, withOSO(osoAdv)))
	require.Equal(t, "oso(START)", oso.nextStr(t))
	done := make(chan error, 1)
	go func() { done <- s.srv.Close() }()
	assert.Equal(t, []string{"end(SHUTDOWN)"}, drainOK(t, tail))
	evs := drainOK(t, oso)
	assert.Equal(t, "end(SHUTDOWN)", evs[len(evs)-1])
	assert.NotContains(t, evs, "oso(END)", "inside an OSO snapshot: without END")
	require.NoError(t, <-done)
	cl := sharelogv1.NewChangeStreamServiceClient(s.conn)
	st, err := cl.StreamChanges(context.Background(), streamReq("sd", 0))
	if err == nil {
		_, err = st.Recv()
	}
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, statusCode(err), "new calls after shutdown: %v", err)
}

// TestChangesMaxStreams: --max-change-streams.
func TestChangesMaxStreams(t *testing.T) {
	t.Parallel()
	// The global cap, not the per-client share: every call here is one client.
	s := newStack(t, app.Options{}, func(c *app.Config) { c.MaxChangeStreams = 2; c.MaxChangeStreamsPerPrincipal = 2 })
	s.createTopic(t, "ms", 1, nil)
	a := s.openChanges(t, streamReq("ms", 0))
	s.openChanges(t, streamReq("ms", 0))
	requireReason(t, requireRecvError(t, s.openChanges(t, streamReq("ms", 0))), codes.ResourceExhausted, "THROTTLING_QUOTA_EXCEEDED")
	r := s.rest(t, "GET", "/v1/topics/ms/partitions/0/changes", "")
	require.Equal(t, 429, r.Status, r.Raw)
	assert.Contains(t, r.Raw, "THROTTLING_QUOTA_EXCEEDED")
	a.cancel()
	require.Eventually(t, func() bool {
		c := s.openChanges(t, streamReq("ms", 0, withEnd(0)))
		evs, err := c.drain(t)
		return err == nil && slices.Equal(evs, []string{"end(OK)"})
	}, evTimeout, pollTick, "a slot frees when a call ends")
}

// TestChangesCorruptData: a checksum failure ends the call with DATA_LOSS.
func TestChangesCorruptData(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	id := s.createTopic(t, "cor", 1, nil).GetTopicId()
	s.produceKV(t, "cor", "a", strings.Repeat("x", 100), "b", strings.Repeat("y", 100))
	path := filepath.Join(s.dataDir, "topics", id, "0", fmt.Sprintf("%020d.log", 0))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("Z"), 60)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = s.openChanges(t, streamReq("cor", 0, withEnd(2))).drain(t)
	requireReason(t, err, codes.DataLoss, "CORRUPT_MESSAGE")
}

// TestChangesAutoBackfill: the auto estimate (OSO iff few keys match) with the default
// ratios, and its metric.
func TestChangesAutoBackfill(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	s.createTopic(t, "auto", 1, nil)
	// 1000 small records (mean stored size < 256 B, so r = 0.02, limit
	// floor(0.02·1000)+1 = 21 keys): 10 keys under a/, 100 under b/, the
	// rest under c/.
	var kvs []string
	for i := range 1000 {
		switch {
		case i < 10:
			kvs = append(kvs, fmt.Sprintf("a/%d", i), "v")
		case i < 110:
			kvs = append(kvs, fmt.Sprintf("b/%d", i), "v")
		default:
			kvs = append(kvs, fmt.Sprintf("c/%d", i), "v")
		}
	}
	for i := 0; i < len(kvs); i += 200 {
		s.produceKV(t, "auto", kvs[i:i+200]...)
	}
	cases := []struct {
		prefix string
		oso    bool
	}{{"a/", true}, {"b/", false}, {"", false}, {"q/", true}}
	for _, tc := range cases {
		evs := s.streamAll(t, streamReq("auto", 0, withOSO(osoAdv), withPrefix(tc.prefix), withEnd(1000)))
		assert.Equal(t, tc.oso, evs[0] == "oso(START)", "prefix %q: %v", tc.prefix, evs[0])
	}
	metrics := s.rest(t, "GET", "/metrics", "").Raw
	assert.Regexp(t, `sharelog_change_stream_backfills_total\{[^}]*kind="oso"[^}]*\} 2`, metrics)
	assert.Regexp(t, `sharelog_change_stream_backfills_total\{[^}]*kind="ordered"[^}]*\} 2`, metrics)
}

// TestChangesOSOInvariant: at END, the key → latest-record map built from
// the OSO events equals the one from an ordered stream of [L0, E) with the
// same prefix, and both shapes agree at the end of a later range.
func TestChangesOSOInvariant(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	s.createTopic(t, "inv", 1, nil)
	write := func(from, n int) {
		var kvs []string
		for i := from; i < from+n; i++ {
			key := fmt.Sprintf("%c/%d", 'a'+i%3, (i*7)%23)
			val := fmt.Sprint(i)
			switch {
			case i%5 == 0:
				val = "" // tombstone
			case i%11 == 0:
				key = "-" // keyless
			}
			kvs = append(kvs, key, val)
		}
		s.produceKV(t, "inv", kvs...)
	}
	write(0, 300)
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, purgeOne(t, s, "inv", 0, 40).GetErrorCode())
	write(300, 100) // E = 400, L0 = 40
	for _, prefix := range []string{"", "a/", "b/1", "zzz"} {
		osoMap := materialize(t, s.streamAll(t, streamReq("inv", 0, withOSO(osoAdv), withPrefix(prefix), withEnd(400))))
		ordMap := materialize(t, s.streamAll(t, streamReq("inv", 0, withOSO(osoOff), withPrefix(prefix), withEnd(400))))
		assert.Equal(t, ordMap, osoMap, "prefix %q at END", prefix)
	}
	write(400, 100)
	for _, prefix := range []string{"", "c/"} {
		osoMap := materialize(t, s.streamAll(t, streamReq("inv", 0, withOSO(osoAdv), withPrefix(prefix), withEnd(500))))
		ordMap := materialize(t, s.streamAll(t, streamReq("inv", 0, withOSO(osoOff), withPrefix(prefix), withEnd(500))))
		assert.Equal(t, ordMap, osoMap, "prefix %q after more appends", prefix)
	}
}

// materialize applies events in order: key → latest offset, tombstoned
// keys absent.
func materialize(t *testing.T, evs []string) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for _, e := range evs {
		var key string
		var off int64
		switch {
		case strings.HasPrefix(e, "mut("):
			i := strings.LastIndex(e, "@")
			key = e[4:i]
			_, err := fmt.Sscanf(e[i:], "@%d)", &off)
			require.NoError(t, err)
			m[key] = off
		case strings.HasPrefix(e, "del("):
			i := strings.LastIndex(e, "@")
			delete(m, e[4:i])
		}
	}
	return m
}
