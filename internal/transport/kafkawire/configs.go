package kafkawire

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// Kafka's config sources (DescribeConfigs v1+, CreateTopics v5+).
const (
	sourceDynamicTopic int8 = 1 // DYNAMIC_TOPIC_CONFIG: set on the topic
	sourceDefault      int8 = 5 // DEFAULT_CONFIG
	sourceGroup        int8 = 8 // GROUP_CONFIG
)

// configKV is one config as DescribeConfigs and CreateTopics show it.
type configKV struct {
	name, value string
	source      int8
	kind        int8   // Kafka's ConfigType (v3); 0: unknown
	doc         string // its documentation (v3); "": none
}

// topicConfigs lists a topic's configs (broker.Log.ConfigEntries): every
// one, set (DYNAMIC_TOPIC_CONFIG) or default (DEFAULT_CONFIG).
func (l *Listener) topicConfigs(ctx context.Context, c broker.TopicConfig) []configKV {
	entries := l.logOf(ctx).ConfigEntries(c)
	out := make([]configKV, len(entries))
	for i, e := range entries {
		src := sourceDynamicTopic
		if e.Default {
			src = sourceDefault
		}
		out[i] = configKV{name: e.Name, value: e.Value, source: src, kind: int8(e.Kind), doc: e.Doc}
	}
	return out
}

// Share-group config names on GROUP resources, each one field of the
// share-group config that the gRPC UpdateShareGroupConfig sets.
const (
	cfgShareAutoOffsetReset         = "share.auto.offset.reset"
	cfgShareRecordLockDurationMs    = "share.record.lock.duration.ms"
	cfgShareDeliveryCountLimit      = "share.delivery.count.limit"
	cfgSharePartitionMaxRecordLocks = "share.partition.max.record.locks"
	cfgShareSessionTimeoutMs        = "share.session.timeout.ms"
	cfgShareHeartbeatIntervalMs     = "share.heartbeat.interval.ms"
	cfgShareIsolationLevel          = "share.isolation.level"
	// sharelog's own (docs/queues.md).
	cfgShareOrdering                  = "share.ordering"
	cfgShareRedeliveryBackoffInitial  = "share.redelivery.backoff.initial.ms"
	cfgShareRedeliveryBackoffMax      = "share.redelivery.backoff.max.ms"
	cfgShareRedeliveryBackoffMultiply = "share.redelivery.backoff.multiplier"
)

// setGroupConfig sets one named field of c from its Kafka string value.
func setGroupConfig(c *sharegroup.GroupConfig, name, value string) error {
	int32Field := func(dst **int32) error {
		v, err := strconv.ParseInt(value, 10, 32)
		if err != nil {
			return fmt.Errorf("%s must be an integer, got %q", name, value)
		}
		n := int32(v)
		*dst = &n
		return nil
	}
	switch name {
	case cfgShareAutoOffsetReset:
		c.AutoOffsetReset = &value
		return nil
	case cfgShareRecordLockDurationMs:
		return int32Field(&c.RecordLockDurationMs)
	case cfgShareDeliveryCountLimit:
		return int32Field(&c.DeliveryCountLimit)
	case cfgSharePartitionMaxRecordLocks:
		return int32Field(&c.PartitionMaxRecordLocks)
	case cfgShareSessionTimeoutMs:
		return int32Field(&c.SessionTimeoutMs)
	case cfgShareHeartbeatIntervalMs:
		return int32Field(&c.HeartbeatIntervalMs)
	case cfgShareOrdering:
		c.Ordering = &value // the domain refuses what is not none or key
		return nil
	case cfgShareIsolationLevel:
		c.IsolationLevel = &value // the domain refuses what is not read_uncommitted or read_committed
		return nil
	case cfgShareRedeliveryBackoffInitial:
		return int32Field(&c.RedeliveryBackoffInitialMs)
	case cfgShareRedeliveryBackoffMax:
		return int32Field(&c.RedeliveryBackoffMaxMs)
	case cfgShareRedeliveryBackoffMultiply:
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return fmt.Errorf("%s must be a number, got %q", name, value)
		}
		c.RedeliveryBackoffMultiplier = &v
		return nil
	}
	return fmt.Errorf("group config %q is not supported", name)
}

// groupConfigs lists a group's effective config as DescribeConfigs shows it.
func groupConfigs(c sharegroup.GroupConfig) []configKV {
	i := func(p *int32) string {
		if p == nil {
			return ""
		}
		return strconv.Itoa(int(*p))
	}
	s, ord, mult, iso := "", "", "", ""
	if c.IsolationLevel != nil {
		iso = *c.IsolationLevel
	}
	if c.AutoOffsetReset != nil {
		s = *c.AutoOffsetReset
	}
	if c.Ordering != nil {
		ord = *c.Ordering
	}
	if c.RedeliveryBackoffMultiplier != nil {
		mult = strconv.FormatFloat(*c.RedeliveryBackoffMultiplier, 'g', -1, 64)
	}
	return []configKV{
		{name: cfgShareAutoOffsetReset, value: s, source: sourceGroup},
		{name: cfgShareDeliveryCountLimit, value: i(c.DeliveryCountLimit), source: sourceGroup},
		{name: cfgShareHeartbeatIntervalMs, value: i(c.HeartbeatIntervalMs), source: sourceGroup},
		{name: cfgShareIsolationLevel, value: iso, source: sourceGroup},
		{name: cfgShareOrdering, value: ord, source: sourceGroup},
		{name: cfgSharePartitionMaxRecordLocks, value: i(c.PartitionMaxRecordLocks), source: sourceGroup},
		{name: cfgShareRecordLockDurationMs, value: i(c.RecordLockDurationMs), source: sourceGroup},
		{name: cfgShareRedeliveryBackoffInitial, value: i(c.RedeliveryBackoffInitialMs), source: sourceGroup},
		{name: cfgShareRedeliveryBackoffMax, value: i(c.RedeliveryBackoffMaxMs), source: sourceGroup},
		{name: cfgShareRedeliveryBackoffMultiply, value: mult, source: sourceGroup},
		{name: cfgShareSessionTimeoutMs, value: i(c.SessionTimeoutMs), source: sourceGroup},
	}
}
