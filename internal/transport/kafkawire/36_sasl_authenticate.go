package kafkawire

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleSaslAuthenticate (v0–2) checks a login (sasl.go). A refused one
// answers SASL_AUTHENTICATION_FAILED and the connection closes; v1+ tells
// the client the session lifetime, after which it re-authenticates.
func (l *Listener) handleSaslAuthenticate(_ context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if c.saslRaw {
		// A v0 handshake promised a bare token, not this request.
		c.saslRaw = false
		c.saslMech = ""
	}
	if err := c.login(req.SASLAuthBytes); err != nil {
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		if errors.Is(err, errNoHandshake) {
			resp.ErrorCode = kerr.IllegalSaslState.Code
		}
		msg := err.Error()
		resp.ErrorMessage = &msg
		c.closeAfter = true
		return resp, nil
	}
	resp.SessionLifetimeMillis = l.cfg.SASLSessionLifetime.Milliseconds()
	return resp, nil
}
