package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Altering a topic after its creation (docs/kafka.md "Topic configs",
// "CreatePartitions"): partitions are added, never removed; configs are
// set, reset to their defaults or replaced as a whole. Every transport
// comes here, and the store keeps the result (logstore.Store.AlterTopic),
// so the next Produce, Fetch, assignment or DescribeConfigs of any
// transport sees it.

// CreatePartitions grows topic name to count partitions (count is the new
// total, as in Kafka's CreatePartitions). A count that does not grow the
// topic, or exceeds MaxPartitions, is a FaultPartitions *TopicError; an
// unknown topic is UNKNOWN_TOPIC_OR_PARTITION; partitions that would take
// the server beyond Config.PartitionLimit are POLICY_VIOLATION. With
// validateOnly nothing changes and the answer is the topic as it would be.
// With a Controller that names a peer, the peer adds them, as it creates
// topics. The new partitions start empty; share groups see them at their
// next assignment, Kafka clients at their next metadata refresh.
func (l *Log) CreatePartitions(ctx context.Context, name string, count int32, validateOnly bool) (TopicInfo, error) {
	peer, err := l.controller(ctx)
	if err != nil {
		return TopicInfo{}, err
	}
	if peer != "" {
		return l.cfg.Peers.CreatePartitions(ctx, peer, name, count, validateOnly)
	}
	if name == "" {
		return TopicInfo{}, topicErr(FaultName, "name is required")
	}
	cur, err := l.store.TopicInfo(ctx, name)
	if err != nil {
		return TopicInfo{}, err
	}
	grow := func(cur TopicInfo) (TopicInfo, error) {
		switch {
		case count == cur.Partitions:
			return cur, topicErr(FaultPartitions, "topic %q already has %d partitions", name, cur.Partitions)
		case count < cur.Partitions:
			return cur, topicErr(FaultPartitions, "topic %q has %d partitions, more than the %d asked: partitions can only be added", name, cur.Partitions, count)
		case count > MaxPartitions:
			return cur, topicErr(FaultPartitions, "partitions must be at most %d, got %d", MaxPartitions, count)
		}
		cur.Partitions = count
		return cur, nil
	}
	next, err := grow(cur)
	if err != nil {
		return TopicInfo{}, err
	}
	if validateOnly {
		return next, l.checkGrowthLimit(ctx, name, count-cur.Partitions)
	}
	release, err := l.reserveGrowth(ctx, name, count-cur.Partitions)
	if err != nil {
		return TopicInfo{}, err
	}
	defer release()
	return l.store.AlterTopic(ctx, name, grow)
}

// ConfigOp is what an alteration does to one config (Kafka's
// IncrementalAlterConfigs operations).
type ConfigOp int8

// Kafka's operation codes.
const (
	ConfigSet      ConfigOp = 0 // set the value
	ConfigDelete   ConfigOp = 1 // back to the default
	ConfigAppend   ConfigOp = 2 // add to a list (cleanup.policy)
	ConfigSubtract ConfigOp = 3 // remove from a list (cleanup.policy)
)

// ConfigChange is one change of a topic config, by its Kafka name.
type ConfigChange struct {
	Name  string
	Op    ConfigOp
	Value string // ignored by ConfigDelete
}

// AlterTopicConfigs applies changes to topic name's configs, all or none
// (Kafka's IncrementalAlterConfigs). A config set becomes one of the
// topic's overrides; a config deleted takes its default again (the
// server's --segment-bytes for segment.bytes). A name twice, an unknown
// name, a bad value or a list operation on a config that is no list is a
// FaultConfig *TopicError. With validateOnly nothing changes. Any instance
// may alter a topic: the store orders concurrent alterations.
func (l *Log) AlterTopicConfigs(ctx context.Context, name string, changes []ConfigChange, validateOnly bool) (TopicInfo, error) {
	seen := map[string]bool{}
	for _, c := range changes {
		if seen[c.Name] {
			return TopicInfo{}, topicErr(FaultConfig, "config %q is named twice", c.Name)
		}
		seen[c.Name] = true
		if !slices.Contains(ConfigNames(), c.Name) {
			var s TopicSettings
			return TopicInfo{}, s.SetConfig(c.Name, c.Value) // the unknown-name error
		}
	}
	return l.alterConfigs(ctx, name, validateOnly, func(cfg TopicConfig) (TopicConfig, error) {
		for _, c := range changes {
			var err error
			if cfg, err = l.changeConfig(cfg, c); err != nil {
				return cfg, err
			}
		}
		return cfg, nil
	})
}

// ReplaceTopicConfigs makes configs the topic's overrides, all or none
// (Kafka's AlterConfigs): every config not named takes its default again.
// Errors as AlterTopicConfigs.
func (l *Log) ReplaceTopicConfigs(ctx context.Context, name string, configs []ConfigEntry, validateOnly bool) (TopicInfo, error) {
	var s TopicSettings
	seen := map[string]bool{}
	for _, c := range configs {
		if seen[c.Name] {
			return TopicInfo{}, topicErr(FaultConfig, "config %q is named twice", c.Name)
		}
		seen[c.Name] = true
		if err := s.SetConfig(c.Name, c.Value); err != nil {
			return TopicInfo{}, err
		}
	}
	return l.alterConfigs(ctx, name, validateOnly, func(TopicConfig) (TopicConfig, error) {
		cfg := l.defaultConfig()
		s.apply(&cfg)
		cfg.Overrides = s.set()
		return cfg, nil
	})
}

// alterConfigs runs change on the topic's config through the store (or,
// with validateOnly, on the config as it is now) and checks the result as
// a creation would. An unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
func (l *Log) alterConfigs(ctx context.Context, name string, validateOnly bool, change func(TopicConfig) (TopicConfig, error)) (TopicInfo, error) {
	if name == "" {
		return TopicInfo{}, topicErr(FaultName, "name is required")
	}
	alter := func(cur TopicInfo) (TopicInfo, error) {
		cfg, err := change(cur.Config)
		if err != nil {
			return cur, err
		}
		if cfg, err = logstore.NormalizeTopicConfig(cfg); err != nil {
			return cur, topicErr(FaultConfig, "%s", err)
		}
		cur.Config = cfg
		return cur, nil
	}
	if validateOnly {
		cur, err := l.store.TopicInfo(ctx, name)
		if err != nil {
			return TopicInfo{}, err
		}
		return alter(cur)
	}
	info, err := l.store.AlterTopic(ctx, name, alter)
	if errors.Is(err, logstore.ErrInvalidArgument) {
		// The store's own check of what alter returned.
		return TopicInfo{}, topicErr(FaultConfig, "%s", err)
	}
	return info, err
}

// changeConfig applies one change to cfg.
func (l *Log) changeConfig(cfg TopicConfig, c ConfigChange) (TopicConfig, error) {
	switch c.Op {
	case ConfigSet:
		var s TopicSettings
		if err := s.SetConfig(c.Name, c.Value); err != nil {
			return cfg, err
		}
		s.apply(&cfg)
		cfg.Overrides = append(slices.Clone(cfg.Overrides), c.Name)
		return cfg, nil
	case ConfigDelete:
		var s TopicSettings
		def := l.defaultConfig()
		if err := s.SetConfig(c.Name, l.ConfigValue(def, c.Name)); err != nil {
			return cfg, err
		}
		s.apply(&cfg)
		l.resetUnset(&cfg, c.Name)
		cfg.Overrides = slices.DeleteFunc(slices.Clone(cfg.Overrides), func(n string) bool { return n == c.Name })
		return cfg, nil
	case ConfigAppend, ConfigSubtract:
		if c.Name != ConfigCleanupPolicy {
			return cfg, topicErr(FaultConfig, "%s is not a list: APPEND and SUBTRACT apply to %s only", c.Name, ConfigCleanupPolicy)
		}
		del, compact := cfg.CleanupPolicy != CleanupCompact, cfg.Compacts()
		p, err := cleanupPolicy(c.Value)
		if err != nil {
			return cfg, err
		}
		pDel, pCompact := p != CleanupCompact, p == CleanupCompact || p == CleanupCompactDelete
		if c.Op == ConfigAppend {
			del, compact = del || pDel, compact || pCompact
		} else {
			del, compact = del && !pDel, compact && !pCompact
		}
		switch {
		case del && compact:
			cfg.CleanupPolicy = CleanupCompactDelete
		case compact:
			cfg.CleanupPolicy = CleanupCompact
		case del:
			cfg.CleanupPolicy = CleanupDelete
		default:
			return cfg, topicErr(FaultConfig, "%s would be empty", ConfigCleanupPolicy)
		}
		cfg.Overrides = append(slices.Clone(cfg.Overrides), c.Name)
		return cfg, nil
	}
	return cfg, topicErr(FaultConfig, "%s: unknown operation %d", c.Name, c.Op)
}

// resetUnset stores the settings whose default is "unset" (0 or "") as
// unset again, so that the topic follows the default.
func (l *Log) resetUnset(cfg *TopicConfig, name string) {
	switch name {
	case ConfigDeleteRetentionMs:
		cfg.DeleteRetentionMs = 0
	case ConfigMinCleanableDirtyRatio:
		cfg.MinCleanableDirtyRatio = 0
	case ConfigRetentionBytes:
		cfg.RetentionBytes = 0
	case ConfigSegmentMs:
		cfg.SegmentMs = 0
	case ConfigMaxMessageBytes:
		cfg.MaxMessageBytes = 0
	case ConfigCompressionType:
		cfg.CompressionType = ""
	case ConfigMessageTimestampType:
		cfg.MessageTimestampType = ""
	case ConfigMinInsyncReplicas:
		cfg.MinInsyncReplicas = 0
	}
}

// ConfigValue is the value of config name in c as ConfigEntries shows it
// ("" for an unknown name).
func (l *Log) ConfigValue(c TopicConfig, name string) string {
	for _, e := range l.ConfigEntries(c) {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// reserveGrowth admits n more partitions of an existing topic under
// Config.PartitionLimit, as reservePartitions does for a new one.
func (l *Log) reserveGrowth(ctx context.Context, name string, n int32) (release func(), err error) {
	return l.reserveCap(n, func() error { return l.growthLimitLocked(ctx, name, n) })
}

// checkGrowthLimit is reserveGrowth without the reservation.
func (l *Log) checkGrowthLimit(ctx context.Context, name string, n int32) error {
	if l.cfg.PartitionLimit <= 0 {
		return nil
	}
	l.capMu.Lock()
	defer l.capMu.Unlock()
	return l.growthLimitLocked(ctx, name, n)
}

// growthLimitLocked: l.capMu is held.
func (l *Log) growthLimitLocked(ctx context.Context, name string, n int32) error {
	have, err := l.partitionsHeldLocked(ctx)
	if err != nil {
		return err
	}
	if limit := int64(l.cfg.PartitionLimit); have+int64(n) > limit {
		return l.capRefusal(fmt.Sprintf("topic %q", name), n, have, limit)
	}
	return nil
}
