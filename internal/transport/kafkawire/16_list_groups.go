package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/sharegroup"
)

const listGroupsKey = 16

// handleListGroups lists the classic groups (type "classic") and the share
// groups (type "share"); there are no KIP-848 ("consumer") groups. The
// types filter (v5+) and the states filter (v4+) match case-insensitively.
// As Kafka, DESCRIBE on the cluster lists every group; otherwise a listing
// leaves out the groups the caller may not DESCRIBE.
func (l *Listener) handleListGroups(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	wants := func(typ, state string) bool {
		if len(req.TypesFilter) > 0 && !containsFold(req.TypesFilter, typ) {
			return false
		}
		return len(req.StatesFilter) == 0 || containsFold(req.StatesFilter, state)
	}
	all := l.allowed(ctx, authz.Describe, authz.Cluster, authz.ClusterName)
	visible := func(id string) bool { return all || l.allowed(ctx, authz.Describe, authz.Group, id) }
	add := func(id, protocolType, state, typ string) {
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = id, protocolType, state, typ
		resp.Groups = append(resp.Groups, rg)
	}
	if gc, err := l.groupsOf(ctx); err == nil {
		groups, err := gc.List(ctx)
		if err != nil {
			resp.ErrorCode, _ = l.requestError("list groups", err)
			return resp, nil
		}
		for _, g := range groups {
			if visible(g.Group) && wants(g.Type, g.StateName) {
				add(g.Group, g.ProtocolType, g.StateName, g.Type)
			}
		}
	}
	if sh := l.shareOf(ctx); sh != nil {
		groups, err := sh.ListGroups(ctx, sharegroup.StateUnknown)
		if err != nil {
			resp.ErrorCode, _ = l.requestError("list groups", err)
			return resp, nil
		}
		for _, g := range groups {
			if visible(g.GroupID) && wants("share", g.State.String()) {
				add(g.GroupID, "share", g.State.String(), "share")
			}
		}
	}
	return resp, nil
}
