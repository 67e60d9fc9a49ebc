package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[11] = handler{0, 9, (*Listener).handleJoinGroup} }

// handleJoinGroup waits in the coordinator until the member's rebalance
// completes; the connection serves nothing else meanwhile, as in Kafka.
func (l *Listener) handleJoinGroup(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.JoinGroupRequest)
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	if err := l.requireGroup(ctx, authz.Read, req.Group); err != nil {
		resp.ErrorCode, _ = l.requestError("join group", err)
		return resp, nil
	}
	jr := consumergroup.JoinRequest{Group: req.Group, MemberID: req.MemberID, InstanceID: req.InstanceID,
		ClientID: clientIDOf(c), ClientHost: clientHost(c), ProtocolType: req.ProtocolType,
		Topics:           subscribedTopics(req.ProtocolType, req.Protocols),
		SessionTimeout:   millis(req.SessionTimeoutMillis),
		RebalanceTimeout: millis(req.RebalanceTimeoutMillis), RequireKnownMemberID: req.Version >= 4}
	if req.Version == 0 {
		jr.RebalanceTimeout = jr.SessionTimeout
	}
	if req.Reason != nil {
		jr.Reason = *req.Reason
	}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, consumergroup.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	gc, err := l.groupsOf(ctx)
	var r consumergroup.JoinResponse
	if err == nil {
		r, err = gc.Join(ctx, jr)
	}
	if err != nil {
		code, _, cerr := l.groupErr(ctx, "join group", err)
		if cerr != nil {
			return nil, cerr
		}
		resp.ErrorCode = code
		if apierr.ReasonOf(err) == apierr.MemberIDRequired {
			resp.MemberID = r.MemberID
		}
		return resp, nil
	}
	resp.Generation, resp.LeaderID, resp.MemberID, resp.SkipAssignment = r.Generation, r.LeaderID, r.MemberID, r.SkipAssignment
	resp.ProtocolType, resp.Protocol = optString(r.ProtocolType), optString(r.Protocol)
	for _, m := range r.Members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.InstanceID, rm.ProtocolMetadata = m.MemberID, m.InstanceID, m.Metadata
		resp.Members = append(resp.Members, rm)
	}
	return resp, nil
}
