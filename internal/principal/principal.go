// Package principal carries the identity of the client behind a call in its
// context, so that domain packages can share capacities fairly between
// clients without importing the transport.
//
// Two values travel: User, the authenticated principal ("User:<name>" from
// a bearer token or a client certificate, User:ANONYMOUS without
// credentials; docs/principals.md), which authorization and share-group
// member binding use; and Name, the per-client limits key: the principal
// of an authenticated call, or "ip:<address>" of an anonymous client. The
// empty name means unknown: per-client limits do not apply to it.
package principal

import "context"

type key struct{}

// WithName returns ctx carrying the client identity name.
func WithName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, key{}, name)
}

// Name is the client identity carried by ctx, or "" when there is none.
func Name(ctx context.Context) string {
	n, _ := ctx.Value(key{}).(string)
	return n
}

// Anonymous is the principal of a call that carries no credentials.
const Anonymous = "User:ANONYMOUS"

type userKey struct{}

// WithUser returns ctx carrying the authenticated principal, "User:<name>"
// (the subject of authorization and of share-group member binding).
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// User is the authenticated principal carried by ctx, or Anonymous.
func User(ctx context.Context) string {
	if u, _ := ctx.Value(userKey{}).(string); u != "" {
		return u
	}
	return Anonymous
}
