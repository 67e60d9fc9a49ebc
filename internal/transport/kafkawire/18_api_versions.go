package kafkawire

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (l *Listener) handleAPIVersions(_ context.Context, _ *conn, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = l.apiKeys()
	return resp, nil
}

// unsupportedAPIVersions answers an ApiVersions request of a version above
// ours as KIP-511 asks: a v0 response with UNSUPPORTED_VERSION and our
// range, so that the client retries at a version we speak.
func (l *Listener) unsupportedAPIVersions() kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	resp.ErrorCode = kerr.UnsupportedVersion.Code
	h := l.handlers[apiVersionsKey]
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: apiVersionsKey, MinVersion: h.min, MaxVersion: h.max}}
	return resp
}
