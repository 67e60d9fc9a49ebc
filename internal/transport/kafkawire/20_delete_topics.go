package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// handleDeleteTopics deletes each topic (by name, or by id from v6) and
// tells OnTopicDeleted its id, as the gRPC DeleteTopic does, so that share
// groups drop their state of it.
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
		var info logstore.TopicInfo
		var err error
		if tg.name != nil {
			info, err = l.store.TopicInfo(ctx, *tg.name)
		} else {
			info, err = l.topicByID(ctx, tg.id)
		}
		if err == nil {
			name := info.Name
			rt.Topic, rt.TopicID = &name, topicID(info.ID)
			err = l.store.DeleteTopic(ctx, info.Name)
		}
		if err != nil {
			rt.ErrorCode = errorCode(err)
			msg := err.Error()
			rt.ErrorMessage = &msg
		} else if l.cfg.OnTopicDeleted != nil {
			l.cfg.OnTopicDeleted(info.ID)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
