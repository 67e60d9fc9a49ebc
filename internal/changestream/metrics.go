package changestream

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// backfillBuckets are the backfill-duration histogram's bounds in seconds:
// from a few milliseconds (a small partition) to ten minutes (a large OSO
// snapshot).
var backfillBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func newBackfillHistogram(mp metric.MeterProvider) (metric.Float64Histogram, error) {
	return mp.Meter("github.com/sharelog/sharelog/internal/changestream").Float64Histogram(
		"sharelog.change_stream.backfill.duration",
		metric.WithDescription("Time from the start of a full backfill (kind=oso or ordered) until the stream first reached the high watermark."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(backfillBuckets...))
}

// backfillStarted notes that the call begins with a full backfill of kind.
func (s *stream) backfillStarted(kind string) {
	s.backfillKind, s.backfillAt = kind, time.Now()
}

// caughtUp records the backfill's duration the first time the stream
// reaches the high watermark (or its end_offset, at or above it).
func (s *stream) caughtUp() {
	if s.backfillKind == "" {
		return
	}
	s.m.backfillTime.Record(s.ctx, time.Since(s.backfillAt).Seconds(),
		metric.WithAttributes(attribute.String("kind", s.backfillKind)))
	s.backfillKind = ""
}
