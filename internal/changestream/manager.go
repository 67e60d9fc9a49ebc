package changestream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/budget"
	"github.com/sharelog/sharelog/internal/principal"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Defaults of Config.
const (
	DefaultMaxStreams   = 1024
	DefaultHoldBack     = time.Second
	DefaultBatchRecords = 256
	DefaultBatchBytes   = 1 << 20
	// fallbackDiskSpan caps a DISK snapshot when the store cannot tell
	// segment boundaries (no key index): the resume point still moves
	// regularly during a filtered catch-up.
	fallbackDiskSpan = 65536
)

// Config configures a Manager. Zero values take the defaults.
type Config struct {
	Backfill             Backfill // --oso-backfill; "" = auto
	AutoSmallRatio       float64  // --oso-auto-small-ratio
	AutoLargeRatio       float64  // --oso-auto-large-ratio
	AutoSmallRecordBytes int      // --oso-auto-small-record-bytes
	MaxStreams           int      // --max-change-streams; 0 = DefaultMaxStreams
	// MaxStreamsPerPrincipal is the most calls one client (principal.Name
	// of the call's context) may have open, so that one client cannot take
	// every slot (--max-change-streams-per-principal); 0 = half of
	// MaxStreams, at least 1. Calls without a client identity are bounded
	// by MaxStreams only.
	MaxStreamsPerPrincipal int
	// HoldBack is how long a live-tail snapshot in which nothing matches may
	// be held back and merged with the next (at most 1 s, so a
	// quiet filtered tail still reports progress; 0 = DefaultHoldBack, negative = never hold back).
	HoldBack     time.Duration
	BatchRecords int // records read at once (0 = 256)
	BatchBytes   int // bytes read at once (0 = 1 MiB; one larger record alone)
	// Budget is the response byte budget every batch draws from
	// (internal/budget); nil = none.
	Budget *budget.Bytes
	Meter  metric.MeterProvider
	// Owners and Peers route by partition owner in a cluster whose
	// instances each serve a share of the partitions (route.go); nil
	// Owners = a single node, every stream served here.
	Owners broker.Owners
	Peers  Peers
	// Transactions is the log's view of a partition's Kafka transactions
	// (broker.Log; docs/kafka.md "Transactions"): a stream delivers
	// committed records only. nil = no transactions (every record is
	// committed).
	Transactions Transactions
}

// Transactions says, of one partition, up to where its records are
// committed (the last stable offset) and which transactions were aborted
// (broker.Log.ReadCommittedView).
type Transactions interface {
	ReadCommittedView(ctx context.Context, topic string, part int32, from, to int64) (broker.TxnView, error)
}

// Manager runs StreamChanges calls over a log store. Its methods are safe for
// concurrent use.
type Manager struct {
	store logstore.Store
	idx   logstore.KeyIndexer // nil: no OSO, DISK snapshots capped by fallbackDiskSpan
	cfg   Config

	open      atomic.Int64
	ownedMu   sync.Mutex
	owned     map[string]int // open calls per client identity
	stop      chan struct{}
	stopOnce  sync.Once
	backfills metric.Int64Counter
	// backfillTime is the backfill-duration histogram (metrics.go).
	backfillTime metric.Float64Histogram
}

