package dcpwire

// Authentication (docs/dcp.md "Security"), the Kafka listener's rules with
// memcached's SASL commands:
//
//   - With TLS and --tls-client-ca, a verified client certificate names the
//     principal (edge.CertPrincipal).
//   - With SASL mechanisms, a connection its certificate does not
//     authenticate may send only HELLO, NOOP, GET_ERROR_MAP and the SASL
//     commands until a login succeeds; anything else answers EACCESS.
//     PLAIN: username = the principal's name, password = one of its tokens
//     (edge.Authenticator.Plain, bound to the token: removing it from the
//     tokens file closes the connection). SCRAM-SHA256 / SCRAM-SHA512
//     (Couchbase's names for SCRAM-SHA-256/512): the Kafka listener's SCRAM
//     users (internal/users), principal User:<name>; SASL_AUTH carries the
//     client-first message and answers AUTH_CONTINUE with the server-first,
//     SASL_STEP the client-final and answers the server-final.
//   - A refused login answers AUTH_ERROR (0x20); the client may try again.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/couchbase/gocbcore/v10/memd"

	"github.com/sharelog/sharelog/internal/edge"
	"github.com/sharelog/sharelog/internal/principal"
	"github.com/sharelog/sharelog/internal/users"
)

const mechPlain = "PLAIN"

// Mechanisms are the mechanisms the listener can serve, in the Kafka
// listener's spelling (and its flag's).
var Mechanisms = append([]string{mechPlain}, users.Mechanisms...)

// wireMech is a mechanism's name on the memcached wire (Couchbase writes
// SCRAM-SHA512, without the second hyphen).
func wireMech(m string) string {
	if strings.HasPrefix(m, "SCRAM-SHA-") {
		return "SCRAM-SHA" + strings.TrimPrefix(m, "SCRAM-SHA-")
	}
	return m
}

// mechOf maps a wire name back to the served mechanism ("" if not served).
func (l *Listener) mechOf(wire string) string {
	for _, m := range l.cfg.SASLMechanisms {
		if wireMech(m) == wire || m == wire {
			return m
		}
	}
	return ""
}

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

// withPrincipal is ctx carrying the connection's principal, for
// authorization, audit and the per-principal share of change streams.
func (c *conn) withPrincipal(ctx context.Context) context.Context {
	if c.user == "" {
		return ctx
	}
	return principal.WithName(principal.WithUser(ctx, c.user), c.user)
}

// listMechs answers SASL_LIST_MECHS: the served mechanisms, strongest
// first, space-separated.
func (c *conn) listMechs(p *packet) error {
	if len(c.l.cfg.SASLMechanisms) == 0 {
		return c.fail(p, memd.StatusNotSupported, "SASL is not enabled on this listener")
	}
	var names []string
	for i := len(c.l.cfg.SASLMechanisms) - 1; i >= 0; i-- {
		names = append(names, wireMech(c.l.cfg.SASLMechanisms[i]))
	}
	slices.SortStableFunc(names, func(a, b string) int { return strings.Compare(b, a) }) // SCRAM-SHA512, SCRAM-SHA256, PLAIN
	return c.reply(p, memd.StatusSuccess, nil, nil, []byte(strings.Join(names, " ")))
}

// sasl answers SASL_AUTH and SASL_STEP.
func (c *conn) sasl(p *packet) error {
	mech := c.l.mechOf(string(p.key))
	if mech == "" {
		c.scram, c.saslMech = nil, ""
		return c.fail(p, memd.StatusAuthError, fmt.Sprintf("SASL mechanism %q is not served", p.key))
	}
	if p.opcode == memd.CmdSASLAuth {
		c.scram, c.saslMech = nil, mech
	} else if c.saslMech != mech || c.scram == nil {
		c.scram, c.saslMech = nil, ""
		return c.fail(p, memd.StatusAuthError, "SASL_STEP without a SASL_AUTH of the same mechanism")
	}
	if mech == mechPlain {
		c.saslMech = ""
		if err := c.loginPlain(p.value); err != nil {
			c.l.logger.Info("dcp SASL login refused", "remote", c.nc.RemoteAddr().String(), "mechanism", mech, "err", err)
			return c.fail(p, memd.StatusAuthError, "authentication failed")
		}
		return c.reply(p, memd.StatusSuccess, nil, nil, nil)
	}
	if c.scram == nil {
		login, err := c.l.cfg.Users.Start(c.ctx, mech)
		if err != nil {
			c.saslMech = ""
			return c.fail(p, memd.StatusAuthError, "authentication failed")
		}
		c.scram = login
	}
	out, err := c.scram.Step(p.value)
	if err != nil {
		c.scram, c.saslMech = nil, ""
		c.l.logger.Info("dcp SASL login refused", "remote", c.nc.RemoteAddr().String(), "mechanism", mech, "err", err)
		return c.fail(p, memd.StatusAuthError, "authentication failed")
	}
	if !c.scram.Done() {
		return c.reply(p, memd.StatusAuthContinue, nil, nil, out)
	}
	user := c.scram.User()
	c.scram, c.saslMech = nil, ""
	c.login(user, mech)
	if c.unbind != nil { // a PLAIN token no longer holds the connection
		c.unbind()
		c.unbind = nil
	}
	return c.reply(p, memd.StatusSuccess, nil, nil, out)
}

// login makes user the connection's principal.
func (c *conn) login(user, mech string) {
	c.user, c.authed = user, true
	c.l.logger.Debug("dcp SASL login", "remote", c.nc.RemoteAddr().String(), "principal", user, "mechanism", mech)
}

// loginPlain checks a PLAIN message (authzid NUL authcid NUL passwd) and
// binds the connection to its token.
func (c *conn) loginPlain(msg []byte) error {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return errors.New("malformed PLAIN message")
	}
	authzID, name, pass := string(parts[0]), string(parts[1]), string(parts[2])
	if authzID != "" && authzID != name {
		return errors.New("authorization identity must be empty or the username")
	}
	a := c.l.cfg.Auth
	user, sum, ok := a.Plain(name, pass)
	if !ok {
		return errors.New("unknown username or password")
	}
	c.login(user, mechPlain)
	if c.unbind != nil {
		c.unbind()
	}
	bound, release := a.BindToken(c.ctx, sum)
	stop := context.AfterFunc(bound, func() {
		if edge.TokenRevoked(bound) {
			c.l.logger.Info("dcp connection closed", "remote", c.nc.RemoteAddr().String(), "principal", user,
				"reason", "its SASL token was removed from the tokens file")
			c.nc.Close()
		}
	})
	c.unbind = func() { stop(); release() }
	return nil
}
