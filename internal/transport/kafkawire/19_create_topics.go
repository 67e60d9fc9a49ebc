package kafkawire

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// handleCreateTopics creates each topic through broker.Log.CreateTopic, so
// that its subscribers hear of it, with the configs the broker parses
// (broker.TopicSettings.SetConfig; any other config is INVALID_CONFIG).
// The answer (v5+) lists every config of the new topic with its source.
// NumPartitions -1 takes --kafka-default-partitions; the replication
// factor must be -1 or 1 (a single node) and manual assignments are refused.
func (l *Listener) handleCreateTopics(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		var code int16
		var msg string
		if err := l.requireCreate(ctx, t.Topic); err != nil {
			code, msg = errorCode(err), err.Error()
		} else {
			code, msg = l.createTopic(ctx, t, req.ValidateOnly, &rt)
			if !req.ValidateOnly {
				l.cfg.Guard.Changed(ctx, "CreateTopic", authz.Topic, t.Topic, codeErr(code, msg), slog.Int("partitions", int(rt.NumPartitions)))
			}
		}
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
	case t.ReplicationFactor != -1 && t.ReplicationFactor != 1:
		return kerr.InvalidReplicationFactor.Code, fmt.Sprintf("replication factor must be 1 on a single node, got %d", t.ReplicationFactor)
	case len(t.ReplicaAssignment) > 0:
		return kerr.InvalidReplicaAssignment.Code, "manual replica assignment is not supported"
	}
	var settings broker.TopicSettings
	for _, c := range t.Configs {
		if c.Value == nil {
			continue
		}
		if err := settings.SetConfig(c.Name, *c.Value); err != nil {
			return createTopicCode(err), err.Error()
		}
	}
	if validateOnly {
		if err := l.logOf(ctx).CheckNewTopic(ctx, t.Topic, parts, settings); err != nil {
			return createTopicCode(err), err.Error()
		}
		rt.NumPartitions, rt.ReplicationFactor = parts, 1
		return 0, ""
	}
	topic, err := l.logOf(ctx).CreateTopic(ctx, t.Topic, parts, settings)
	if err != nil {
		return createTopicCode(err), err.Error()
	}
	info := topic.Info
	rt.TopicID = topicID(info.ID)
	rt.NumPartitions, rt.ReplicationFactor = info.Partitions, 1
	for _, kv := range l.topicConfigs(ctx, info.Config) {
		c := kmsg.NewCreateTopicsResponseTopicConfig()
		c.Name, c.Value = kv.name, &kv.value
		c.Source = kv.source
		rt.Configs = append(rt.Configs, c)
	}
	return 0, ""
}

// createTopicCode is Kafka's code of a refused topic creation: the broker's
// faults (all INVALID_REQUEST) each have their own.
func createTopicCode(err error) int16 {
	if fault, ok := broker.FaultOf(err); ok {
		switch fault {
		case broker.FaultName:
			return kerr.InvalidTopicException.Code
		case broker.FaultPartitions:
			return kerr.InvalidPartitions.Code
		case broker.FaultConfig:
			return kerr.InvalidConfig.Code
		}
	}
	return errorCode(err)
}
