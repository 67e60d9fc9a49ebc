package kafkawire

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/principal"
	"github.com/sharelog/sharelog/internal/users"
)

// Authentication of a Kafka connection (docs/kafka.md "Security"):
//
//   - With TLS and --tls-client-ca, the verified client certificate names
//     the principal exactly as for gRPC (edge.CertPrincipal); a
//     certificate that names nobody is refused unless a SASL login may
//     still follow.
//   - With any SASL mechanism enabled (Config.SASLMechanisms), a
//     connection not already authenticated by its certificate may send
//     only ApiVersions, SaslHandshake and SaslAuthenticate until a login
//     succeeds; anything else closes it. PLAIN (with --auth-tokens-file):
//     username = the principal's name, password = one of its tokens.
//     SCRAM-SHA-256 and SCRAM-SHA-512 (internal/users): the users set
//     through the UserService or AlterUserScramCredentials, principal
//     User:<name>; the exchange takes two SaslAuthenticate rounds. A
//     refused login answers SASL_AUTHENTICATION_FAILED and closes the
//     connection.
//   - A login holds for the session lifetime, which SaslAuthenticate v1+
//     tells the client (KIP-368): a request other than re-authentication
//     after it closes the connection. Re-authentication must use the same
//     mechanism and name the same principal; it runs the whole exchange
//     again, so a deleted SCRAM user is refused then. Removing a PLAIN
//     login's token from the tokens file closes the connection at the
//     reload that notices it.

// DefaultSASLSessionLifetime is the default --kafka-sasl-session-lifetime.
const DefaultSASLSessionLifetime = time.Hour

// The API keys of SASL; with ApiVersions the only ones an unauthenticated
// connection may send.
const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
	mechPlain           = "PLAIN"
)

// Mechanisms lists the SASL mechanisms the listener can serve, in the
// order SaslHandshake lists them.
var Mechanisms = append([]string{mechPlain}, users.Mechanisms...)

var (
	errUnauthenticated = errors.New("a SASL login is required first (SaslHandshake + SaslAuthenticate)")
	errSessionExpired  = errors.New("the SASL session lifetime passed without re-authentication")
	errNoHandshake     = errors.New("SaslAuthenticate without a SaslHandshake before it")
)

// saslEnabled reports whether SASL logins are served (and required of a
// connection its certificate does not authenticate).
func (l *Listener) saslEnabled() bool { return len(l.cfg.SASLMechanisms) > 0 }

// checkMechanisms refuses a mechanism the listener cannot serve: PLAIN
// needs the tokens file, SCRAM the users.
func (cfg Config) checkMechanisms() error {
	for _, m := range cfg.SASLMechanisms {
		switch {
		case !slices.Contains(Mechanisms, m):
			return fmt.Errorf("SASL mechanism %q: the served ones are %s", m, strings.Join(Mechanisms, ", "))
		case m == mechPlain && (cfg.Auth == nil || !cfg.Auth.TokensEnabled()):
			return errors.New("SASL mechanism PLAIN needs --auth-tokens-file (the tokens are its passwords)")
		case m != mechPlain && cfg.Users == nil:
			return fmt.Errorf("SASL mechanism %s needs the SCRAM users", m)
		}
	}
	return nil
}

// addSASL serves SaslHandshake and SaslAuthenticate when a mechanism is
// enabled; without, they are not advertised and close the connection like
// any unserved key.
func (l *Listener) addSASL() {
	if !l.saslEnabled() {
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
	case certUser != "" && a != nil && a.ClientCerts():
		c.user, c.authed = certUser, true
	case c.l.saslEnabled():
		// A SASL login must follow.
	case a == nil || !a.Enabled():
		c.authed = true
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
	c.scram = nil
	if !slices.Contains(c.l.cfg.SASLMechanisms, mech) {
		c.saslMech, c.saslRaw = "", false
		return false
	}
	c.saslMech = mech
	c.saslRaw = version == 0
	return true
}

// authenticate takes one SASL message of the mechanism the handshake chose
// and returns the answer. The login is complete when c.saslMech is "" again
// after a nil error; a SCRAM exchange leaves it set between its rounds.
// The error is what the client is told; the login is then over.
func (c *conn) authenticate(ctx context.Context, msg []byte) ([]byte, error) {
	switch c.saslMech {
	case "":
		return nil, errNoHandshake
	case mechPlain:
		c.saslMech = ""
		return nil, c.loginPlain(msg)
	}
	if c.scram == nil {
		login, err := c.l.cfg.Users.Start(ctx, c.saslMech)
		if err != nil {
			c.saslMech = ""
			return nil, err
		}
		c.scram = login
	}
	out, err := c.scram.Step(msg)
	if err != nil {
		c.scram, c.saslMech = nil, ""
		return nil, err
	}
	if !c.scram.Done() {
		return out, nil
	}
	user, mech := c.scram.User(), c.saslMech
	c.scram, c.saslMech = nil, ""
	if err := c.session(user, mech); err != nil {
		return nil, err
	}
	if c.unbind != nil { // no token is involved any more
		c.unbind()
		c.unbind, c.saslSum = nil, [sha256.Size]byte{}
	}
	return out, nil
}

// session makes user the connection's principal after a login with mech
// and starts the session lifetime. Re-authentication must keep both.
func (c *conn) session(user, mech string) error {
	if c.user != "" && !c.saslExpires.IsZero() {
		if mech != c.loginMech {
			return fmt.Errorf("re-authentication must use the session's mechanism %s", c.loginMech)
		}
		if user != c.user {
			return errors.New("re-authentication must name the principal of the session")
		}
	}
	c.user, c.authed, c.loginMech = user, true, mech
	c.saslExpires = time.Now().Add(c.l.cfg.SASLSessionLifetime)
	c.l.logger.Debug("kafka SASL login", "remote", c.nc.RemoteAddr().String(), "principal", user, "mechanism", mech)
	return nil
}

// loginPlain checks a PLAIN token (RFC 4616: authzid NUL authcid NUL
// passwd) and, on success, makes its principal the connection's, binds the
// connection to the token (closed when it is revoked) and starts the
// session lifetime.
func (c *conn) loginPlain(token []byte) error {
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
	if err := c.session(user, mechPlain); err != nil {
		return err
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
	return nil
}

// rawSASL handles a frame after a SaslHandshake v0: a bare SASL message,
// answered by a bare frame (empty for PLAIN; SCRAM's messages otherwise,
// until the exchange ends); a refused login closes the connection with no
// answer, as Kafka does.
func (c *conn) rawSASL(ctx context.Context, frame, out []byte) ([]byte, error) {
	answer, err := c.authenticate(ctx, frame)
	if err != nil {
		c.saslRaw = false
		return nil, fmt.Errorf("SASL login (v0): %w", err)
	}
	c.saslRaw = c.saslMech != ""
	out = binary.BigEndian.AppendUint32(out, uint32(len(answer)))
	return append(out, answer...), nil
}
