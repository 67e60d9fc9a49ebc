package authz

// Guard is the authorization every transport asks before it looks a
// resource up, so that a caller who may not DESCRIBE a topic or group gets
// the same answer whether it exists or not, over gRPC, REST, Kafka or any
// later listener (docs/security.md has the table of permissions per RPC).
// It also writes the audit log: each denial, and each administrative change
// with its outcome.

import (
	"context"
	"log/slog"
	"strings"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/principal"
)

// Guard checks permissions for the handlers. A nil *Guard allows
// everything and audits nothing.
type Guard struct {
	authz Authorizer
	audit *Audit
}

// NewGuard returns a Guard over a (nil = allow everything) writing to audit
// (nil = no audit log).
func NewGuard(a Authorizer, audit *Audit) *Guard {
	if a == nil {
		a = AllowAll{}
	}
	return &Guard{authz: a, audit: audit}
}

// Enforcing reports whether any call can be refused (--authorizer acl).
func (g *Guard) Enforcing() bool {
	if g == nil {
		return false
	}
	_, all := g.authz.(AllowAll)
	return !all
}

// Allowed answers without auditing: for lists, which leave out what the
// caller may not see, and for per-partition checks audited by the caller.
func (g *Guard) Allowed(ctx context.Context, op Operation, rt ResourceType, name string) bool {
	if g == nil {
		return true
	}
	return bool(g.authz.Authorize(ctx, principal.User(ctx), op, Resource{Type: rt, Name: name}))
}

// Require returns the authorization error of the resource type (and audits
// the denial) unless the caller may perform op on the resource.
func (g *Guard) Require(ctx context.Context, op Operation, rt ResourceType, name string) error {
	if g.Allowed(ctx, op, rt, name) {
		return nil
	}
	return g.denied(ctx, op, rt, name)
}

// AllowedOnAny answers, without auditing, whether the caller may perform
// op on at least one resource of type rt (Authorizer.AuthorizeAny).
func (g *Guard) AllowedOnAny(ctx context.Context, op Operation, rt ResourceType) bool {
	if g == nil {
		return true
	}
	return bool(g.authz.AuthorizeAny(ctx, principal.User(ctx), op, rt))
}

// RequireOnAny returns CLUSTER_AUTHORIZATION_FAILED (and audits the denial,
// on the resource "*" of type rt) unless the caller may perform op on at
// least one resource of type rt: as Kafka answers an idempotent
// producer's InitProducerId without WRITE on any topic.
func (g *Guard) RequireOnAny(ctx context.Context, op Operation, rt ResourceType) error {
	if g.AllowedOnAny(ctx, op, rt) {
		return nil
	}
	g.auditDenied(ctx, op, rt, Wildcard)
	return apierr.New(apierr.ClusterAuthorizationFailed, "not authorized to %s any %s", op, strings.ToLower(rt.String()))
}

// denied audits a denial and returns its request-level error.
func (g *Guard) denied(ctx context.Context, op Operation, rt ResourceType, name string) error {
	g.auditDenied(ctx, op, rt, name)
	switch rt {
	case Topic:
		return apierr.New(apierr.TopicAuthorizationFailed, "not authorized to %s topic %q", op, name)
	case Group:
		return apierr.New(apierr.GroupAuthorizationFailed, "not authorized to %s group %q", op, name)
	case TransactionalID:
		return apierr.New(apierr.TransactionalIDAuthorizationFailed, "not authorized to %s transactional id %q", op, name)
	}
	return apierr.New(apierr.ClusterAuthorizationFailed, "not authorized to %s the cluster", op)
}

func (g *Guard) auditDenied(ctx context.Context, op Operation, rt ResourceType, name string) {
	if g != nil {
		g.audit.Denied(ctx, principal.User(ctx), op, Resource{Type: rt, Name: name})
	}
}

// Changed audits an administrative change and its outcome.
func (g *Guard) Changed(ctx context.Context, action string, rt ResourceType, name string, err error, detail ...slog.Attr) {
	if g != nil {
		g.audit.Change(ctx, principal.User(ctx), action, Resource{Type: rt, Name: name}, err, detail...)
	}
}

// TopicChecker answers the per-topic checks of one request, auditing each
// denied topic once. Entries of one topic usually come together, so it
// remembers the last answer; it allocates only for a second denied topic.
type TopicChecker struct {
	g           *Guard
	op          Operation
	last        string
	lastOK      bool
	have        bool
	firstDenied string // the first denied topic, audited
	anyDenied   bool
	denied      map[string]bool // further denied topics, audited
}

// Topics returns a checker of op on the topics of one request.
func (g *Guard) Topics(op Operation) *TopicChecker {
	return &TopicChecker{g: g, op: op}
}

// Allowed reports whether the caller may perform the checker's operation
// on topic, auditing a denied topic once per request.
func (c *TopicChecker) Allowed(ctx context.Context, topic string) bool {
	if c.g == nil {
		return true
	}
	if c.have && topic == c.last {
		return c.lastOK
	}
	ok := c.g.Allowed(ctx, c.op, Topic, topic)
	switch {
	case ok:
	case !c.anyDenied:
		c.g.auditDenied(ctx, c.op, Topic, topic)
		c.firstDenied, c.anyDenied = topic, true
	case topic != c.firstDenied && !c.denied[topic]:
		c.g.auditDenied(ctx, c.op, Topic, topic)
		if c.denied == nil {
			c.denied = map[string]bool{}
		}
		c.denied[topic] = true
	}
	c.last, c.lastOK, c.have = topic, ok, true
	return ok
}
