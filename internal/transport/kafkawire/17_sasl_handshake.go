package kafkawire

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleSaslHandshake (v0–1) selects the SASL mechanism; sasl.go has the
// rules. It lists the enabled mechanisms (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512); an unserved one answers UNSUPPORTED_SASL_MECHANISM and
// the connection closes.
func (l *Listener) handleSaslHandshake(_ context.Context, c *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = slices.Clone(l.cfg.SASLMechanisms)
	if !c.startSASL(req.Mechanism, req.GetVersion()) {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		c.closeAfter = true
	}
	return resp, nil
}
