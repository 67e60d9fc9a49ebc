package kafkawire

// The classic consumer-group APIs translate one to one to the
// consumergroup.Coordinator's calls (docs/consumer-groups.md); the
// handlers only check permissions, decode the "consumer" protocol's
// subscriptions and encode the answers.

import (
	"context"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/broker"
)

// groupHandlers are added by the consumer-group files when the listener
// has a coordinator.
var groupHandlers = map[int16]handler{}

// groupErr is a group call's request-level error: its code and message,
// or nil, err when the caller went away (the connection is closing).
func (l *Listener) groupErr(ctx context.Context, op string, err error) (int16, *string, error) {
	if ctx.Err() != nil && broker.ReasonOf(err) != apierr.Unavailable {
		return 0, nil, err
	}
	code, msg := l.requestError(op, err)
	return code, msg, nil
}

// clientHost is Kafka's client host of a member: "/" and the address.
func clientHost(c *conn) string {
	if c.nc == nil {
		return ""
	}
	if a, ok := c.nc.RemoteAddr().(*net.TCPAddr); ok {
		return "/" + a.IP.String()
	}
	return "/" + hostOf(c.nc.RemoteAddr())
}

// subscribedTopics decodes the topics of a "consumer" member's protocol
// metadata; nil when any of it does not decode (the coordinator then
// treats the subscription as unknown).
func subscribedTopics(protocolType string, protocols []kmsg.JoinGroupRequestProtocol) []string {
	if protocolType != "consumer" {
		return nil
	}
	seen := map[string]bool{}
	out := []string{}
	for _, p := range protocols {
		var m kmsg.ConsumerMemberMetadata
		if err := m.ReadFrom(p.Metadata); err != nil {
			return nil
		}
		for _, t := range m.Topics {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}

func millis(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

func clientIDOf(c *conn) string {
	if c.clientID == nil {
		return ""
	}
	return *c.clientID
}
