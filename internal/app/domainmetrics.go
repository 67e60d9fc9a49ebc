package app

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sharelog/sharelog/internal/changestream"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Domain metrics, read from live state at scrape time (one callback per
// scrape). Series labelled by topic, partition or group exist only while
// what they describe does: a deleted topic or group has no series at the
// next scrape, and its counters (kept on the share-partition) go with it.
// Label sets are bounded by the topics, partitions and groups that exist.
//
// In Prometheus (see docs/metrics.md):
//
//	sharelog_log_start_offset{topic,partition}
//	sharelog_log_high_watermark{topic,partition}
//	sharelog_share_start_offset{group,topic,partition}
//	sharelog_share_lag{group,topic,partition}
//	sharelog_share_records_acquired{group,topic,partition}
//	sharelog_share_lock_expiries_total{group,topic,partition}
//	sharelog_share_acknowledgements_total{group,topic,partition,type}
//	sharelog_share_delivery_limit_archives_total{group,topic,partition}
//	sharelog_share_dead_letter_copies_total{group}
//	sharelog_share_dead_letter_skipped_total{group}
//	sharelog_share_members{group}, sharelog_share_sessions{group}
//	sharelog_share_unreadable_archived_total, sharelog_share_state_write_failures_total,
//	sharelog_share_bad_deliver_at_total
//	sharelog_consumer_group_committed_offset{group,topic,partition}
//	sharelog_consumer_group_lag{group,topic,partition}
//	sharelog_consumer_group_members{group}
//	sharelog_change_streams_open
//	sharelog_compaction_{runs,records_removed,tombstones_removed}_total,
//	sharelog_compaction_{read,written}_bytes_total,
//	sharelog_compaction_dirty_ratio{topic,partition}
//	sharelog_purge_calls_total{result}, sharelog_purge_records_total

// domainSources are what the domain metrics read.
type domainSources struct {
	store   *logstore.FileStore
	share   *sharegroup.Manager
	streams *changestream.Manager
	groups  *consumergroup.Coordinator // Kafka consumer groups (file store only, for now)
}

// domainSources is what the domain metrics read now: the file store's
// backend, or in cluster mode the backend serving here (the active
// instance's in phase 1, nothing on a standby; in partitioned mode the
// instance's own, with the share groups it coordinates).
func (s *Server) domainSources() domainSources {
	if s.cluster == nil {
		return domainSources{store: s.store, share: s.share, streams: s.streams, groups: s.groups}
	}
	n := s.cluster
	n.mu.RLock()
	defer n.mu.RUnlock()
	switch {
	case n.part != nil && n.part.logB != nil:
		return domainSources{share: n.part.logB.share, streams: n.part.logB.streams}
	case n.part == nil && n.active != nil:
		return domainSources{share: n.active.share, streams: n.active.streams}
	}
	return domainSources{}
}

// ackTypeNames label acknowledgements by type (index: sharegroup.AckType).
var ackTypeNames = map[sharegroup.AckType]string{
	sharegroup.AckAccept: "accept", sharegroup.AckRelease: "release", sharegroup.AckReject: "reject",
	sharegroup.AckGap: "gap", sharegroup.AckRenew: "renew",
}

