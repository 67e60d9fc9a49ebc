package httpgw

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The gateway's header allowlist.
func TestIncomingHeader(t *testing.T) {
	for key, want := range map[string]string{
		"traceparent": "traceparent", "Tracestate": "tracestate", "X-Request-Id": "x-request-id", "x-client-id": "x-client-id",
		"Grpc-Metadata-Authorization": "", "Grpc-Metadata-Sharelog-Client-Principal": "", "Grpc-Metadata-X-Forwarded-For": "",
		"X-Forwarded-For": "", "Cookie": "", "User-Agent": "", "Grpc-Timeout": "",
	} {
		got, ok := incomingHeader(key)
		assert.Equal(t, want, got, key)
		assert.Equal(t, want != "", ok, key)
	}
}
