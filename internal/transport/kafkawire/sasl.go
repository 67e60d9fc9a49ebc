package kafkawire

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/principal"
)

// Authentication of a Kafka connection (docs/kafka.md "Security"):
//
//   - With TLS and --tls-client-ca, the verified client certificate names
//     the principal exactly as for gRPC (edge.CertPrincipal); a
//     certificate that names nobody is refused unless a SASL login may
//     still follow.
//   - With --auth-tokens-file, a connection not already authenticated by
//     its certificate may send only ApiVersions, SaslHandshake and
//     SaslAuthenticate until a SASL PLAIN login succeeds (username = the
//     principal's name, password = one of its tokens); anything else
//     closes it. A refused login answers SASL_AUTHENTICATION_FAILED and
//     closes the connection.
//   - A login holds for the session lifetime, which SaslAuthenticate v1+
//     tells the client (KIP-368): a request other than re-authentication
//     after it closes the connection. Re-authentication must name the same
//     principal. Removing the login's token from the tokens file closes
//     the connection at the reload that notices it.

// DefaultSASLSessionLifetime is the default --kafka-sasl-session-lifetime.
const DefaultSASLSessionLifetime = time.Hour

// The API keys of SASL; with ApiVersions the only ones an unauthenticated
// connection may send.
const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
	mechPlain           = "PLAIN"
)

var (
	errUnauthenticated = errors.New("a SASL login is required first (SaslHandshake + SaslAuthenticate)")
	errSessionExpired  = errors.New("the SASL session lifetime passed without re-authentication")
	errNoHandshake     = errors.New("SaslAuthenticate without a SaslHandshake before it")
)

// tokensEnabled reports whether SASL logins are served (and required).
func (l *Listener) tokensEnabled() bool { return l.cfg.Auth != nil && l.cfg.Auth.TokensEnabled() }

// addSASL serves SaslHandshake and SaslAuthenticate when there are tokens
// to log in with; without, they are not advertised and close the
// connection like any unserved key.
func (l *Listener) addSASL() {
	if !l.tokensEnabled() {
		return
	}
	l.handlers[saslHandshakeKey] = handler{0, 1, (*Listener).handleSaslHandshake}
	l.handlers[saslAuthenticateKey] = handler{0, 2, (*Listener).handleSaslAuthenticate}
}

// handshake completes the TLS handshake of a TLS connection (within the
// request timeout) and gives the connection its first principal: its
// certificate's, else none yet when a SASL login may follow, else
// anonymous without authentication. An error refuses the connection.
func (c *conn) handshake(ctx context.Context) error {
	var certUser string
	if tc, ok := c.nc.(*tls.Conn); ok {
		hctx, cancel := context.WithTimeout(ctx, c.l.cfg.RequestTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		st := tc.ConnectionState()
		certUser = edge.CertPrincipal(&st)
	}
	a := c.l.cfg.Auth
	switch {
	case a == nil || !a.Enabled():
		c.authed = true
	case certUser != "":
		c.user, c.authed = certUser, true
	case a.TokensEnabled():
		// A SASL login must follow.
	default:
		_, err := a.WithoutToken(certUser)
		return err
	}
	return nil
}

// withPrincipal is ctx carrying the connection's principal, when it has
// one, for authorization, audit and the per-principal shares.
func (c *conn) withPrincipal(ctx context.Context) context.Context {
	if c.user == "" {
		return ctx
	}
	return principal.WithName(principal.WithUser(ctx, c.user), c.user)
}

// admit refuses (closing the connection) a request the connection may not
// send yet: anything but ApiVersions and SASL before a login, or after the
// login's lifetime.
func (c *conn) admit(key int16) error {
	if key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey {
		return nil
	}
	if !c.authed {
		return fmt.Errorf("%s: %w", apiName(key), errUnauthenticated)
	}
	if !c.saslExpires.IsZero() && time.Now().After(c.saslExpires) {
		return fmt.Errorf("%s: %w", apiName(key), errSessionExpired)
	}
	return nil
}

// startSASL records a SaslHandshake for mech; it reports whether mech is
// served.
func (c *conn) startSASL(mech string, version int16) bool {
	if mech != mechPlain {
		c.saslMech, c.saslRaw = "", false
		return false
	}
	c.saslMech = mech
	c.saslRaw = version == 0
	return true
}

// login checks a PLAIN token (RFC 4616: authzid NUL authcid NUL passwd)
// and, on success, makes its principal the connection's, binds the
// connection to the token (closed when it is revoked) and starts the
// session lifetime. The error is what the client is told.
func (c *conn) login(token []byte) error {
	if c.saslMech != mechPlain {
		return errNoHandshake
	}
	c.saslMech = ""
	parts := bytes.Split(token, []byte{0})
	if len(parts) != 3 {
		return errors.New("malformed PLAIN token")
	}
	authz, name, pass := string(parts[0]), string(parts[1]), string(parts[2])
	if authz != "" && authz != name {
		return errors.New("authorization identity must be empty or the username")
	}
	user, sum, ok := c.l.cfg.Auth.Plain(name, pass)
	if !ok {
		return errors.New("authentication failed: unknown username or password")
	}
	if c.user != "" && c.saslExpires != (time.Time{}) && user != c.user {
		return errors.New("re-authentication must name the principal of the session")
	}
	if c.unbind == nil || sum != c.saslSum {
		if c.unbind != nil {
			c.unbind()
		}
		bound, release := c.l.cfg.Auth.BindToken(c.l.ctx, sum)
		stop := context.AfterFunc(bound, func() {
			if edge.TokenRevoked(bound) {
				c.l.logger.Info("kafka connection closed", "remote", c.nc.RemoteAddr().String(), "principal", user,
					"reason", "its SASL token was removed from the tokens file")
				c.nc.Close()
			}
		})
		c.unbind = func() { stop(); release() }
		c.saslSum = sum
	}
	c.user, c.authed = user, true
	c.saslExpires = time.Now().Add(c.l.cfg.SASLSessionLifetime)
	c.l.logger.Debug("kafka SASL login", "remote", c.nc.RemoteAddr().String(), "principal", user)
	return nil
}

// rawSASL handles the frame after a SaslHandshake v0: the bare PLAIN
// token, answered by an empty frame on success; a refused login closes
// the connection with no answer, as Kafka does.
func (c *conn) rawSASL(frame, out []byte) ([]byte, error) {
	c.saslRaw = false
	if err := c.login(frame); err != nil {
		return nil, fmt.Errorf("SASL login (v0): %w", err)
	}
	return append(out, 0, 0, 0, 0), nil
}
