package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootAndStartupLine: GET / sends a browser to the console, and the startup line names
// the console's URL and the trace exporter (issue 34, friction 6: GET / was a JSON 404 and
// the line named neither).
func TestRootAndStartupLine(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	c := startChild(t, t.TempDir(), "--fsync", "never")

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get("http://" + c.httpAddr + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusFound, resp.StatusCode)
	assert.Equal(t, "/ui/", resp.Header.Get("Location"))

	code, body := c.restJSON(t, http.MethodGet, "/nope", "")
	assert.Equal(t, http.StatusNotFound, code, "only / redirects: %s", body)

	var serving map[string]any
	for _, l := range c.startup {
		if l["msg"] == "sharelog serving" {
			serving = l
		}
	}
	require.NotNil(t, serving)
	assert.Equal(t, "http://"+c.httpAddr+"/ui/", serving["console"])
	assert.Equal(t, "otlp grpc http://127.0.0.1:1", serving["trace_exporter"])
}
