package kafkawire

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
)

// handleAlterConfigs replaces a TOPIC's configs (Kafka's legacy,
// non-incremental AlterConfigs; broker.Log.ReplaceTopicConfigs): the
// configs named become the topic's, every other one takes its default
// again, all or none; INVALID_CONFIG for an unknown name, a null or bad
// value. ALTER_CONFIGS on the topic, checked before its existence. GROUP
// and BROKER resources are INVALID_REQUEST: share-group configs are
// altered incrementally (IncrementalAlterConfigs).
func (l *Listener) handleAlterConfigs(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, r := range req.Resources {
		rr := kmsg.NewAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		fail := func(code int16, format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			rr.ErrorCode, rr.ErrorMessage = code, &msg
		}
		switch {
		case r.ResourceType != kmsg.ConfigResourceTypeTopic:
			fail(kerr.InvalidRequest.Code, "only TOPIC resources can be altered with AlterConfigs; use IncrementalAlterConfigs for GROUP resources")
		default:
			if err := l.require(ctx, authz.AlterConfigs, authz.Topic, r.ResourceName); err != nil {
				rr.ErrorCode, rr.ErrorMessage = l.requestError("alter configs", err)
				break
			}
			var configs []broker.ConfigEntry
			var bad string
			for _, c := range r.Configs {
				if c.Value == nil {
					bad = c.Name
					break
				}
				configs = append(configs, broker.ConfigEntry{Name: c.Name, Value: *c.Value})
			}
			if bad != "" {
				fail(kerr.InvalidConfig.Code, "%s: a null value; AlterConfigs resets a config by leaving it out", bad)
				break
			}
			_, err := l.logOf(ctx).ReplaceTopicConfigs(ctx, r.ResourceName, configs, req.ValidateOnly)
			if !req.ValidateOnly {
				l.cfg.Guard.Changed(ctx, "AlterTopicConfigs", authz.Topic, r.ResourceName, err)
			}
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = topicAlterError(err)
			}
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}
