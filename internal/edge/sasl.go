package edge

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
)

// Listeners whose protocol authenticates a connection once (the Kafka
// listener's SASL, docs/kafka.md "Security") rather than every call use
// Plain to check a login and BindToken to end the connection when a reload
// revokes its token, as revoke.go ends gRPC calls.

// Plain checks a SASL PLAIN login (RFC 4616) against the tokens file:
// username is the name of the principal ("alice" for User:alice,
// "token-3" for a bare token's User:token-3) and password one of its
// tokens. Every token is compared in constant time, and so is the name.
// It returns the principal and the SHA-256 of the token (to bind the
// connection to it); ok is false for anything else, the instance secret
// included: instances do not speak Kafka to each other.
func (a *Authenticator) Plain(username, password string) (user string, sum [sha256.Size]byte, ok bool) {
	if !a.TokensEnabled() {
		return "", sum, false
	}
	u, s, found := a.lookup(password)
	if !found || s == nil {
		return "", sum, false
	}
	if subtle.ConstantTimeCompare([]byte(u), []byte("User:"+username)) != 1 {
		return "", sum, false
	}
	return u, *s, true
}

// BindToken returns ctx ended when the token whose SHA-256 is sum leaves
// the tokens file (TokenRevoked then reports true), and the function that
// releases the binding; see revoke.go.
func (a *Authenticator) BindToken(ctx context.Context, sum [sha256.Size]byte) (context.Context, func()) {
	return a.bind(ctx, sum)
}

// TokenRevoked reports whether ctx (from BindToken) ended because its
// token was removed from the tokens file.
func TokenRevoked(ctx context.Context) bool { return revoked(ctx) }
