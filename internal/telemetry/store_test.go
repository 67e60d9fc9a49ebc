package telemetry_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/logstore/logstoretest"
	"github.com/sharelog/sharelog/internal/telemetry"
)

// The traced key index is a key index: it passes the conformance suite.
func TestTracedKeyIndexConformance(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	logstoretest.RunKeyIndex(t, func(t *testing.T) (logstore.Store, logstore.KeyIndexer) {
		s := logstore.NewMem()
		t.Cleanup(func() { _ = s.Close() })
		return telemetry.TraceStore(s, tp, metricnoop.NewMeterProvider()), telemetry.TraceKeyIndex(s, tp, metricnoop.NewMeterProvider())
	})
}

// A key scan is one span, a child of the caller's, ended when its cursor
// closes and carrying the number of keys yielded; a key count is a span.
func TestTracedKeyIndexSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := logstore.NewMem()
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	_, err := s.CreateTopic(ctx, "k", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	_, err = s.Append(ctx, "k", 0, []logstore.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}})
	require.NoError(t, err)

	idx := telemetry.TraceKeyIndex(s, tp, metricnoop.NewMeterProvider())
	pctx, parent := tp.Tracer("test").Start(ctx, "parent")
	c, err := idx.ScanKeys(pctx, "k", 0, nil, 2)
	require.NoError(t, err)
	var n int
	for c.Next() {
		r, err := idx.ReadEntry(pctx, "k", 0, c.Entry())
		require.NoError(t, err)
		assert.Equal(t, c.Entry().Offset, r.Offset)
		n++
	}
	assert.Equal(t, 2, n)
	assert.Empty(t, rec.Ended(), "the scan span lasts until the cursor closes")
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "a second Close is harmless")
	_, _, err = idx.CountKeys(pctx, "k", 0, nil, 2, 10)
	require.NoError(t, err)
	parent.End()

	ended := rec.Ended()
	require.Len(t, ended, 3, "scan, count and parent; entry reads make no span")
	scan, count := ended[0], ended[1]
	assert.Equal(t, "logstore.ScanKeys", scan.Name())
	assert.Equal(t, parent.SpanContext().SpanID(), scan.Parent().SpanID())
	var keys int64 = -1
	for _, a := range scan.Attributes() {
		if a.Key == "sharelog.keys" {
			keys = a.Value.AsInt64()
		}
	}
	assert.Equal(t, int64(2), keys)
	assert.Equal(t, "logstore.CountKeys", count.Name())
	assert.Equal(t, parent.SpanContext().SpanID(), count.Parent().SpanID())
}

// readRecords returns the read-records counter's value as reader collects it.
func readRecords(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "sharelog.logstore.read.records" {
				continue
			}
			var n int64
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				n += dp.Value
			}
			return n
		}
	}
	return 0
}

// Entry reads reach the read metric in blocks, not one SDK call each, and
// every one of them is counted once the scan's cursor closes.
func TestTracedKeyIndexCountsEntryReads(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	s := logstore.NewMem()
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	_, err := s.CreateTopic(ctx, "k", 1, logstore.TopicConfig{RetentionMs: -1})
	require.NoError(t, err)
	const keys = 600 // two full blocks of 256 and a rest
	recs := make([]logstore.Record, keys)
	for i := range recs {
		recs[i] = logstore.Record{Key: fmt.Appendf(nil, "k%04d", i), Value: []byte("v")}
	}
	_, err = s.Append(ctx, "k", 0, recs)
	require.NoError(t, err)

	idx := telemetry.TraceKeyIndex(s, tracenoop.NewTracerProvider(), mp)
	c, err := idx.ScanKeys(ctx, "k", 0, nil, keys)
	require.NoError(t, err)
	var n int64
	for c.Next() {
		_, err := idx.ReadEntry(ctx, "k", 0, c.Entry())
		require.NoError(t, err)
		n++
		if n == 300 {
			assert.Equal(t, int64(256), readRecords(t, reader), "one block added after 256 entry reads")
		}
	}
	require.NoError(t, c.Err())
	require.Equal(t, int64(keys), n)
	assert.Equal(t, int64(512), readRecords(t, reader), "the rest waits for the scan's end")
	require.NoError(t, c.Close())
	assert.Equal(t, int64(keys), readRecords(t, reader), "closing the cursor adds the rest")
	require.NoError(t, c.Close())
	assert.Equal(t, int64(keys), readRecords(t, reader), "a second Close adds nothing")
}
