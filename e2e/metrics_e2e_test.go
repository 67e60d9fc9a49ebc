package e2e

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// scrapeMetrics fetches and parses /metrics.
func scrapeMetrics(t testing.TB, s *stack) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeURL(t, s.http.Client(), s.http.URL+"/metrics")
}

// scrapeURL fetches and parses a metrics page.
func scrapeURL(t testing.TB, c *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	require.NoError(t, err)
	return fams
}

// series returns the value of the family's series whose labels include
// want (counter, gauge, or a histogram's sample count); ok is false if
// there is no such series. More than one match is a test error.
func series(t testing.TB, fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	t.Helper()
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
	var found []float64
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			found = append(found, m.GetCounter().GetValue())
		case m.Gauge != nil:
			found = append(found, m.GetGauge().GetValue())
		case m.Histogram != nil:
			found = append(found, float64(m.GetHistogram().GetSampleCount()))
		}
	}
	require.LessOrEqual(t, len(found), 1, "%s%v matches %d series", name, want, len(found))
	if len(found) == 0 {
		return 0, false
	}
	return found[0], true
}

func requireSeries(t testing.TB, fams map[string]*dto.MetricFamily, name string, want map[string]string, value float64) {
	t.Helper()
	got, ok := series(t, fams, name, want)
	require.True(t, ok, "no series %s%v", name, want)
	assert.Equal(t, value, got, "%s%v", name, want)
}

// labelValues are the values a label takes over a family's series.
func labelValues(fams map[string]*dto.MetricFamily, name, label string) []string {
	seen := map[string]bool{}
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				seen[l.GetValue()] = true
			}
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// TestMetricsAfterWorkload runs a scripted workload (produce; share
// consumption with ACCEPT, RELEASE, REJECT, an expired lock and a record
// archived at the delivery limit; a purge; change streams; REST calls; a
// topic deleted) and checks the value of each metric it should move.
func TestMetricsAfterWorkload(t *testing.T) {
	t.Parallel()
	fams := metricsWorkload(t)
	qp := map[string]string{"group": "g", "topic": "q", "partition": "0"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for kk, vv := range m {
			out[kk] = vv
		}
		return out
	}
	// Log watermarks.
	requireSeries(t, fams, "sharelog_log_start_offset", map[string]string{"topic": "q", "partition": "0"}, 0)
	requireSeries(t, fams, "sharelog_log_high_watermark", map[string]string{"topic": "q", "partition": "0"}, 12)
	requireSeries(t, fams, "sharelog_log_start_offset", map[string]string{"topic": "p", "partition": "0"}, 3)
	requireSeries(t, fams, "sharelog_log_high_watermark", map[string]string{"topic": "p", "partition": "0"}, 5)
	// Share groups.
	requireSeries(t, fams, "sharelog_share_start_offset", qp, 10)
	requireSeries(t, fams, "sharelog_share_lag", qp, 2)
	requireSeries(t, fams, "sharelog_share_records_acquired", qp, 2)
	requireSeries(t, fams, "sharelog_share_lock_expiries_total", qp, 3)
	requireSeries(t, fams, "sharelog_share_delivery_limit_archives_total", qp, 1)
	requireSeries(t, fams, "sharelog_share_acknowledgements_total", with(qp, "type", "accept"), 8)
	requireSeries(t, fams, "sharelog_share_acknowledgements_total", with(qp, "type", "release"), 2)
	requireSeries(t, fams, "sharelog_share_acknowledgements_total", with(qp, "type", "reject"), 1)
	requireSeries(t, fams, "sharelog_share_acknowledgements_total", with(qp, "type", "gap"), 0)
	requireSeries(t, fams, "sharelog_share_acknowledgements_total", with(qp, "type", "renew"), 0)
	requireSeries(t, fams, "sharelog_share_members", map[string]string{"group": "g"}, 1)
	requireSeries(t, fams, "sharelog_share_sessions", map[string]string{"group": "g"}, 3)
	requireSeries(t, fams, "sharelog_share_dead_letter_copies_total", map[string]string{"group": "g"}, 0)
	requireSeries(t, fams, "sharelog_share_dead_letter_skipped_total", map[string]string{"group": "g"}, 0)
	requireSeries(t, fams, "sharelog_share_unreadable_archived_total", nil, 0)
	requireSeries(t, fams, "sharelog_share_state_write_failures_total", nil, 0)
	// Purge.
	requireSeries(t, fams, "sharelog_purge_calls_total", map[string]string{"result": "ok"}, 1)
	requireSeries(t, fams, "sharelog_purge_records_total", nil, 3)
	// Change streams: one open, one full backfill measured.
	requireSeries(t, fams, "sharelog_change_streams_open", nil, 1)
	backfills, _ := series(t, fams, "sharelog_change_stream_backfills_total", nil)
	assert.Equal(t, 1.0, backfills, "one backfill")
	measured, _ := series(t, fams, "sharelog_change_stream_backfill_duration_seconds", nil)
	assert.Equal(t, 1.0, measured, "one backfill measured")
	// Compaction.
	requireSeries(t, fams, "sharelog_compaction_dirty_ratio", map[string]string{"topic": "c", "partition": "0"}, -1)
	requireSeries(t, fams, "sharelog_compaction_runs_total", nil, 0)
	requireSeries(t, fams, "sharelog_compaction_records_removed_total", nil, 0)
	// Appends: the seconds histogram has second bounds, and counted every
	// produce (q: 10 + 2, p: 5, gone: 3).
	requireSeries(t, fams, "sharelog_logstore_appended_records_total", nil, 20)
	hist := fams["sharelog_logstore_append_duration_seconds"]
	require.NotNil(t, hist)
	require.Len(t, hist.GetMetric(), 1)
	var bounds []float64
	for _, b := range hist.GetMetric()[0].GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	assert.Contains(t, bounds, 0.001, "millisecond resolution in seconds")
	require.Greater(t, len(bounds), 2)
	assert.Equal(t, 10.0, bounds[len(bounds)-2], "up to 10 s, then +Inf")
	assert.EqualValues(t, 4, hist.GetMetric()[0].GetHistogram().GetSampleCount(), "q twice, p and gone once")

	// The deleted topic left no series behind.
	for name := range fams {
		for _, v := range labelValues(fams, name, "topic") {
			assert.NotEqual(t, "gone", v, "%s still has a series of the deleted topic", name)
		}
	}
	// REST calls are labelled by route template, never "/" or a raw path.
	routes := labelValues(fams, "http_server_request_duration_seconds", "http_route")
	assert.Contains(t, routes, "/v1/topics/{name}")
	assert.Contains(t, routes, "/v1/topics/{topic}/partitions/{partition}/records")
	assert.NotContains(t, routes, "/")
	requireSeries(t, fams, "http_server_request_duration_seconds",
		map[string]string{"http_route": "/v1/topics/{name}", "http_request_method": "GET"}, 2)
}

