package grpcapi

// Guard is the authorization every handler asks before it looks a resource
// up, so that a caller who may not DESCRIBE a topic or group gets the same
// answer whether it exists or not (docs/security.md has the table of
// permissions per RPC). It also writes the audit log: each denial, and each
// administrative change with its outcome.

import (
	"context"
	"log/slog"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/authz"
	"github.com/sharelog/sharelog/internal/principal"
)

// Guard checks permissions for the handlers. A nil *Guard allows
// everything and audits nothing.
type Guard struct {
	authz authz.Authorizer
	audit *authz.Audit
}

// NewGuard returns a Guard over a (nil = allow everything) writing to audit
// (nil = no audit log).
func NewGuard(a authz.Authorizer, audit *authz.Audit) *Guard {
	if a == nil {
		a = authz.AllowAll{}
	}
	return &Guard{authz: a, audit: audit}
}

// enforcing reports whether any call can be refused (--authorizer acl).
func (g *Guard) enforcing() bool {
	if g == nil {
		return false
	}
	_, all := g.authz.(authz.AllowAll)
	return !all
}

// allowed answers without auditing: for lists, which leave out what the
// caller may not see, and for per-partition checks audited by the caller.
func (g *Guard) allowed(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) bool {
	if g == nil {
		return true
	}
	return bool(g.authz.Authorize(ctx, principal.User(ctx), op, authz.Resource{Type: rt, Name: name}))
}

// require returns the authorization error of the resource type (and audits
// the denial) unless the caller may perform op on the resource.
func (g *Guard) require(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) error {
	if g.allowed(ctx, op, rt, name) {
		return nil
	}
	return g.denied(ctx, op, rt, name)
}

// Require is require for the server's plain HTTP endpoints (/metrics):
// nil if the caller (principal.User of ctx) may perform op on the
// resource, else the authorization error, audited.
func (g *Guard) Require(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) error {
	return g.require(ctx, op, rt, name)
}

// denied audits a denial and returns its request-level error.
func (g *Guard) denied(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) error {
	g.auditDenied(ctx, op, rt, name)
	switch rt {
	case authz.Topic:
		return apierr.New(apierr.TopicAuthorizationFailed, "not authorized to %s topic %q", op, name)
	case authz.Group:
		return apierr.New(apierr.GroupAuthorizationFailed, "not authorized to %s group %q", op, name)
	}
	return apierr.New(apierr.ClusterAuthorizationFailed, "not authorized to %s the cluster", op)
}

func (g *Guard) auditDenied(ctx context.Context, op authz.Operation, rt authz.ResourceType, name string) {
	if g != nil {
		g.audit.Denied(ctx, principal.User(ctx), op, authz.Resource{Type: rt, Name: name})
	}
}

// changed audits an administrative change and its outcome.
func (g *Guard) changed(ctx context.Context, action string, rt authz.ResourceType, name string, err error, detail ...slog.Attr) {
	if g != nil {
		g.audit.Change(ctx, principal.User(ctx), action, authz.Resource{Type: rt, Name: name}, err, detail...)
	}
}

// topicChecker answers the per-topic checks of one request, auditing each
// denied topic once. Entries of one topic usually come together, so it
// remembers the last answer; it allocates only for a second denied topic.
type topicChecker struct {
	g           *Guard
	op          authz.Operation
	last        string
	lastOK      bool
	have        bool
	firstDenied string // the first denied topic, audited
	anyDenied   bool
	denied      map[string]bool // further denied topics, audited
}

func (g *Guard) topics(op authz.Operation) *topicChecker {
	return &topicChecker{g: g, op: op}
}

func (c *topicChecker) allowed(ctx context.Context, topic string) bool {
	if c.g == nil {
		return true
	}
	if c.have && topic == c.last {
		return c.lastOK
	}
	ok := c.g.allowed(ctx, c.op, authz.Topic, topic)
	switch {
	case ok:
	case !c.anyDenied:
		c.g.auditDenied(ctx, c.op, authz.Topic, topic)
		c.firstDenied, c.anyDenied = topic, true
	case topic != c.firstDenied && !c.denied[topic]:
		c.g.auditDenied(ctx, c.op, authz.Topic, topic)
		if c.denied == nil {
			c.denied = map[string]bool{}
		}
		c.denied[topic] = true
	}
	c.last, c.lastOK, c.have = topic, ok, true
	return ok
}
