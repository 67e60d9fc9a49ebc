package changestream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/client/changestream"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// compactedTopic writes a compacted partition (several versions per key,
// tombstones, small segments), waits until the server's cleaner has
// rewritten it (superseded records and expired tombstones gone, so offsets
// have gaps and P >= 0), and returns the ground truth per prefix.
func compactedTopic(t *testing.T, conn *grpc.ClientConn, topic string) (hw int64, truth func(prefix string) map[string]string) {
	t.Helper()
	ctx := context.Background()
	logc := sharelogv1.NewLogServiceClient(conn)
	_, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: topic, Partitions: 1, Config: &sharelogv1.TopicConfig{
		CleanupPolicy: proto.String("compact"), SegmentBytes: proto.Int64(1024),
		DeleteRetentionMs: proto.Int64(1), MinCleanableDirtyRatio: proto.Float64(0.01)}})
	require.NoError(t, err)
	type rec struct{ key, value string }
	var recs []rec
	p := int32(0)
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &p}
	for i := range 90 {
		r := &sharelogv1.Record{Key: fmt.Appendf(nil, "%c/%d", "ab"[i%2], i%7), Value: fmt.Appendf(nil, "v%d", i)}
		if i%5 == 4 {
			r.Value = nil
		}
		recs = append(recs, rec{string(r.Key), string(r.Value)})
		req.Records = append(req.Records, r)
	}
	for _, r := range req.Records { // one record per produce: segments roll between batches
		_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: topic, Partition: &p, Records: []*sharelogv1.Record{r}})
		require.NoError(t, err)
	}
	time.Sleep(5 * time.Millisecond) // the last tombstones' segments become older than 1 ms
	// The cleaner has run when a read from 0 no longer returns offset 0
	// (key a/0 is written again later).
	require.Eventually(t, func() bool {
		res, err := logc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: topic, Partition: 0, Offset: 0, MaxRecords: 1})
		return err == nil && len(res.GetRecords()) == 1 && res.GetRecords()[0].GetOffset() > 0
	}, 5*time.Second, 5*time.Millisecond)
	// Then wait until the cleaner has nothing left to do (the number of
	// records left stays the same over 20 cleaner intervals), so that every
	// run of a test sees the same events: a cut after event n must exist in
	// each run, not only in the first.
	last, same := -1, 0
	require.Eventually(t, func() bool {
		res, err := logc.Fetch(ctx, &sharelogv1.FetchRequest{Topic: topic, Partition: 0, Offset: 0, MaxRecords: 1000})
		if err != nil {
			return false
		}
		if n := len(res.GetRecords()); n != last {
			last, same = n, 0
			return false
		}
		same++
		return same >= 10
	}, 10*time.Second, 10*time.Millisecond)
	return int64(len(recs)), func(prefix string) map[string]string {
		m := map[string]string{}
		for _, r := range recs {
			if len(r.key) < len(prefix) || r.key[:len(prefix)] != prefix {
				continue
			}
			if r.value == "" {
				delete(m, r.key)
			} else {
				m[r.key] = r.value
			}
		}
		return m
	}
}

// TestResumeAfterEveryEventCompacted is TestResumeAfterEveryEvent over
// a compacted partition: reads skip the offsets compaction removed, and a
// resume from a checkpoint at or below P (a removed tombstone) is refused
// with tombstones_purged, after which the library resets and restarts from
// 0. The materialised state always equals the ground truth.
func TestResumeAfterEveryEventCompacted(t *testing.T) {
	t.Parallel()
	conn := startServer(t, func(c *app.Config) {
		c.OSOBackfill = "enabled"
		c.CompactionInterval = 5 * time.Millisecond
	})
	cases := []struct {
		name   string
		oso    changestream.OSOMode
		prefix string
	}{
		{"ordered", changestream.OSOOff, ""},
		{"ordered, prefix", changestream.OSOOff, "b/"},
		{"OSO, ON_WITH_OFFSET_ADVANCED", changestream.OSOWithOffsetAdvanced, ""},
		{"OSO, ON, prefix", changestream.OSOOn, "a/"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("compacted%d", i)
			hw, truth := compactedTopic(t, conn, topic)
			want := truth(tc.prefix)
			run := func(cutAfter int64) (*materializer, *changestream.Stream, *cutConn) {
				cc := &cutConn{ClientConnInterface: conn}
				cc.cutAfter.Store(cutAfter)
				m := newMaterializer(t)
				st, err := changestream.New(cc, changestream.Config{Topic: topic, KeyPrefix: []byte(tc.prefix), OSO: tc.oso, EndOffset: &hw,
					Backoff: changestream.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}, m)
				require.NoError(t, err)
				m.stream = st
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, st.Run(ctx), "cut after %d", cutAfter)
				return m, st, cc
			}
			whole, _, cc := run(-1)
			require.Equal(t, want, whole.state)
			total := cc.delivered.Load()
			require.Greater(t, total, int64(3))
			purged := 0
			for cut := int64(0); cut < total; cut++ {
				m, st, cc := run(cut)
				assert.Equal(t, int64(1), cc.cuts.Load(), "cut after %d: the fault was injected", cut)
				assert.Equal(t, want, m.state, "cut after %d events", cut)
				assert.Empty(t, m.violations, "cut after %d", cut)
				assert.Equal(t, hw, st.Checkpoint().NextOffset)
				for _, r := range m.resets {
					assert.Contains(t, []changestream.ResetCause{changestream.OSOAborted, changestream.TombstonesPurged}, r)
					if r == changestream.TombstonesPurged {
						purged++
					}
				}
			}
			if tc.oso == changestream.OSOOff && tc.prefix == "" {
				assert.Positive(t, purged, "resumes from a checkpoint at or below P reset with tombstones_purged")
			}
		})
	}
}