// metricsWorkload runs the scripted workload on a fresh server and returns
// its scrape (once the tailing change stream is counted open).
func metricsWorkload(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	s := newShareStack(t)
	ctx := context.Background()

	// Share consumption on q: 10 records, lock 1 s (the acknowledgement
	// below must come before it ends, on a loaded CI machine too), delivery
	// limit 2.
	s.createTopic(t, "q", 1, nil)
	s.earliestGroup(t, "g", &sharelogv1.ShareGroupConfig{RecordLockDurationMs: proto.Int32(1000), DeliveryCountLimit: proto.Int32(2)})
	s.hb(t, "g", "m1", 0, "q")
	s.produceN(t, "q", 0, 10)
	r := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m1", Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{0, 9, 1}}, acquired(partitionOf(r, "q", 0)))
	ack := func(member string, epoch int32, batches ...*sharelogv1.AcknowledgementBatch) {
		t.Helper()
		resp, err := s.sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: member, ShareSessionEpoch: epoch,
			Topics: topicReq("q", part(0, batches...))})
		require.NoError(t, err)
		require.Equal(t, none, resp.GetResponses()[0].GetPartitions()[0].GetErrorCode())
	}
	// 0-4 ACCEPT, 5 RELEASE, 6 REJECT; 7-9 are left to expire.
	ack("m1", 1, batch(0, 4, accept), batch(5, 5, release), batch(6, 6, reject))
	require.Eventually(t, func() bool {
		v, _ := series(t, scrapeMetrics(t, s.stack), "sharelog_share_lock_expiries_total", map[string]string{"group": "g", "topic": "q", "partition": "0"})
		return v == 3
	}, 10*time.Second, 20*time.Millisecond, "the three locks of 7-9 expire")
	// From here locks last a minute: nothing else expires during the test.
	s.earliestGroup(t, "g", &sharelogv1.ShareGroupConfig{RecordLockDurationMs: proto.Int32(60_000), DeliveryCountLimit: proto.Int32(2)})
	// m2 gets 5 and 7-9 for their second delivery: RELEASE of 5 at the
	// limit archives it; 7-9 ACCEPT.
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m2", Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{5, 5, 2}, {7, 9, 2}}, acquired(partitionOf(r, "q", 0)))
	ack("m2", 1, batch(5, 5, release), batch(7, 9, accept))
	// Two more records, acquired and held: in flight, and the lag.
	s.produceN(t, "q", 0, 2)
	r = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m2", ShareSessionEpoch: 2})
	require.Equal(t, []rng{{10, 11, 1}}, acquired(partitionOf(r, "q", 0)))

	// A purge of p below 3.
	s.createTopic(t, "p", 1, nil)
	s.produceN(t, "p", 0, 5)
	purgeOne(t, s.stack, "p", 0, 3)

	// A change stream over p to its end asking for an OSO snapshot (a
	// full backfill from the log start), and one left tailing q.
	s.streamAll(t, streamReq("p", 0, withEnd(5), withOSO(sharelogv1.OsoMode_OSO_MODE_ON)))
	tail := s.openChanges(t, streamReq("q", 12))
	_ = tail

	// A compacted topic: its dirty ratio is not measured yet.
	s.createTopic(t, "c", 1, &sharelogv1.TopicConfig{CleanupPolicy: proto.String("compact")})

	// A topic consumed by g and then deleted: its series go.
	s.createTopic(t, "gone", 1, nil)
	s.produceN(t, "gone", 0, 3)
	s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m3", Topics: topicReq("gone", part(0))})
	_, err := s.log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "gone"})
	require.NoError(t, err)

	// REST calls, for the route label.
	require.Equal(t, http.StatusOK, s.rest(t, http.MethodGet, "/v1/topics/q", "").Status)
	require.Equal(t, http.StatusOK, s.rest(t, http.MethodGet, "/v1/topics/p", "").Status)
	require.Equal(t, http.StatusOK, s.rest(t, http.MethodGet, "/v1/topics/q/partitions/0/records?offset=11&maxRecords=1", "").Status)

	var fams map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		fams = scrapeMetrics(t, s.stack)
		v, _ := series(t, fams, "sharelog_change_streams_open", nil)
		return v == 1
	}, 10*time.Second, 20*time.Millisecond, "the tail is open")

	return fams
}
