package console_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/console"
)

func TestServesFilesWithPolicy(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("", console.Handler("/ui/")))
	defer srv.Close()
	for path, ctype := range map[string]string{
		"/ui/":                     "text/html; charset=utf-8",
		"/ui/app.js":               "text/javascript; charset=utf-8",
		"/ui/style.css":            "text/css; charset=utf-8",
		"/ui/vendor/uPlot.esm.js":  "text/javascript; charset=utf-8",
		"/ui/vendor/uPlot.min.css": "text/css; charset=utf-8",
	} {
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, http.StatusOK, res.StatusCode, path)
		assert.Equal(t, ctype, res.Header.Get("Content-Type"), path)
		assert.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'", path)
		assert.Contains(t, res.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
		assert.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), path)
		assert.NotEmpty(t, body, path)
	}
	res, err := http.Post(srv.URL+"/ui/", "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
	res, err = http.Get(srv.URL + "/ui/nope.js")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
}

// The vendored chart library is the published file, unchanged: its sums are
// the ones recorded in assets/vendor/README.md.
func TestVendoredFiles(t *testing.T) {
	readme, err := fs.ReadFile(console.Files, "vendor/README.md")
	require.NoError(t, err)
	want := map[string]string{
		"uPlot.esm.js":  "5dd9b3281aa64b461b42d9945f6adb2649d346502b12281a9ae0d46599a80eba",
		"uPlot.min.css": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
	}
	for name, sum := range want {
		b, err := fs.ReadFile(console.Files, "vendor/"+name)
		require.NoError(t, err)
		got := sha256.Sum256(b)
		assert.Equal(t, sum, hex.EncodeToString(got[:]), name)
		assert.Regexp(t, regexp.MustCompile("`"+regexp.QuoteMeta(name)+"` +"+sum), string(readme), "README records %s's sum", name)
	}
	_, err = fs.ReadFile(console.Files, "vendor/uPlot.LICENSE")
	assert.NoError(t, err)
}

// The pages reach the server only through api.js (the browser tests check
// that every request they make is a public /v1 route or a console file).
func TestOnlyAPIModuleFetches(t *testing.T) {
	n := 0
	err := fs.WalkDir(console.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") || strings.HasPrefix(p, "vendor/") {
			return err
		}
		b, err := fs.ReadFile(console.Files, p)
		if err != nil {
			return err
		}
		src := string(b)
		if p != "api.js" {
			assert.NotContains(t, src, "fetch(", "%s: only api.js calls fetch", p)
			assert.NotContains(t, src, "XMLHttpRequest", p)
			assert.NotContains(t, src, "WebSocket", p)
			assert.NotContains(t, src, "EventSource", p)
		}
		n++
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, n, 5, "the page modules were found")
}
