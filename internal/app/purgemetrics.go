package app

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// purgeCounting wraps the store the log service purges through, counting
// purges (sharelog_purge_calls_total{result}) and the records they made
// unreadable (sharelog_purge_records_total: how far each moved the log
// start offset). Neither is labelled by topic, so nothing outlives a
// deleted topic; per partition, sharelog_log_start_offset shows the same.
type purgeCounting struct {
	logstore.Store
	calls, records metric.Int64Counter
}

func newPurgeCounting(s logstore.Store, mp metric.MeterProvider) (*purgeCounting, error) {
	meter := mp.Meter("github.com/sharelog/sharelog/internal/app/domain")
	p := &purgeCounting{Store: s}
	var err error
	if p.calls, err = meter.Int64Counter("sharelog.purge.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Partition purges (DeleteRecords), by result (ok or error).")); err != nil {
		return nil, err
	}
	if p.records, err = meter.Int64Counter("sharelog.purge.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records made unreadable by purges (how far they moved the log start offset).")); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *purgeCounting) DeleteRecordsBefore(ctx context.Context, topic string, partition int32, offset int64) (int64, error) {
	before, _, berr := p.Bounds(topic, partition)
	after, err := p.Store.DeleteRecordsBefore(ctx, topic, partition, offset)
	result := "ok"
	if err != nil {
		result = "error"
	} else if berr == nil && after > before {
		p.records.Add(ctx, after-before)
	}
	p.calls.Add(ctx, 1, metric.WithAttributes(attribute.String("result", result)))
	return after, err
}
