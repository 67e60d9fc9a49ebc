package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
)

const deleteGroupsKey = 42

// handleDeleteGroups deletes classic groups (with their committed offsets)
// and share groups (with their state), each needing DELETE on the group:
// GROUP_ID_NOT_FOUND if neither kind has it, NON_EMPTY_GROUP while it has
// members.
func (l *Listener) handleDeleteGroups(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = id
		err := l.requireGroup(ctx, authz.Delete, id)
		if err == nil {
			err = l.deleteGroup(ctx, id)
			l.cfg.Guard.Changed(ctx, "DeleteGroups", authz.Group, id, err)
		}
		if err != nil {
			rg.ErrorCode, _ = l.requestError("delete groups", err)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func (l *Listener) deleteGroup(ctx context.Context, id string) error {
	gc, err := l.groupsOf(ctx)
	if err == nil && gc.Has(id) {
		return gc.Delete(ctx, id)
	}
	if sh := l.shareOf(ctx); sh != nil && sh.HasGroup(id) {
		return sh.DeleteGroup(ctx, id)
	}
	if err != nil {
		return err // no consumer groups here (a standby): NOT_COORDINATOR
	}
	// Not a consumer group held here: in partitioned mode Delete answers
	// NOT_COORDINATOR for one coordinated elsewhere (and takes one with
	// offsets that nobody coordinates); GROUP_ID_NOT_FOUND when none has it.
	return gc.Delete(ctx, id)
}