// New returns a Manager reading store. idx is the store's key index, handed
// over explicitly (never discovered on store, so that wrappers such as the
// tracing one can wrap both); nil means the store has none: no OSO
// snapshots, and DISK snapshots are capped by a fixed span.
func New(store logstore.Store, idx logstore.KeyIndexer, cfg Config) (*Manager, error) {
	switch cfg.Backfill {
	case "":
		cfg.Backfill = BackfillAuto
	case BackfillAuto, BackfillEnabled, BackfillDisabled:
	default:
		return nil, fmt.Errorf("oso backfill %q: must be auto, enabled or disabled", cfg.Backfill)
	}
	if cfg.AutoSmallRatio < 0 || cfg.AutoSmallRatio > 1 || cfg.AutoLargeRatio < 0 || cfg.AutoLargeRatio > 1 || cfg.AutoSmallRecordBytes < 0 {
		return nil, errors.New("oso auto ratios must be within [0, 1] and the record size not negative")
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxStreamsPerPrincipal <= 0 {
		cfg.MaxStreamsPerPrincipal = max(cfg.MaxStreams/2, 1)
	}
	if cfg.HoldBack == 0 {
		cfg.HoldBack = DefaultHoldBack
	}
	if cfg.BatchRecords <= 0 {
		cfg.BatchRecords = DefaultBatchRecords
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.Meter == nil {
		cfg.Meter = noop.NewMeterProvider()
	}
	if cfg.Owners != nil && cfg.Peers == nil {
		return nil, errors.New("changestream: Owners without Peers")
	}
	m := &Manager{store: store, idx: idx, cfg: cfg, stop: make(chan struct{}), owned: make(map[string]int)}
	var err error
	m.backfills, err = cfg.Meter.Meter("github.com/sharelog/sharelog/internal/changestream").Int64Counter(
		"sharelog.change_stream.backfills",
		metric.WithDescription("Full backfills of change streams by the shape chosen (kind=oso or ordered)."),
		metric.WithUnit("{backfill}"))
	if err != nil {
		return nil, err
	}
	if m.backfillTime, err = newBackfillHistogram(cfg.Meter); err != nil {
		return nil, err
	}
	return m, nil
}

// Shutdown makes every open stream end with stream_end{SHUTDOWN} at its next
// event boundary, and new calls fail with UNAVAILABLE. It does not wait.
func (m *Manager) Shutdown() {
	m.stopOnce.Do(func() { close(m.stop) })
}

// Open returns the number of calls in progress.
func (m *Manager) Open() int64 { return m.open.Load() }

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// validate is the first validation step: the request's own fields.
func validate(req *Request) error {
	switch {
	case req.Topic == "":
		return invalid("topic is required")
	case req.Partition < 0:
		return invalid("partition must not be negative, got %d", req.Partition)
	case req.StartOffset < 0:
		return invalid("start_offset must not be negative, got %d", req.StartOffset)
	case req.EndOffset != nil && *req.EndOffset < req.StartOffset:
		return invalid("end_offset %d is below start_offset %d", *req.EndOffset, req.StartOffset)
	case req.TopicID != nil && !uuidRE.MatchString(*req.TopicID):
		return invalid("topic_id %q is not a UUID", *req.TopicID)
	case !req.OSO.known():
		return invalid("unknown oso_mode %d", req.OSO)
	}
	return nil
}

func rollbackRequired(cause, topicID string, ls, hw int64, msg string) *apierr.Error {
	return &apierr.Error{
		Reason:  apierr.RollbackRequired,
		Message: msg + "; drop the state derived from this partition and restart from offset 0",
		Metadata: map[string]string{
			"rollback_offset":  "0",
			"cause":            cause,
			"topic_id":         topicID,
			"log_start_offset": strconv.FormatInt(ls, 10),
			"high_watermark":   strconv.FormatInt(hw, 10),
		},
	}
}

// Stream runs one call: it validates req (a failure is
// an *apierr.Error or a logstore sentinel, before any event), then hands
// events in order to send until the call ends (send may group them into
// messages; see Sender for when it is flushed). It returns nil after
// stream_end, ctx's error when cancelled, or the error that stopped it
// (logstore.ErrCorrupt on a checksum failure; the events before it are
// flushed first). send blocking is the back-pressure: nothing is buffered
// beyond one read batch and the events send holds.
//
// With Owners, a partition served by a peer is streamed from it (after
// the request's own fields are validated): the peer applies its limits
// and answers, this Manager's shutdown and limits do not apply.
func (m *Manager) Stream(ctx context.Context, req Request, send Sender) error {
	if err := validate(&req); err != nil {
		return err
	}
	peer, err := m.ownerOf(ctx, &req)
	if err != nil {
		return err
	}
	if peer != "" {
		return m.cfg.Peers.Stream(ctx, peer, req, send)
	}
	select {
	case <-m.stop:
		return &apierr.Error{Reason: apierr.Unavailable, Message: "the server is shutting down"}
	default:
	}
	if n := m.open.Add(1); n > int64(m.cfg.MaxStreams) {
		m.open.Add(-1)
		return &apierr.Error{Reason: apierr.ThrottlingQuotaExceeded,
			Message: fmt.Sprintf("%d change streams are open, the limit is %d (--max-change-streams)", n-1, m.cfg.MaxStreams)}
	}
	defer m.open.Add(-1)
	if owner := principal.Name(ctx); owner != "" {
		if !m.takeShare(owner) {
			return &apierr.Error{Reason: apierr.ThrottlingQuotaExceeded,
				Message: fmt.Sprintf("this client has %d change streams open, the limit per client is %d (--max-change-streams-per-principal)",
					m.cfg.MaxStreamsPerPrincipal, m.cfg.MaxStreamsPerPrincipal)}
		}
		defer m.releaseShare(owner)
	}

	s := &stream{m: m, ctx: ctx, req: req, send: send, prefix: req.KeyPrefix}
	if req.EndOffset != nil {
		s.hasEnd, s.end = true, *req.EndOffset
	}
	err = s.run()
	s.grant.Release()
	if err != nil && ctx.Err() == nil && !s.sendFailed {
		// The events before a failure are valid: deliver them before the
		// call fails, so the client's checkpoint gets as far as it can.
		_ = send.Flush()
	}
	return err
}

// takeShare counts one more open call for owner unless it holds its share.
func (m *Manager) takeShare(owner string) bool {
	m.ownedMu.Lock()
	defer m.ownedMu.Unlock()
	if m.owned[owner] >= m.cfg.MaxStreamsPerPrincipal {
		return false
	}
	m.owned[owner]++
	return true
}

func (m *Manager) releaseShare(owner string) {
	m.ownedMu.Lock()
	defer m.ownedMu.Unlock()
	if m.owned[owner]--; m.owned[owner] <= 0 {
		delete(m.owned, owner)
	}
}

// start runs the remaining validation steps (topic, incarnation, offset
// range, purged history) against one read of the partition's bounds and
// returns them.
func (s *stream) start() (ls, hw int64, err error) {
	req := &s.req
	// Subscribe before reading the bounds, so no change is missed.
	if s.watch, err = s.m.store.Watch(req.Topic, req.Partition); err != nil {
		return 0, 0, s.unknownOr(err)
	}
	info, parts, err := s.m.store.Topic(s.ctx, req.Topic)
	if err != nil {
		return 0, 0, s.unknownOr(err)
	}
	if int(req.Partition) >= len(parts) {
		return 0, 0, s.unknownOr(logstore.ErrUnknownTopic)
	}
	s.topicID = info.ID
	ls, hw = parts[req.Partition].LogStartOffset, parts[req.Partition].HighWatermark
	if req.TopicID != nil && *req.TopicID != info.ID {
		return 0, 0, rollbackRequired(CauseTopicRecreated, info.ID, ls, hw,
			fmt.Sprintf("topic %q was re-created: its id is %s, not %s", req.Topic, info.ID, *req.TopicID))
	}
	if req.StartOffset > hw {
		return 0, 0, &apierr.Error{
			Reason:  apierr.OffsetOutOfRange,
			Message: fmt.Sprintf("start_offset %d is above the high watermark %d", req.StartOffset, hw),
			Metadata: map[string]string{
				"log_start_offset": strconv.FormatInt(ls, 10),
				"high_watermark":   strconv.FormatInt(hw, 10),
			},
		}
	}
	if req.StartOffset > 0 && req.StartOffset < ls {
		return 0, 0, rollbackRequired(CauseHistoryPurged, info.ID, ls, hw,
			fmt.Sprintf("offsets below %d were purged; start_offset %d is no longer readable", ls, req.StartOffset))
	}
	// P, the greatest tombstone compaction removed (docs/compaction.md), from the same
	// read of the partition as LSO and HW.
	s.compacted = info.Config.Compacts()
	s.purgedBelow = parts[req.Partition].PurgedTombstonesBelow
	s.purgedAtStart = s.purgedBelow
	if req.StartOffset > 0 && req.StartOffset < s.purgedBelow {
		return 0, 0, rollbackRequired(CauseTombstonesPurged, info.ID, ls, hw,
			fmt.Sprintf("compaction removed a deletion at offset %d, at or after start_offset %d, that this client has not seen", s.purgedBelow-1, req.StartOffset))
	}
	return ls, hw, nil
}

func (s *stream) unknownOr(err error) error {
	if errors.Is(err, logstore.ErrUnknownTopic) {
		return &apierr.Error{Reason: apierr.UnknownTopicOrPartition,
			Message: fmt.Sprintf("topic %q has no partition %d", s.req.Topic, s.req.Partition)}
	}
	return err
}

// chooseOSO applies the OSO eligibility rules and, under auto, the
// estimate. It returns an open cursor when the call begins with an
// OSO snapshot.
func (s *stream) chooseOSO(l0, e int64) (logstore.KeyCursor, error) {
	req, m := &s.req, s.m
	if !req.OSO.wantsOSO() || req.StartOffset > l0 || e <= l0 || s.hasEnd && s.end < e || m.idx == nil {
		return nil, nil
	}
	// The key index's latest record of a key may be one of an open or an
	// aborted transaction, and the committed one before it is not in the
	// index: such a range is read in order (docs/change-streams.md).
	if s.stable < e || s.abortedIn(l0, e) {
		return nil, nil
	}
	kind := "ordered"
	span := trace.SpanFromContext(s.ctx)
	defer func() {
		m.backfills.Add(s.ctx, 1, metric.WithAttributes(attribute.String("kind", kind)))
		s.backfillStarted(kind)
		span.SetAttributes(attribute.String("sharelog.change_stream.backfill", kind))
	}()
	switch m.cfg.Backfill {
	case BackfillDisabled:
		return nil, nil
	case BackfillAuto:
		ok, err := s.estimate(l0, e)
		if err != nil || !ok {
			return nil, ignoreNotReady(err)
		}
	}
	c, err := m.idx.ScanKeys(s.ctx, req.Topic, req.Partition, req.KeyPrefix, e)
	if err != nil {
		return nil, ignoreNotReady(err)
	}
	kind = "oso"
	return c, nil
}

func ignoreNotReady(err error) error {
	if errors.Is(err, logstore.ErrIndexNotReady) {
		return nil // eligibility 5: the index is being rebuilt
	}
	return err
}

// estimate is the auto rule: OSO iff the matching keys M are at most
// r·N, counting at most floor(r·N)+1 keys and reading no record.
func (s *stream) estimate(l0, e int64) (bool, error) {
	req, m := &s.req, s.m
	n, b, err := m.idx.RangeStats(req.Topic, req.Partition, l0, e)
	if err != nil {
		return false, err
	}
	r := m.cfg.AutoLargeRatio
	if n > 0 && float64(b)/float64(n) < float64(m.cfg.AutoSmallRecordBytes) {
		r = m.cfg.AutoSmallRatio
	}
	limit := int64(math.Floor(r*float64(n))) + 1
	keys, err := s.countKeys(e, limit)
	if err != nil {
		return false, err
	}
	oso := float64(keys) <= r*float64(n)
	trace.SpanFromContext(s.ctx).SetAttributes(
		attribute.Int64("sharelog.change_stream.auto.records", n),
		attribute.Int64("sharelog.change_stream.auto.bytes", b),
		attribute.Int64("sharelog.change_stream.auto.keys", keys),
		attribute.Float64("sharelog.change_stream.auto.ratio", r),
	)
	return oso, nil
}

// countKeys returns M for the auto rule: the keys under the prefix in the
// key index, counted up to limit. The index's CountKeys bounds decide
// without iterating the index when they can (an upper bound <= limit-1, or
// a lower bound >= limit); otherwise an index cursor counts.
func (s *stream) countKeys(e, limit int64) (int64, error) {
	req, m := &s.req, s.m
	lo, hi, err := m.idx.CountKeys(s.ctx, req.Topic, req.Partition, req.KeyPrefix, e, limit)
	if err != nil {
		return 0, err
	}
	if lo >= limit {
		return limit, nil
	}
	if hi < limit {
		return hi, nil // over-counting only biases toward ordered
	}
	c, err := m.idx.ScanKeys(s.ctx, req.Topic, req.Partition, req.KeyPrefix, e)
	if err != nil {
		return 0, err
	}
	var keys int64
	for keys < limit && c.Next() {
		keys++
	}
	err = c.Err()
	c.Close()
	return keys, err
}

// Estimate reports what the auto rule would choose for a full backfill of
// the partition with prefix now (benchmarks and tools).
func (m *Manager) Estimate(ctx context.Context, topic string, partition int32, prefix []byte) (oso bool, err error) {
	if m.idx == nil {
		return false, nil
	}
	ls, hw, err := m.store.Bounds(topic, partition)
	if err != nil || hw <= ls {
		return false, err
	}
	s := &stream{m: m, ctx: ctx, req: Request{Topic: topic, Partition: partition, KeyPrefix: prefix}}
	return s.estimate(ls, hw)
}
