package telemetry

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// TraceStore wraps a log store so that every operation that touches the log
// is a span (a child of the calling RPC's span) and appends and reads are
// counted in metrics. The store's key index is wrapped apart, by
// TraceKeyIndex: it is handed to its users explicitly, never found on the
// store.
func TraceStore(s logstore.Store, tp trace.TracerProvider, mp metric.MeterProvider) logstore.Store {
	return &tracedStore{Store: s, instruments: newInstruments(tp, mp)}
}

// instruments are the tracer and metrics of log-store calls, shared by the
// store and key-index wrappers.
type instruments struct {
	tracer        trace.Tracer
	appended      metric.Int64Counter
	appendedBytes metric.Int64Counter
	read          metric.Int64Counter
	appendLatency metric.Float64Histogram
}

func newInstruments(tp trace.TracerProvider, mp metric.MeterProvider) *instruments {
	meter := mp.Meter("github.com/sharelog/sharelog/internal/storage/logstore")
	in := &instruments{tracer: tp.Tracer("github.com/sharelog/sharelog/internal/storage/logstore")}
	in.appended, _ = meter.Int64Counter("sharelog.logstore.appended.records",
		metric.WithDescription("Records appended to the log."), metric.WithUnit("{record}"))
	in.appendedBytes, _ = meter.Int64Counter("sharelog.logstore.appended.bytes",
		metric.WithDescription("Payload bytes appended to the log."), metric.WithUnit("By"))
	in.read, _ = meter.Int64Counter("sharelog.logstore.read.records",
		metric.WithDescription("Records read from the log."), metric.WithUnit("{record}"))
	in.appendLatency, _ = meter.Float64Histogram("sharelog.logstore.append.duration",
		metric.WithDescription("Time to append a batch, fsync included."), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(SecondsBuckets...))
	return in
}

type tracedStore struct {
	logstore.Store
	*instruments
}

func (t *instruments) start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "logstore."+name, trace.WithAttributes(attrs...))
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func tpAttrs(topic string, partition int32) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("sharelog.topic", topic), attribute.Int("sharelog.partition", int(partition))}
}

func (t *tracedStore) CreateTopic(ctx context.Context, name string, partitions int32, cfg logstore.TopicConfig) (_ logstore.TopicInfo, err error) {
	ctx, span := t.start(ctx, "CreateTopic", attribute.String("sharelog.topic", name), attribute.Int("sharelog.partitions", int(partitions)))
	defer func() { endSpan(span, err) }()
	return t.Store.CreateTopic(ctx, name, partitions, cfg)
}

func (t *tracedStore) AlterTopic(ctx context.Context, name string, fn func(logstore.TopicInfo) (logstore.TopicInfo, error)) (_ logstore.TopicInfo, err error) {
	ctx, span := t.start(ctx, "AlterTopic", attribute.String("sharelog.topic", name))
	defer func() { endSpan(span, err) }()
	return t.Store.AlterTopic(ctx, name, fn)
}

func (t *tracedStore) DeleteTopic(ctx context.Context, name string) (err error) {
	ctx, span := t.start(ctx, "DeleteTopic", attribute.String("sharelog.topic", name))
	defer func() { endSpan(span, err) }()
	return t.Store.DeleteTopic(ctx, name)
}

func (t *tracedStore) Append(ctx context.Context, topic string, partition int32, recs []logstore.Record) (base int64, err error) {
	ctx, span := t.start(ctx, "Append", append(tpAttrs(topic, partition), attribute.Int("sharelog.records", len(recs)))...)
	defer func() { endSpan(span, err) }()
	start := nowFunc()
	base, err = t.Store.Append(ctx, topic, partition, recs)
	if err == nil {
		bytes := 0
		for i := range recs {
			bytes += recs[i].Size()
		}
		// No topic label: a counter's series would outlive a deleted
		// topic. Per partition, the high-watermark gauge gives the rate.
		t.appended.Add(ctx, int64(len(recs)))
		t.appendedBytes.Add(ctx, int64(bytes))
		t.appendLatency.Record(ctx, nowFunc().Sub(start).Seconds())
		span.SetAttributes(attribute.Int64("sharelog.base_offset", base))
	}
	return base, err
}

func (t *tracedStore) Read(ctx context.Context, topic string, partition int32, offset int64, maxRecords, maxBytes int) (recs []logstore.Record, err error) {
	ctx, span := t.start(ctx, "Read", append(tpAttrs(topic, partition), attribute.Int64("sharelog.offset", offset))...)
	defer func() { endSpan(span, err) }()
	recs, err = t.Store.Read(ctx, topic, partition, offset, maxRecords, maxBytes)
	span.SetAttributes(attribute.Int("sharelog.records", len(recs)))
	t.read.Add(ctx, int64(len(recs)))
	return recs, err
}

func (t *tracedStore) OffsetForTimestamp(ctx context.Context, topic string, partition int32, ts int64) (off, rts int64, err error) {
	ctx, span := t.start(ctx, "OffsetForTimestamp", tpAttrs(topic, partition)...)
	defer func() { endSpan(span, err) }()
	return t.Store.OffsetForTimestamp(ctx, topic, partition, ts)
}

