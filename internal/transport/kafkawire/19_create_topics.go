package kafkawire

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// maxPartitions is the partition count bound of CreateTopic over gRPC.
const maxPartitions = 10000

// handleCreateTopics creates each topic with the configs retention.ms,
// segment.bytes and cleanup.policy (any other config is INVALID_CONFIG).
// NumPartitions -1 takes --kafka-default-partitions; the replication
// factor must be -1 or 1 (a single node) and manual assignments are refused.
func (l *Listener) handleCreateTopics(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		code, msg := l.createTopic(ctx, t, req.ValidateOnly, &rt)
		if code != 0 {
			rt.ErrorCode, rt.ErrorMessage = code, &msg
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

func (l *Listener) createTopic(ctx context.Context, t kmsg.CreateTopicsRequestTopic, validateOnly bool, rt *kmsg.CreateTopicsResponseTopic) (int16, string) {
	parts := t.NumPartitions
	if parts == -1 {
		parts = l.cfg.DefaultPartitions
	}
	switch {
	case parts < 1 || parts > maxPartitions:
		return kerr.InvalidPartitions.Code, fmt.Sprintf("partitions must be between 1 and %d, got %d", maxPartitions, parts)
	case t.ReplicationFactor != -1 && t.ReplicationFactor != 1:
		return kerr.InvalidReplicationFactor.Code, fmt.Sprintf("replication factor must be 1 on a single node, got %d", t.ReplicationFactor)
	case len(t.ReplicaAssignment) > 0:
		return kerr.InvalidReplicaAssignment.Code, "manual replica assignment is not supported"
	}
	cfg := l.defaultTopicConfig()
	for _, c := range t.Configs {
		if c.Value == nil {
			continue
		}
		if err := setTopicConfig(&cfg, c.Name, *c.Value); err != nil {
			return kerr.InvalidConfig.Code, err.Error()
		}
	}
	if validateOnly {
		if _, err := l.store.TopicInfo(ctx, t.Topic); err == nil {
			return kerr.TopicAlreadyExists.Code, fmt.Sprintf("topic %q already exists", t.Topic)
		}
		rt.NumPartitions, rt.ReplicationFactor = parts, 1
		return 0, ""
	}
	info, err := l.store.CreateTopic(ctx, t.Topic, parts, cfg)
	if err != nil {
		code := errorCode(err)
		if errors.Is(err, logstore.ErrInvalidArgument) {
			// Configs and the partition count were checked above: what
			// the store refuses is the name.
			code = kerr.InvalidTopicException.Code
		}
		return code, err.Error()
	}
	rt.TopicID = topicID(info.ID)
	rt.NumPartitions, rt.ReplicationFactor = info.Partitions, 1
	for _, kv := range topicConfigs(info.Config) {
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		c.Name, c.Value = kv.name, &kv.value
		c.Source = kv.source
		rt.Configs = append(rt.Configs, c)
	}
	return 0, ""
}

// Topic config names served over Kafka (the same fields as the gRPC
// TopicConfig).
const (
	cfgRetentionMs   = "retention.ms"
	cfgSegmentBytes  = "segment.bytes"
	cfgCleanupPolicy = "cleanup.policy"
)

func setTopicConfig(cfg *logstore.TopicConfig, name, value string) error {
	switch name {
	case cfgRetentionMs:
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil || v < -1 {
			return fmt.Errorf("%s must be -1 or a non-negative integer, got %q", name, value)
		}
		cfg.RetentionMs = v
	case cfgSegmentBytes:
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil || v < logstore.MinSegmentBytes || v > logstore.MaxSegmentBytes {
			return fmt.Errorf("%s must be an integer in [%d, %d], got %q", name, logstore.MinSegmentBytes, logstore.MaxSegmentBytes, value)
		}
		cfg.SegmentBytes = v
	case cfgCleanupPolicy:
		switch value {
		case logstore.CleanupDelete, logstore.CleanupCompact, logstore.CleanupCompactDelete:
			cfg.CleanupPolicy = value
		case "delete,compact":
			cfg.CleanupPolicy = logstore.CleanupCompactDelete
		default:
			return fmt.Errorf("%s must be delete, compact or compact,delete, got %q", name, value)
		}
	default:
		return fmt.Errorf("config %q is not supported (supported: %s, %s, %s)", name, cfgRetentionMs, cfgSegmentBytes, cfgCleanupPolicy)
	}
	return nil
}

type configKV struct {
	name, value string
	source      int8
}

// topicConfigs lists a topic's configs as DescribeConfigs/CreateTopics show
// them (source 1: DYNAMIC_TOPIC_CONFIG).
func topicConfigs(c logstore.TopicConfig) []configKV {
	return []configKV{
		{cfgCleanupPolicy, c.CleanupPolicy, 1},
		{cfgRetentionMs, strconv.FormatInt(c.RetentionMs, 10), 1},
		{cfgSegmentBytes, strconv.FormatInt(c.SegmentBytes, 10), 1},
	}
}
