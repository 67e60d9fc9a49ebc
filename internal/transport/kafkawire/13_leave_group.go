package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[13] = handler{0, 5, (*Listener).handleLeaveGroup} }

// handleLeaveGroup serves both forms: one member id (v0–2, the error at
// the top) and the batch of members by id or instance id (v3+, an error
// per member).
func (l *Listener) handleLeaveGroup(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if err := l.requireGroup(ctx, authz.Read, req.Group); err != nil {
		resp.ErrorCode, _ = l.requestError("leave group", err)
		return resp, nil
	}
	var members []consumergroup.LeavingMember
	if req.Version < 3 {
		members = []consumergroup.LeavingMember{{MemberID: req.MemberID}}
	}
	for _, m := range req.Members {
		lm := consumergroup.LeavingMember{MemberID: m.MemberID, InstanceID: m.InstanceID}
		if m.Reason != nil {
			lm.Reason = *m.Reason
		}
		members = append(members, lm)
	}
	gc, err := l.groupsOf(ctx)
	var res []consumergroup.LeaveResult
	if err == nil {
		res, err = gc.Leave(ctx, req.Group, members)
	}
	if err != nil {
		resp.ErrorCode, _ = l.requestError("leave group", err)
		return resp, nil
	}
	if req.Version < 3 {
		resp.ErrorCode = groupErrorCode(res[0].Err)
		return resp, nil
	}
	for _, r := range res {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ErrorCode = r.MemberID, r.InstanceID, groupErrorCode(r.Err)
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
