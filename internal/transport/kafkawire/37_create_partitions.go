package kafkawire

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/internal/authz"
)

// handleCreatePartitions grows each topic to its Count partitions (the new
// total) through broker.Log.CreatePartitions, as the gRPC
// LogService.CreatePartitions does:
//   - ALTER on the topic, checked before its existence:
//     TOPIC_AUTHORIZATION_FAILED;
//   - an unknown topic: UNKNOWN_TOPIC_OR_PARTITION;
//   - a count that does not grow the topic (or exceeds 10000):
//     INVALID_PARTITIONS, with Kafka's message;
//   - a manual assignment: INVALID_REPLICA_ASSIGNMENT (one replica, the
//     server's own);
//   - a topic named twice in one request: INVALID_REQUEST for each, as
//     Kafka;
//   - beyond --max-partitions: POLICY_VIOLATION;
//   - validate_only: every check, no change.
//
// The new partitions are empty; producers and consumers see them at their
// next metadata refresh, share and consumer groups at their next
// assignment.
func (l *Listener) handleCreatePartitions(ctx context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	named := map[string]int{}
	for _, t := range req.Topics {
		named[t.Topic]++
	}
	for _, t := range req.Topics {
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		fail := func(code int16, msg string) { rt.ErrorCode, rt.ErrorMessage = code, &msg }
		switch {
		case named[t.Topic] > 1:
			fail(kerr.InvalidRequest.Code, "the topic is named more than once in the request")
		case l.require(ctx, authz.Alter, authz.Topic, t.Topic) != nil:
			fail(kerr.TopicAuthorizationFailed.Code, "not authorized to ALTER topic "+t.Topic)
		case len(t.Assignment) > 0:
			fail(kerr.InvalidReplicaAssignment.Code, "manual replica assignment is not supported")
		default:
			info, err := l.logOf(ctx).CreatePartitions(ctx, t.Topic, t.Count, req.ValidateOnly)
			if !req.ValidateOnly {
				l.cfg.Guard.Changed(ctx, "CreatePartitions", authz.Topic, t.Topic, err, slog.Int("count", int(t.Count)))
			}
			if err != nil {
				rt.ErrorCode, rt.ErrorMessage = topicAlterError(err)
				break
			}
			if !req.ValidateOnly {
				l.logger.Info("kafka added partitions", "topic", t.Topic, "partitions", info.Partitions)
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}
