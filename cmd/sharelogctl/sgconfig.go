package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// sgConfigCmd is `share-groups config get|set`: a group's configuration
// (GetShareGroupConfig, UpdateShareGroupConfig; docs/queues.md for the
// ordering and backoff fields).
func (a *app) sgConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show or set a share group's configuration",
	}
	get := &cobra.Command{
		Use:     "get GROUP",
		Short:   "Print every config of a share group with its effective value",
		Example: `  sharelogctl share-groups config get orders-workers`,
		Args:    cobra.ExactArgs(1),
	}
	get.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		client, err := a.shareGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.GetShareGroupConfig(ctx, &sharelogv1.GetShareGroupConfigRequest{GroupId: args[0]})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		return a.printGroupConfig(resp.GetConfig())
	})
	set := &cobra.Command{
		Use:   "set GROUP NAME=VALUE...",
		Short: "Set configs of a share group (the others keep their value)",
		Long: `Set configs of a share group, named as in the gRPC/REST ShareGroupConfig or as Kafka's GROUP
configs (share.record.lock.duration.ms, ...). Every name is checked before anything applies.

  ordering                          none | key (share.ordering)
  isolation_level                   read_uncommitted | read_committed (share.isolation.level)
  redelivery_backoff_initial_ms     0 = off (share.redelivery.backoff.initial.ms)
  redelivery_backoff_max_ms         (share.redelivery.backoff.max.ms)
  redelivery_backoff_multiplier     (share.redelivery.backoff.multiplier)
  record_lock_duration_ms, delivery_count_limit, partition_max_record_locks,
  auto_offset_reset, session_timeout_ms, heartbeat_interval_ms, dead_letter_topic`,
		Example: `  sharelogctl share-groups config set orders-workers ordering=key
  sharelogctl share-groups config set jobs redelivery_backoff_initial_ms=1000 redelivery_backoff_max_ms=60000`,
		Args: cobra.MinimumNArgs(2),
	}
	set.RunE = a.runE(func(cmd *cobra.Command, args []string) error {
		c := &sharelogv1.ShareGroupConfig{}
		for _, kv := range args[1:] {
			name, value, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("%q: want NAME=VALUE", kv)
			}
			if err := setConfigField(c, name, value); err != nil {
				return err
			}
		}
		client, err := a.shareGroupsClient()
		if err != nil {
			return err
		}
		ctx, cancel := a.callCtx(cmd.Context())
		defer cancel()
		resp, err := client.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: args[0], Config: c})
		if err != nil {
			return err
		}
		if a.jsonOutput() {
			return a.printJSON(resp)
		}
		return a.printGroupConfig(resp.GetConfig())
	})
	cmd.AddCommand(get, set)
	return cmd
}

// configAliases maps Kafka's GROUP config names to the proto's.
var configAliases = map[string]string{
	"share.record.lock.duration.ms":       "record_lock_duration_ms",
	"share.delivery.count.limit":          "delivery_count_limit",
	"share.partition.max.record.locks":    "partition_max_record_locks",
	"share.auto.offset.reset":             "auto_offset_reset",
	"share.session.timeout.ms":            "session_timeout_ms",
	"share.heartbeat.interval.ms":         "heartbeat_interval_ms",
	"share.ordering":                      "ordering",
	"share.isolation.level":               "isolation_level",
	"share.redelivery.backoff.initial.ms": "redelivery_backoff_initial_ms",
	"share.redelivery.backoff.max.ms":     "redelivery_backoff_max_ms",
	"share.redelivery.backoff.multiplier": "redelivery_backoff_multiplier",
}

func setConfigField(c *sharelogv1.ShareGroupConfig, name, value string) error {
	if n, ok := configAliases[name]; ok {
		name = n
	}
	i32 := func(dst **int32) error {
		v, err := strconv.ParseInt(value, 10, 32)
		if err != nil {
			return fmt.Errorf("%s: %q is not an integer", name, value)
		}
		n := int32(v)
		*dst = &n
		return nil
	}
	switch name {
	case "record_lock_duration_ms":
		return i32(&c.RecordLockDurationMs)
	case "delivery_count_limit":
		return i32(&c.DeliveryCountLimit)
	case "partition_max_record_locks":
		return i32(&c.PartitionMaxRecordLocks)
	case "session_timeout_ms":
		return i32(&c.SessionTimeoutMs)
	case "heartbeat_interval_ms":
		return i32(&c.HeartbeatIntervalMs)
	case "redelivery_backoff_initial_ms":
		return i32(&c.RedeliveryBackoffInitialMs)
	case "redelivery_backoff_max_ms":
		return i32(&c.RedeliveryBackoffMaxMs)
	case "redelivery_backoff_multiplier":
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", name, value)
		}
		c.RedeliveryBackoffMultiplier = &v
	case "auto_offset_reset":
		c.AutoOffsetReset = &value
	case "dead_letter_topic":
		c.DeadLetterTopic = &value
	case "ordering":
		var o sharelogv1.Ordering
		switch strings.ToLower(value) {
		case "none", "ordering_none":
			o = sharelogv1.Ordering_ORDERING_NONE
		case "key", "ordering_key":
			o = sharelogv1.Ordering_ORDERING_KEY
		default:
			return fmt.Errorf("ordering: %q is not none or key", value)
		}
		c.Ordering = &o
	case "isolation_level":
		var l sharelogv1.IsolationLevel
		switch strings.ToLower(value) {
		case "read_uncommitted", "isolation_level_read_uncommitted":
			l = sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
		case "read_committed", "isolation_level_read_committed":
			l = sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
		default:
			return fmt.Errorf("isolation_level: %q is not read_uncommitted or read_committed", value)
		}
		c.IsolationLevel = &l
	default:
		return fmt.Errorf("unknown share-group config %q (see sharelogctl share-groups config set --help)", name)
	}
	return nil
}

// printGroupConfig prints NAME VALUE lines, sorted by name.
func (a *app) printGroupConfig(c *sharelogv1.ShareGroupConfig) error {
	ord := "none"
	if c.GetOrdering() == sharelogv1.Ordering_ORDERING_KEY {
		ord = "key"
	}
	iso := "read_uncommitted"
	if c.GetIsolationLevel() == sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
		iso = "read_committed"
	}
	rows := map[string]string{
		"isolation_level":               iso,
		"record_lock_duration_ms":       strconv.Itoa(int(c.GetRecordLockDurationMs())),
		"delivery_count_limit":          strconv.Itoa(int(c.GetDeliveryCountLimit())),
		"partition_max_record_locks":    strconv.Itoa(int(c.GetPartitionMaxRecordLocks())),
		"auto_offset_reset":             c.GetAutoOffsetReset(),
		"session_timeout_ms":            strconv.Itoa(int(c.GetSessionTimeoutMs())),
		"heartbeat_interval_ms":         strconv.Itoa(int(c.GetHeartbeatIntervalMs())),
		"dead_letter_topic":             c.GetDeadLetterTopic(),
		"ordering":                      ord,
		"redelivery_backoff_initial_ms": strconv.Itoa(int(c.GetRedeliveryBackoffInitialMs())),
		"redelivery_backoff_max_ms":     strconv.Itoa(int(c.GetRedeliveryBackoffMaxMs())),
		"redelivery_backoff_multiplier": strconv.FormatFloat(c.GetRedeliveryBackoffMultiplier(), 'g', -1, 64),
	}
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v := rows[n]
		if v == "" {
			v = "-"
		}
		if _, err := fmt.Fprintf(a.stdout, "%-31s %s\n", n, v); err != nil {
			return err
		}
	}
	return nil
}
