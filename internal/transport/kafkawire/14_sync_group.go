package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[14] = handler{0, 5, (*Listener).handleSyncGroup} }

func (l *Listener) handleSyncGroup(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SyncGroupRequest)
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	if err := l.requireGroup(ctx, authz.Read, req.Group); err != nil {
		resp.ErrorCode, _ = l.requestError("sync group", err)
		return resp, nil
	}
	sr := consumergroup.SyncRequest{Group: req.Group, Generation: req.Generation, MemberID: req.MemberID,
		InstanceID: req.InstanceID, ProtocolType: req.ProtocolType, Protocol: req.Protocol}
	for _, a := range req.GroupAssignment {
		sr.Assignments = append(sr.Assignments, consumergroup.Assignment{MemberID: a.MemberID, Assignment: a.MemberAssignment})
	}
	gc, err := l.groupsOf(ctx)
	var r consumergroup.SyncResponse
	if err == nil {
		r, err = gc.Sync(ctx, sr)
	}
	if err != nil {
		code, _, cerr := l.groupErr(ctx, "sync group", err)
		if cerr != nil {
			return nil, cerr
		}
		resp.ErrorCode = code
		return resp, nil
	}
	resp.ProtocolType, resp.Protocol = optString(r.ProtocolType), optString(r.Protocol)
	resp.MemberAssignment = r.Assignment
	if resp.MemberAssignment == nil {
		resp.MemberAssignment = []byte{}
	}
	return resp, nil
}
