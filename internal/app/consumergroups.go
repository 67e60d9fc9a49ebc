package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/consumergroup"
	"github.com/sharelog/sharelog/internal/sharegroup"
	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// ConsumerGroupsDir is the directory of the committed offsets of classic
// consumer groups in the data dir (docs/on-disk-layout.md).
const ConsumerGroupsDir = "consumer-groups"

// consumerGroupsUnserved is ConsumerGroupService's FAILED_PRECONDITION in
// cluster mode without a Kafka listener: the consumer groups' offsets
// bucket is opened with --kafka-addr only.
const consumerGroupsUnserved = "in cluster mode (--store jetstream) consumer groups are served with --kafka-addr only (docs/consumer-groups.md)"

// openConsumerGroups opens the classic consumer-group coordinator over the
// file store of committed offsets (fsync as --fsync says), with the log's
// topics for the partition checks and deletions, and the share groups'
// ids refused to it (docs/consumer-groups.md). File-store mode: in
// cluster mode each backend opens its own (cluster.go, partitioned.go),
// whose ConsumerGroupService the cluster routing calls.
func openConsumerGroups(cfg Config, log *broker.Log, share *sharegroup.Manager, logger *slog.Logger) (*consumergroup.Coordinator, error) {
	mode, err := logstore.ParseFsyncMode(cfg.Fsync)
	if err != nil {
		return nil, err
	}
	st, err := groupoffsets.Open(groupoffsets.Options{Dir: filepath.Join(cfg.DataDir, ConsumerGroupsDir),
		Fsync: mode, FsyncInterval: cfg.FsyncInterval, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("open consumer-group offsets: %w", err)
	}
	return openCoordinator(cfg, st, log, share, nil, logger)
}

// openCoordinator opens a consumer-group coordinator over st (which it
// owns, closed on failure too), with log's topics for the partition checks
// and deletions, and the share groups' ids refused to it
// (docs/consumer-groups.md). route, in partitioned mode, is which groups
// this instance coordinates (nil: every one).
func openCoordinator(cfg Config, st groupoffsets.Store, log *broker.Log, share *sharegroup.Manager, route *groupRoute, logger *slog.Logger) (*consumergroup.Coordinator, error) {
	if route == nil {
		route = &groupRoute{}
	}
	c, err := consumergroup.Open(consumergroup.Options{
		Store:                 st,
		InitialRebalanceDelay: cfg.GroupInitialRebalanceDelay,
		OffsetsRetention:      cfg.OffsetsRetention,
		Partitions: func(ctx context.Context, topic string) (int32, error) {
			if topic == broker.InternalTopic {
				return 1, nil // listed, empty (docs/kafka.md "Internal topic")
			}
			info, err := log.TopicInfo(ctx, topic)
			if err != nil {
				return 0, broker.ErrorOf(err)
			}
			return info.Partitions, nil
		},
		Topics: func(ctx context.Context) (map[string]int32, error) {
			ts, err := log.Topics(ctx)
			if err != nil {
				return nil, broker.ErrorOf(err)
			}
			out := make(map[string]int32, len(ts)+1)
			for _, t := range ts {
				out[t.Name] = t.Partitions
			}
			// Kafka's regexes match internal topics too.
			out[broker.InternalTopic] = 1
			return out, nil
		},
		ListOffsets: func(ctx context.Context, topic string, partition int32, q consumergroup.OffsetQuery, ts int64) (int64, error) {
			spec := map[consumergroup.OffsetQuery]broker.OffsetSpec{consumergroup.OffsetEarliest: broker.Earliest,
				consumergroup.OffsetLatest: broker.Latest, consumergroup.OffsetByTimestamp: broker.ByTimestamp}[q]
			if topic == broker.InternalTopic { // listed, empty (docs/kafka.md "Internal topic")
				if q == consumergroup.OffsetByTimestamp {
					return -1, nil
				}
				return 0, nil
			}
			// The coordinator's own look-ups, of a call forwarded to it
			// (cgroute.go) too.
			off, _, err := log.ListOffsets(broker.OwnLookups(ctx), topic, partition, spec, ts)
			if err != nil {
				return 0, broker.ErrorOf(err)
			}
			return off, nil
		},
		ConsumerHeartbeatInterval: cfg.GroupConsumerHeartbeatInterval,
		ConsumerSessionTimeout:    cfg.GroupConsumerSessionTimeout,
		Taken:                     share.HasGroup,
		Coordinates:               route.coordinates,
		Serves:                    route.serves,
		Logger:                    logger,
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	log.Subscribe(func(ev broker.TopicEvent) {
		if ev.Kind == broker.TopicDeleted {
			c.TopicDeleted(ev.Topic.Name)
		}
	})
	return c, nil
}

// groupRoute is consumergroup.Options.Coordinates and Serves: the groups
// an instance of the partitioned mode coordinates (groups.go).
type groupRoute struct {
	coordinates func(ctx context.Context, group string, create bool) error
	serves      func(group string) bool
}
