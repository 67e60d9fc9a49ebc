package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[12] = handler{0, 4, (*Listener).handleHeartbeat} }

func (l *Listener) handleHeartbeat(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	err := l.requireGroup(ctx, authz.Read, req.Group)
	var gc *consumergroup.Coordinator
	if err == nil {
		gc, err = l.groupsOf(ctx)
	}
	if err == nil {
		err = gc.Heartbeat(ctx, consumergroup.HeartbeatRequest{Group: req.Group, Generation: req.Generation,
			MemberID: req.MemberID, InstanceID: req.InstanceID})
	}
	if err != nil {
		resp.ErrorCode, _ = l.requestError("heartbeat", err)
	}
	return resp, nil
}
