package kafkawire

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleSaslAuthenticate (v0–2) takes one message of a login (sasl.go):
// PLAIN's only one, or a round of SCRAM's exchange, answered with the
// server's message. A refused login answers SASL_AUTHENTICATION_FAILED
// and the connection closes; the answer completing a login tells the
// client (v1+) the session lifetime, after which it re-authenticates.
func (l *Listener) handleSaslAuthenticate(ctx context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if c.saslRaw {
		// A v0 handshake promised a bare token, not this request.
		c.saslRaw = false
		c.saslMech = ""
	}
	out, err := c.authenticate(ctx, req.SASLAuthBytes)
	if err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		if errors.Is(err, errNoHandshake) {
			resp.ErrorCode = kerr.IllegalSaslState.Code
		}
		msg := err.Error()
		resp.ErrorMessage = &msg
		c.closeAfter = true
		return resp, nil
	}
	resp.SASLAuthBytes = out
	if c.saslMech == "" { // the login is complete
		resp.SessionLifetimeMillis = l.cfg.SASLSessionLifetime.Milliseconds()
	}
	return resp, nil
}
