package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// consoleURL names the console on the startup line (issue 34, friction 6): a listener on
// every interface by localhost, TLS as https.
func TestConsoleURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/ui/",
		"0.0.0.0:8080":   "http://localhost:8080/ui/",
		"[::]:8080":      "http://localhost:8080/ui/",
		":8080":          "http://localhost:8080/ui/",
		"[::1]:8443":     "http://[::1]:8443/ui/",
		"nonsense":       "",
	} {
		assert.Equal(t, want, consoleURL(addr, false), addr)
	}
	assert.Equal(t, "https://localhost:8443/ui/", consoleURL("0.0.0.0:8443", true))
}
