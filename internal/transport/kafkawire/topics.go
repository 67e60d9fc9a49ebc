package kafkawire

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/sharelog/sharelog/internal/storage/logstore"
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
func (l *Listener) topicByID(ctx context.Context, id [16]byte) (logstore.TopicInfo, error) {
	if id == ([16]byte{}) {
		return logstore.TopicInfo{}, fmt.Errorf("%w: zero topic id", logstore.ErrUnknownTopic)
	}
	topics, err := l.store.Topics(ctx)
	if err != nil {
		return logstore.TopicInfo{}, err
	}
	for _, t := range topics {
		if topicID(t.ID) == id {
			return t, nil
		}
	}
	return logstore.TopicInfo{}, fmt.Errorf("%w: topic id %s", logstore.ErrUnknownTopic, uuid.UUID(id))
}
