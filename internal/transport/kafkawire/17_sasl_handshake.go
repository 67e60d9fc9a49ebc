package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleSaslHandshake (v0–1) selects the SASL mechanism; sasl.go has the
// rules. An unserved mechanism answers UNSUPPORTED_SASL_MECHANISM with the
// served ones, and the connection closes.
func (l *Listener) handleSaslHandshake(_ context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = []string{mechPlain}
	if !c.startSASL(req.Mechanism, req.GetVersion()) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		c.closeAfter = true
	}
	return resp, nil
}
