package kafkawire

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/sharelog/sharelog/internal/broker"
)

// topicID converts a sharelog topic id (a UUID string) to Kafka's 16 bytes.
func topicID(id string) [16]byte {
	u, err := uuid.Parse(id)
	if err != nil {
		return [16]byte{}
	}
	return u
}

// topicByID finds the topic whose id is id; ErrUnknownTopic if none.
func (l *Listener) topicByID(ctx context.Context, id [16]byte) (broker.TopicInfo, error) {
	if id == ([16]byte{}) {
		return broker.TopicInfo{}, fmt.Errorf("%w: zero topic id", broker.ErrUnknownTopic)
	}
	topics, err := l.logOf(ctx).Topics(ctx)
	if err != nil {
		return broker.TopicInfo{}, err
	}
	for _, t := range topics {
		if topicID(t.ID) == id {
			return t, nil
		}
	}
	return broker.TopicInfo{}, fmt.Errorf("%w: topic id %s", broker.ErrUnknownTopic, uuid.UUID(id))
}
