package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// /readyz needs no credential, but with authentication on, its reasons
// (which name topics, groups and file errors) are shown only to a caller
// with one: an anonymous prober gets the status and no names.
func TestReadyzReasonsNeedCredentials(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("ops s3cret\n"), 0o600))
	s := newStack(t, app.Options{ReadinessChecks: []app.ReadinessCheck{{
		Service: sharelogv1.LogService_ServiceDesc.ServiceName,
		Check: func() (string, bool) {
			return "1 partition offline (KAFKA_STORAGE_ERROR): payroll.secret-0: open /data/payroll.secret-0/0.log: input/output error", false
		},
	}}}, func(c *app.Config) { c.AuthTokensFile = tokens })

	get := func(header ...string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, s.http.URL+"/readyz", nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := s.http.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}} {
		code, body := get(h...)
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Equal(t, "not ready (send a credential to see why)\n", body)
		assert.NotContains(t, body, "payroll", "no names without a credential (%v)", h)
		assert.NotContains(t, body, "/data", "no paths without a credential (%v)", h)
	}
	code, body := get("Authorization", "Bearer s3cret")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "payroll.secret-0", "a caller with a credential sees why")
}
