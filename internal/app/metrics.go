package app

import (
	"context"
	"errors"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sharelog/sharelog/internal/budget"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// serverMetrics are the process-level instruments of the server; in
// Prometheus they are sharelog_connections_refused_total{listener,cause},
// sharelog_storage_errors_total{op,errno}, sharelog_partitions_offline,
// sharelog_long_polls_waiting, and the response budget's
// sharelog_response_bytes_in_flight, sharelog_response_budget_waiting,
// sharelog_response_budget_waits_total and
// sharelog_response_budget_refused_total.
type serverMetrics struct {
	connRefused   metric.Int64Counter
	storageErrors metric.Int64Counter
}

func newServerMetrics(mp metric.MeterProvider, partitionsOffline func() int, longPollsWaiting func() int64, bud *budget.Bytes) (*serverMetrics, error) {
	meter := mp.Meter("github.com/sharelog/sharelog/internal/app")
	var m serverMetrics
	var err error
	if m.connRefused, err = meter.Int64Counter("sharelog.connections.refused",
		metric.WithDescription("Connections closed at accept because a --max-connections or --max-connections-per-ip limit was reached."),
		metric.WithUnit("{connection}")); err != nil {
		return nil, err
	}
	if m.storageErrors, err = meter.Int64Counter("sharelog.storage.errors",
		metric.WithDescription("Failed storage operations by operation and errno (ENOSPC, EIO, EMFILE, EROFS or other)."),
		metric.WithUnit("{error}")); err != nil {
		return nil, err
	}
	if _, err = meter.Int64ObservableGauge("sharelog.partitions.offline",
		metric.WithDescription("Partitions and share-partitions refusing requests after a storage error, until they recover."),
		metric.WithUnit("{partition}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			n := 0
			if partitionsOffline != nil {
				n = partitionsOffline()
			}
			o.Observe(int64(n))
			return nil
		})); err != nil {
		return nil, err
	}
	if _, err = meter.Int64ObservableGauge("sharelog.long_polls.waiting",
		metric.WithDescription("Fetch and ShareFetch calls waiting for records (bounded by --max-long-polls)."),
		metric.WithUnit("{call}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(longPollsWaiting())
			return nil
		})); err != nil {
		return nil, err
	}
	for _, g := range []struct {
		name, desc, unit string
		read             func() int64
	}{
		{"sharelog.response.bytes_in_flight", "Estimated encoded bytes of the responses carrying records being built or written (bounded by --max-response-bytes-in-flight).", "By", bud.InFlight},
		{"sharelog.response.budget_waiting", "Fetches, share fetches and change-stream batches waiting for response bytes now (their client at its --max-response-bytes-per-principal, or the server at --max-response-bytes-in-flight).", "{call}", bud.Waiting},
	} {
		if _, err = meter.Int64ObservableGauge(g.name, metric.WithDescription(g.desc), metric.WithUnit(g.unit),
			metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				o.Observe(g.read())
				return nil
			})); err != nil {
			return nil, err
		}
	}
	if _, err = meter.Int64ObservableCounter("sharelog.response.budget_waits",
		metric.WithDescription("Reservations of response bytes that had to wait."), metric.WithUnit("{call}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(bud.Waits())
			return nil
		})); err != nil {
		return nil, err
	}
	if _, err = meter.Int64ObservableCounter("sharelog.response.budget_refused",
		metric.WithDescription("Reservations of response bytes that got nothing within their wait (the fetch was refused with THROTTLING_QUOTA_EXCEEDED or answered without records)."),
		metric.WithUnit("{call}"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(bud.Refused())
			return nil
		})); err != nil {
		return nil, err
	}
	return &m, nil
}

// errnoName names the errno behind a storage error for the metric label:
// the ones an operator acts on, or "other".
func errnoName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOSPC:
			return "ENOSPC"
		case syscall.EIO:
			return "EIO"
		case syscall.EMFILE:
			return "EMFILE"
		case syscall.EROFS:
			return "EROFS"
		}
	}
	return "other"
}

// recordStorageError counts one failed storage operation (op: "append",
// "fsync", "roll", … as the store names it) in
// sharelog_storage_errors_total{op,errno}. It is the log store's
// Options.OnStorageError hook (and the share-state log's).
func (s *Server) recordStorageError(op string, err error) {
	s.metrics.storageErrors.Add(context.Background(), 1, metric.WithAttributes(
		attribute.String("op", op), attribute.String("errno", errnoName(err))))
}

// registerSegmentFileMetrics exposes the file store's segment-file budget
// (--max-open-segments; docs/operations.md "File descriptors"):
// sharelog_segment_files_open, sharelog_segment_files_max and
// sharelog_segment_files_evictions_total. Nothing is registered without a
// file store (cluster mode).
func registerSegmentFileMetrics(mp metric.MeterProvider, store *logstore.FileStore) error {
	if store == nil {
		return nil
	}
	meter := mp.Meter("github.com/sharelog/sharelog/internal/app")
	open, err := meter.Int64ObservableGauge("sharelog.segment_files.open",
		metric.WithDescription("Segment log files held open now (bounded by --max-open-segments, exceeded only while more are in use at once)."),
		metric.WithUnit("{file}"))
	if err != nil {
		return err
	}
	limit, err := meter.Int64ObservableGauge("sharelog.segment_files.max",
		metric.WithDescription("The segment-file budget, --max-open-segments or its default (half of RLIMIT_NOFILE)."),
		metric.WithUnit("{file}"))
	if err != nil {
		return err
	}
	evictions, err := meter.Int64ObservableCounter("sharelog.segment_files.evictions",
		metric.WithDescription("Idle segment files closed to stay within --max-open-segments (opened again when next used)."),
		metric.WithUnit("{file}"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f := store.SegmentFiles()
		o.ObserveInt64(open, int64(f.Open))
		o.ObserveInt64(limit, int64(f.Max))
		o.ObserveInt64(evictions, f.Evictions)
		return nil
	}, open, limit, evictions)
	return err
}