func (t *tracedStore) DeleteRecordsBefore(ctx context.Context, topic string, partition int32, offset int64) (_ int64, err error) {
	ctx, span := t.start(ctx, "DeleteRecordsBefore", append(tpAttrs(topic, partition), attribute.Int64("sharelog.offset", offset))...)
	defer func() { endSpan(span, err) }()
	return t.Store.DeleteRecordsBefore(ctx, topic, partition, offset)
}

// TraceKeyIndex wraps a key index as TraceStore wraps its store, so change
// streams' index reads are traced too: a key scan is a span from ScanKeys
// until its cursor is closed (with the keys it yielded), a key count is a
// span, and records read by index entry are counted in the read metric.
//
// Nothing of the SDK runs per entry: an OSO snapshot reads one entry per
// key, so an entry read is neither a span (its scan's span covers it) nor
// a metric call of its own. Entry reads are counted in an atomic and added
// to the read metric entryReadFlush at a time and when a scan's cursor
// closes, so the metric lags by fewer than entryReadFlush records between
// scans and is exact once they close.
func TraceKeyIndex(idx logstore.KeyIndexer, tp trace.TracerProvider, mp metric.MeterProvider) logstore.KeyIndexer {
	return &tracedIndex{KeyIndexer: idx, instruments: newInstruments(tp, mp)}
}

// entryReadFlush is how many entry reads are added to the read metric at
// once: a metric Add costs an exemplar filter (a context lookup) and an
// aggregator update, several times an entry read's own CPU on a cached
// segment.
const entryReadFlush = 256

type tracedIndex struct {
	logstore.KeyIndexer
	*instruments
	entryReads atomic.Int64 // entry reads not yet added to the read metric
}

// countEntryRead counts one record read by entry, flushing the pending
// count to the metric once it reaches entryReadFlush.
func (t *tracedIndex) countEntryRead(ctx context.Context) {
	if t.entryReads.Add(1) >= entryReadFlush {
		t.flushEntryReads(ctx)
	}
}

func (t *tracedIndex) flushEntryReads(ctx context.Context) {
	if n := t.entryReads.Swap(0); n > 0 {
		t.read.Add(ctx, n)
	}
}

func (t *tracedIndex) ScanKeys(ctx context.Context, topic string, partition int32, prefix []byte, end int64) (logstore.KeyCursor, error) {
	ctx, span := t.start(ctx, "ScanKeys", append(tpAttrs(topic, partition), attribute.Int64("sharelog.end_offset", end))...)
	c, err := t.KeyIndexer.ScanKeys(ctx, topic, partition, prefix, end)
	if err != nil {
		endSpan(span, err)
		return nil, err
	}
	return &tracedCursor{KeyCursor: c, span: span, idx: t, ctx: ctx}, nil
}

// tracedCursor ends its scan's span at Close, and adds the entry reads
// still pending to the read metric.
type tracedCursor struct {
	logstore.KeyCursor
	span   trace.Span
	idx    *tracedIndex
	ctx    context.Context
	keys   int64
	closed bool
}

func (c *tracedCursor) Next() bool {
	ok := c.KeyCursor.Next()
	if ok {
		c.keys++
	}
	return ok
}

func (c *tracedCursor) Close() error {
	err := c.KeyCursor.Close()
	if !c.closed {
		c.closed = true
		c.span.SetAttributes(attribute.Int64("sharelog.keys", c.keys))
		serr := c.KeyCursor.Err()
		if serr == nil {
			serr = err
		}
		endSpan(c.span, serr)
		c.idx.flushEntryReads(c.ctx)
	}
	return err
}

func (t *tracedIndex) ReadEntry(ctx context.Context, topic string, partition int32, ent logstore.KeyEntry) (logstore.Record, error) {
	r, err := t.KeyIndexer.ReadEntry(ctx, topic, partition, ent)
	if err == nil {
		t.countEntryRead(ctx)
	}
	return r, err
}

func (t *tracedIndex) CountKeys(ctx context.Context, topic string, partition int32, prefix []byte, end, limit int64) (lo, hi int64, err error) {
	ctx, span := t.start(ctx, "CountKeys", append(tpAttrs(topic, partition), attribute.Int64("sharelog.end_offset", end))...)
	defer func() {
		span.SetAttributes(attribute.Int64("sharelog.keys.lo", lo), attribute.Int64("sharelog.keys.hi", hi))
		endSpan(span, err)
	}()
	return t.KeyIndexer.CountKeys(ctx, topic, partition, prefix, end, limit)
}

var nowFunc = time.Now

// SecondsBuckets are the bounds of the latency histograms, in seconds (the
// SDK's default bounds, 0 to 10000, are meant for milliseconds: every
// append would fall in the first bucket). From 50 µs, an append without
// fsync, to 10 s.
var SecondsBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
