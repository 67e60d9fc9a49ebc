package kafkawire

// Authorization of the Kafka APIs: every handler asks the same authz.Guard
// as the gRPC services, with the same permissions for the same operation
// (docs/kafka.md "Permissions", docs/security.md), and answers a refusal
// with Kafka's codes: TOPIC_AUTHORIZATION_FAILED (29) per topic or
// partition, GROUP_AUTHORIZATION_FAILED (30) per group,
// CLUSTER_AUTHORIZATION_FAILED (31) for the cluster.

import (
	"context"
	"fmt"

	"github.com/sharelog/sharelog/internal/sharegroup"

	"github.com/sharelog/sharelog/apierr"

	"github.com/sharelog/sharelog/internal/authz"
)

// require is Guard.Require: the authorization error (audited) unless the
// connection's principal may perform op on the resource.
func (l *Listener) require(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) error {
	return l.cfg.Guard.Require(ctx, op, rt, name)
}

// allowed is Guard.Allowed: the answer without an audit record.
func (l *Listener) allowed(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) bool {
	return l.cfg.Guard.Allowed(ctx, op, rt, name)
}

// topics is Guard.Topics: a per-request checker of op on topics that
// audits each denied topic once.
func (l *Listener) topics(op authz.Operation) *authz.TopicChecker {
	return l.cfg.Guard.Topics(op)
}

// requireCreate returns the (audited) authorization error unless the caller
// may create topic name: CREATE on the cluster or on the topic, as the gRPC
// CreateTopic requires.
func (l *Listener) requireCreate(ctx context.Context, name string) error {
	if l.allowed(ctx, authz.Create, authz.Cluster, authz.ClusterName) {
		return nil
	}
	return l.require(ctx, authz.Create, authz.Topic, name)
}

// mayAutoCreate reports whether an unknown topic named by Metadata or
// Produce may be auto-created: the same CREATE as CreateTopics. Without it
// the topic is looked up only (UNKNOWN_TOPIC_OR_PARTITION if it does not
// exist), as Kafka does; nothing is audited.
func (l *Listener) mayAutoCreate(ctx context.Context, name string) bool {
	return l.allowed(ctx, authz.Create, authz.Cluster, authz.ClusterName) || l.allowed(ctx, authz.Create, authz.Topic, name)
}

// topicGate is a per-request topic checker whose refusal is an error with
// the reason TOPIC_AUTHORIZATION_FAILED (errorCode: 29).
type topicGate struct {
	check *authz.TopicChecker
	op    authz.Operation
}

func (g topicGate) require(ctx context.Context, topic string) error {
	if g.check.Allowed(ctx, topic) {
		return nil
	}
	return apierr.New(apierr.TopicAuthorizationFailed, "not authorized to %s topic %q", g.op, topic)
}

// gate returns a topicGate of op for one request.
func (l *Listener) gate(op authz.Operation) topicGate {
	return topicGate{l.topics(op), op}
}

// codeErr is a per-item Kafka result as an error for the audit log (nil for
// code 0).
func codeErr(code int16, msg string) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("kafka error %d: %s", code, msg)
}

// requireDeadLetter is what the gRPC UpdateShareGroupConfig requires of a
// named dead-letter topic: the server appends to it on the group's behalf,
// so WRITE on it, and CREATE too when missing ones are created.
func (l *Listener) requireDeadLetter(ctx context.Context, c sharegroup.GroupConfig) error {
	if c.DeadLetterTopic == nil || *c.DeadLetterTopic == "" {
		return nil
	}
	t := *c.DeadLetterTopic
	if err := l.require(ctx, authz.Write, authz.Topic, t); err != nil {
		return err
	}
	if l.cfg.DLQAutoCreate {
		return l.requireCreate(ctx, t)
	}
	return nil
}

// requireGroup is READ (or op) on a share group: GROUP_AUTHORIZATION_FAILED
// otherwise (requestError: 30).
func (l *Listener) requireGroup(ctx context.Context, op authz.Operation, group string) error {
	return l.require(ctx, op, authz.Group, group)
}
