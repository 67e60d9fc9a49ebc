package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
)

// handleDeleteTopics deletes each topic (by name, or by id from v6) through
// broker.Log.RemoveTopic, whose subscribers (share groups) drop their state
// of it, as for the gRPC DeleteTopic.
func (l *Listener) handleDeleteTopics(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if req.GetVersion() < 6 {
		for i := range req.TopicNames {
			targets = append(targets, target{name: &req.TopicNames[i]})
		}
	} else {
		for _, t := range req.Topics {
			targets = append(targets, target{name: t.Topic, id: t.TopicID})
		}
	}
	for _, tg := range targets {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = tg.name, tg.id
		name, err := "", error(nil)
		if tg.name != nil {
			name = *tg.name
		} else if info, ierr := l.topicByID(ctx, tg.id); ierr != nil {
			err = ierr
		} else {
			name = info.Name
			rt.Topic = &name
		}
		if err == nil {
			err = l.require(ctx, authz.Delete, authz.Topic, name)
		}
		if err == nil {
			info, derr := l.logOf(ctx).RemoveTopic(ctx, name)
			l.cfg.Guard.Changed(ctx, "DeleteTopic", authz.Topic, name, derr)
			if err = derr; err == nil {
				rt.Topic, rt.TopicID = &info.Name, topicID(info.ID)
			}
		}
		if err != nil {
			rt.ErrorCode = errorCode(err)
			msg := err.Error()
			rt.ErrorMessage = &msg
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
