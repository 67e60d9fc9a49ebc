package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/consumergroup"
)

func init() { groupHandlers[15] = handler{0, 5, (*Listener).handleDescribeGroups} }

// handleDescribeGroups needs DESCRIBE on each group. An unknown group (or
// a share group, which ShareGroupDescribe describes) is Dead with no
// members, as Kafka answers these versions.
func (l *Listener) handleDescribeGroups(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		if err := l.requireGroup(ctx, authz.Describe, id); err != nil {
			rg.ErrorCode, _ = l.requestError("describe groups", err)
			rg.State = "Dead"
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		gc, err := l.groupsOf(ctx)
		var d consumergroup.GroupDescription
		if err == nil {
			d, err = gc.Describe(ctx, id)
		}
		if err != nil {
			rg.ErrorCode, _ = l.requestError("describe groups", err)
			rg.State = "Dead"
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.ProtocolType, rg.Protocol = d.State.String(), d.ProtocolType, d.Protocol
		for _, m := range d.Members {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.InstanceID, rm.ClientID, rm.ClientHost = m.MemberID, m.InstanceID, m.ClientID, m.ClientHost
			rm.ProtocolMetadata, rm.MemberAssignment = orEmpty(m.Metadata), orEmpty(m.Assignment)
			rg.Members = append(rg.Members, rm)
		}
		if req.IncludeAuthorizedOperations {
			rg.AuthorizedOperations = l.groupOperations(ctx, id)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// groupOperations is the bit set of Kafka's ACL operations the caller may
// perform on a group (READ 3, DELETE 6, DESCRIBE 8).
func (l *Listener) groupOperations(ctx context.Context, group string) int32 {
	var ops int32
	for op, bit := range map[authz.Operation]int32{authz.Read: 3, authz.Delete: 6, authz.Describe: 8} {
		if l.allowed(ctx, op, authz.Group, group) {
			ops |= 1 << bit
		}
	}
	return ops
}
