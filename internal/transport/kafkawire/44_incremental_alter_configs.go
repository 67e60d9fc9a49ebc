package kafkawire

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

// handleIncrementalAlterConfigs sets share-group configs on GROUP resources
// through the same setter as the gRPC UpdateShareGroupConfig: all SET
// entries of a resource apply together or not at all. Only SET is served
// (a group config cannot be reset to its default here), and TOPIC configs
// are fixed at creation (the log store has no config update).
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
			fail(kerr.InvalidRequest.Code, "topic configs are set at creation and cannot be altered")
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
