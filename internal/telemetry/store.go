package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharelog/sharelog/internal/logstore"
)

// TraceStore wraps a log store so that every operation that touches the log
// is a span (a child of the calling RPC's span) and appends and reads are
// counted in metrics.
func TraceStore(s logstore.Store, tp trace.TracerProvider, mp metric.MeterProvider) logstore.Store {
	meter := mp.Meter("github.com/sharelog/sharelog/internal/logstore")
	ts := &tracedStore{Store: s, tracer: tp.Tracer("github.com/sharelog/sharelog/internal/logstore")}
	ts.appended, _ = meter.Int64Counter("sharelog.logstore.appended.records",
		metric.WithDescription("Records appended to the log."), metric.WithUnit("{record}"))
	ts.appendedBytes, _ = meter.Int64Counter("sharelog.logstore.appended.bytes",
		metric.WithDescription("Payload bytes appended to the log."), metric.WithUnit("By"))
	ts.read, _ = meter.Int64Counter("sharelog.logstore.read.records",
		metric.WithDescription("Records read from the log."), metric.WithUnit("{record}"))
	ts.appendLatency, _ = meter.Float64Histogram("sharelog.logstore.append.duration",
		metric.WithDescription("Time to append a batch, fsync included."), metric.WithUnit("s"))
	return ts
}

type tracedStore struct {
	logstore.Store
	tracer        trace.Tracer
	appended      metric.Int64Counter
	appendedBytes metric.Int64Counter
	read          metric.Int64Counter
	appendLatency metric.Float64Histogram
}

func (t *tracedStore) start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "logstore."+name, trace.WithAttributes(attrs...))
}

func end(span trace.Span, err error) {
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
	defer func() { end(span, err) }()
	return t.Store.CreateTopic(ctx, name, partitions, cfg)
}

func (t *tracedStore) DeleteTopic(ctx context.Context, name string) (err error) {
	ctx, span := t.start(ctx, "DeleteTopic", attribute.String("sharelog.topic", name))
	defer func() { end(span, err) }()
	return t.Store.DeleteTopic(ctx, name)
}

func (t *tracedStore) Append(ctx context.Context, topic string, partition int32, recs []logstore.Record) (base int64, err error) {
	ctx, span := t.start(ctx, "Append", append(tpAttrs(topic, partition), attribute.Int("sharelog.records", len(recs)))...)
	defer func() { end(span, err) }()
	start := nowFunc()
	base, err = t.Store.Append(ctx, topic, partition, recs)
	if err == nil {
		bytes := 0
		for i := range recs {
			bytes += recs[i].Size()
		}
		attrs := metric.WithAttributes(attribute.String("topic", topic))
		t.appended.Add(ctx, int64(len(recs)), attrs)
		t.appendedBytes.Add(ctx, int64(bytes), attrs)
		t.appendLatency.Record(ctx, nowFunc().Sub(start).Seconds())
		span.SetAttributes(attribute.Int64("sharelog.base_offset", base))
	}
	return base, err
}

func (t *tracedStore) Read(ctx context.Context, topic string, partition int32, offset int64, maxRecords, maxBytes int) (recs []logstore.Record, err error) {
	ctx, span := t.start(ctx, "Read", append(tpAttrs(topic, partition), attribute.Int64("sharelog.offset", offset))...)
	defer func() { end(span, err) }()
	recs, err = t.Store.Read(ctx, topic, partition, offset, maxRecords, maxBytes)
	span.SetAttributes(attribute.Int("sharelog.records", len(recs)))
	t.read.Add(ctx, int64(len(recs)), metric.WithAttributes(attribute.String("topic", topic)))
	return recs, err
}

func (t *tracedStore) OffsetForTimestamp(ctx context.Context, topic string, partition int32, ts int64) (off, rts int64, err error) {
	ctx, span := t.start(ctx, "OffsetForTimestamp", tpAttrs(topic, partition)...)
	defer func() { end(span, err) }()
	return t.Store.OffsetForTimestamp(ctx, topic, partition, ts)
}

func (t *tracedStore) DeleteRecordsBefore(ctx context.Context, topic string, partition int32, offset int64) (_ int64, err error) {
	ctx, span := t.start(ctx, "DeleteRecordsBefore", append(tpAttrs(topic, partition), attribute.Int64("sharelog.offset", offset))...)
	defer func() { end(span, err) }()
	return t.Store.DeleteRecordsBefore(ctx, topic, partition, offset)
}

var nowFunc = time.Now
