package kafkawire

import (
	"fmt"
	"strconv"

	"github.com/sharelog/sharelog/internal/sharegroup"
)

// Share-group config names on GROUP resources, each one field of the
// share-group config that the gRPC UpdateShareGroupConfig sets.
const (
	cfgShareAutoOffsetReset         = "share.auto.offset.reset"
	cfgShareRecordLockDurationMs    = "share.record.lock.duration.ms"
	cfgShareDeliveryCountLimit      = "share.delivery.count.limit"
	cfgSharePartitionMaxRecordLocks = "share.partition.max.record.locks"
	cfgShareSessionTimeoutMs        = "share.session.timeout.ms"
	cfgShareHeartbeatIntervalMs     = "share.heartbeat.interval.ms"
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
	s := ""
	if c.AutoOffsetReset != nil {
		s = *c.AutoOffsetReset
	}
	const group = 8 // GROUP_CONFIG
	return []configKV{
		{cfgShareAutoOffsetReset, s, group},
		{cfgShareDeliveryCountLimit, i(c.DeliveryCountLimit), group},
		{cfgShareHeartbeatIntervalMs, i(c.HeartbeatIntervalMs), group},
		{cfgSharePartitionMaxRecordLocks, i(c.PartitionMaxRecordLocks), group},
		{cfgShareRecordLockDurationMs, i(c.RecordLockDurationMs), group},
		{cfgShareSessionTimeoutMs, i(c.SessionTimeoutMs), group},
	}
}