func registerDomainMetrics(mp metric.MeterProvider, src func() domainSources) error {
	meter := mp.Meter("github.com/sharelog/sharelog/internal/app/domain")
	var err error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		if err != nil {
			return nil
		}
		var g metric.Int64ObservableGauge
		g, err = meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return g
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		if err != nil {
			return nil
		}
		var c metric.Int64ObservableCounter
		c, err = meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return c
	}
	logStart := gauge("sharelog.log.start_offset", "{offset}", "First offset still in the partition's log (moved by purges and retention).")
	highWM := gauge("sharelog.log.high_watermark", "{offset}", "Offset the partition's next record gets.")
	spso := gauge("sharelog.share.start_offset", "{offset}", "Share-partition start offset (SPSO) per group.")
	lag := gauge("sharelog.share.lag", "{record}", "Records at or above SPSO not yet acknowledged or archived, up to the high watermark.")
	acquired := gauge("sharelog.share.records.acquired", "{record}", "Records acquired by consumers and not yet acknowledged (in flight).")
	expiries := counter("sharelog.share.lock_expiries", "{record}", "Acquired records whose acquisition lock expired.")
	acks := counter("sharelog.share.acknowledgements", "{record}", "Records acknowledged, by type (accept, release, reject, gap, renew).")
	limitArch := counter("sharelog.share.delivery_limit_archives", "{record}", "Records archived because they reached the delivery-count limit.")
	dlqCopies := counter("sharelog.share.dead_letter.copies", "{record}", "Records copied to the group's dead-letter topic.")
	dlqSkipped := counter("sharelog.share.dead_letter.skipped", "{record}", "Records archived without a dead-letter copy (topic missing, record gone).")
	members := gauge("sharelog.share.members", "{member}", "Members of the share group.")
	sessions := gauge("sharelog.share.sessions", "{session}", "Open share sessions of the group.")
	unreadable := counter("sharelog.share.unreadable_archived", "{record}", "Offsets archived because the log could not read them.")
	stateFails := counter("sharelog.share.state_write_failures", "{write}", "Failed share-state writes or fsyncs.")
	badDeliverAt := counter("sharelog.share.bad_deliver_at", "{record}", "Acquisitions of records whose sharelog-deliver-at header is not a decimal number of ms (delivered at once; docs/queues.md).")
	cgOffset := gauge("sharelog.consumer_group.committed_offset", "{offset}", "Committed offset of a consumer group on a partition (the next offset it reads).")
	cgLag := gauge("sharelog.consumer_group.lag", "{record}", "High watermark minus the committed offset, at least 0 (no series without a commit).")
	cgMembers := gauge("sharelog.consumer_group.members", "{member}", "Members of the consumer group (either protocol).")
	streamsOpen := gauge("sharelog.change_streams.open", "{stream}", "StreamChanges calls in progress.")
	cRuns := counter("sharelog.compaction.runs", "{run}", "Cleaning passes that rewrote at least one segment.")
	cRead := counter("sharelog.compaction.read", "By", "Segment bytes read by the cleaner.")
	cWritten := counter("sharelog.compaction.written", "By", "Cleaned segment bytes written.")
	cRemoved := counter("sharelog.compaction.records_removed", "{record}", "Superseded records and expired tombstones removed by compaction.")
	cTombs := counter("sharelog.compaction.tombstones_removed", "{record}", "Expired tombstones removed by compaction.")
	if err != nil {
		return err
	}
	dirty, err := meter.Float64ObservableGauge("sharelog.compaction.dirty_ratio", metric.WithUnit("1"),
		metric.WithDescription("Share of a compacted partition's sealed bytes written since its last cleaning, as last measured (-1: not yet)."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		s := src()
		if s.store != nil {
			for _, w := range s.store.Watermarks() {
				at := metric.WithAttributes(attribute.String("topic", w.Topic), attribute.String("partition", strconv.Itoa(int(w.Partition))))
				o.ObserveInt64(logStart, w.LogStart, at)
				o.ObserveInt64(highWM, w.HighWatermark, at)
			}
			cs := s.store.CompactionStats()
			o.ObserveInt64(cRuns, cs.Runs)
			o.ObserveInt64(cRead, cs.BytesRead)
			o.ObserveInt64(cWritten, cs.BytesWritten)
			o.ObserveInt64(cRemoved, cs.RecordsRemoved)
			o.ObserveInt64(cTombs, cs.TombstonesRemoved)
			for _, p := range cs.Partitions {
				o.ObserveFloat64(dirty, p.DirtyRatio, metric.WithAttributes(attribute.String("topic", p.Topic),
					attribute.String("partition", strconv.Itoa(int(p.Partition)))))
			}
		}
		if s.share != nil {
			groups, parts := s.share.Metrics()
			for _, g := range groups {
				at := metric.WithAttributes(attribute.String("group", g.Group))
				o.ObserveInt64(members, int64(g.Members), at)
				o.ObserveInt64(sessions, int64(g.Sessions), at)
				o.ObserveInt64(dlqCopies, g.DeadLettered, at)
				o.ObserveInt64(dlqSkipped, g.DeadLetterSkipped, at)
			}
			for _, p := range parts {
				kv := []attribute.KeyValue{attribute.String("group", p.Group), attribute.String("topic", p.Topic),
					attribute.String("partition", strconv.Itoa(int(p.Partition)))}
				at := metric.WithAttributes(kv...)
				o.ObserveInt64(spso, p.StartOffset, at)
				o.ObserveInt64(lag, p.Lag, at)
				o.ObserveInt64(acquired, p.Acquired, at)
				o.ObserveInt64(expiries, p.Expired, at)
				o.ObserveInt64(limitArch, p.LimitArchived, at)
				for t, name := range ackTypeNames {
					o.ObserveInt64(acks, p.Acks[t], metric.WithAttributes(append(kv, attribute.String("type", name))...))
				}
			}
			st := s.share.Stats()
			o.ObserveInt64(unreadable, int64(st.UnreadableArchived))
			o.ObserveInt64(stateFails, int64(st.StateWriteFailures))
			o.ObserveInt64(badDeliverAt, int64(st.BadDeliverAt))
		}
		if s.streams != nil {
			o.ObserveInt64(streamsOpen, s.streams.Open())
		}
		if s.groups != nil {
			observeConsumerGroups(ctx, o, s.groups, cgOffset, cgLag, cgMembers)
		}
		return nil
	}, logStart, highWM, spso, lag, acquired, expiries, acks, limitArch, dlqCopies, dlqSkipped, members, sessions,
		unreadable, stateFails, badDeliverAt, streamsOpen, cgOffset, cgLag, cgMembers, cRuns, cRead, cWritten, cRemoved, cTombs, dirty)
	return err
}

// observeConsumerGroups reads every consumer group's members and committed
// offsets with their lag (docs/metrics.md "Consumer groups").
func observeConsumerGroups(ctx context.Context, o metric.Observer, c *consumergroup.Coordinator, offset, lag, members metric.Int64ObservableGauge) {
	if groups, err := c.List(ctx); err == nil {
		for _, g := range groups {
			o.ObserveInt64(members, int64(g.Members), metric.WithAttributes(attribute.String("group", g.Group)))
		}
	}
	for _, g := range c.AllOffsetsWithLag(ctx) {
		for _, p := range g.Offsets {
			at := metric.WithAttributes(attribute.String("group", g.Group), attribute.String("topic", p.Topic),
				attribute.String("partition", strconv.Itoa(int(p.Partition))))
			o.ObserveInt64(offset, p.Offset, at)
			if p.Lag >= 0 {
				o.ObserveInt64(lag, p.Lag, at)
			}
		}
	}
}
