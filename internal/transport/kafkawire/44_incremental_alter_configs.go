package kafkawire

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/broker"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// handleIncrementalAlterConfigs alters TOPIC configs through
// broker.Log.AlterTopicConfigs (SET, DELETE back to the default, APPEND
// and SUBTRACT on cleanup.policy; all of a resource's changes or none;
// INVALID_CONFIG for an unknown name or a bad value; ALTER_CONFIGS on the
// topic) and sets share-group configs on GROUP resources through the same
// setter as the gRPC UpdateShareGroupConfig: all SET entries of a resource
// apply together or not at all. Only SET is served for groups (a group
// config cannot be reset to its default here).
func (l *Listener) handleIncrementalAlterConfigs(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, r := range req.Resources {
		rr := kmsg.NewIncrementalAlterConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		fail := func(code int16, format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			rr.ErrorCode, rr.ErrorMessage = code, &msg
		}
		switch {
		case r.ResourceType == kmsg.ConfigResourceTypeTopic:
			if err := l.require(ctx, authz.AlterConfigs, authz.Topic, r.ResourceName); err != nil {
				rr.ErrorCode, rr.ErrorMessage = l.requestError("alter configs", err)
				break
			}
			changes := make([]broker.ConfigChange, len(r.Configs))
			for i, e := range r.Configs {
				changes[i] = broker.ConfigChange{Name: e.Name, Op: broker.ConfigOp(e.Op)}
				if e.Value != nil {
					changes[i].Value = *e.Value
				}
			}
			_, err := l.logOf(ctx).AlterTopicConfigs(ctx, r.ResourceName, changes, req.ValidateOnly)
			if !req.ValidateOnly {
				l.cfg.Guard.Changed(ctx, "AlterTopicConfigs", authz.Topic, r.ResourceName, err)
			}
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = topicAlterError(err)
			}
		case r.ResourceType != kmsg.ConfigResourceTypeGroupConfig || l.shareOf(ctx) == nil:
			fail(kerr.InvalidRequest.Code, "only GROUP resources can be altered")
		case l.requireGroup(ctx, authz.AlterConfigs, r.ResourceName) != nil:
			rr.ErrorCode, rr.ErrorMessage = kerr.GroupAuthorizationFailed.Code, nil
		case req.ValidateOnly:
			fail(kerr.InvalidRequest.Code, "validate_only is not supported for GROUP resources")
		default:
			var c sharegroup.GroupConfig
			var bad error
			for _, e := range r.Configs {
				switch {
				case e.Op != kmsg.IncrementalAlterConfigOpSet:
					bad = fmt.Errorf("%s: only SET is supported, got operation %d", e.Name, e.Op)
				case e.Value == nil:
					bad = fmt.Errorf("%s: SET needs a value", e.Name)
				default:
					bad = setGroupConfig(&c, e.Name, *e.Value)
				}
				if bad != nil {
					break
				}
			}
			if bad != nil {
				fail(kerr.InvalidConfig.Code, "%v", bad)
				break
			}
			if err := l.requireDeadLetter(ctx, c); err != nil {
				rr.ErrorCode, rr.ErrorMessage = l.requestError("alter group config", err)
				break
			}
			_, err := l.shareOf(ctx).UpdateConfig(ctx, r.ResourceName, c)
			l.cfg.Guard.Changed(ctx, "UpdateShareGroupConfig", authz.Group, r.ResourceName, err)
			if err != nil {
				rr.ErrorCode, rr.ErrorMessage = l.requestError("alter group config", err)
				if rr.ErrorCode == kerr.InvalidRequest.Code {
					rr.ErrorCode = kerr.InvalidConfig.Code
				}
			}
		}
		resp.Resources = append(resp.Resources, rr)
	}
	return resp, nil
}

// topicAlterError is the Kafka code and message of a refused alteration of
// a topic: the broker's faults have Kafka's own codes (createTopicCode),
// the rest their reason's.
func topicAlterError(err error) (int16, *string) {
	msg := err.Error()
	if e := broker.ErrorOf(err); e != nil && e.Message != "" {
		msg = e.Message
	}
	return createTopicCode(err), &msg
}
