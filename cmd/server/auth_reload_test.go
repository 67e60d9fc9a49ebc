package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The tokens file is followed while the server runs: a replaced file takes
// effect without a restart (the new token works, the removed one is
// refused), and a bad file, reloaded on SIGHUP, keeps the tokens in force
// and is logged without any token.
func TestAuthTokensReloadWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	replace := func(content string) { // as an editor or a secret manager does: write aside, rename
		tmp := filepath.Join(dir, "tokens.tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	replace("alice old-token-1\n")
	c := startChild(t, t.TempDir(), "--fsync", "never", "--auth-tokens-file", path)
	client := sharelogv1.NewLogServiceClient(c.conn)
	call := func(token string) codes.Code {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token), 5*time.Second)
		defer cancel()
		_, err := client.ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
		return status.Code(err)
	}
	require.Equal(t, codes.OK, call("old-token-1"))
	require.Equal(t, codes.Unauthenticated, call("new-token-2"))

	replace("# rotated\nalice new-token-2\n")
	require.Eventually(t, func() bool { return call("new-token-2") == codes.OK }, 10*time.Second, 50*time.Millisecond,
		"the new token works without a restart")
	assert.Equal(t, codes.Unauthenticated, call("old-token-1"), "the removed token is refused")

	reported := func() int {
		n := 0
		for _, l := range c.logs.Tail(200) {
			if strings.Contains(l, "not reloaded") && strings.Contains(l, `"level":"ERROR"`) {
				n++
			}
		}
		return n
	}
	replace("alice new-token-2 stray-words\n")
	require.Eventually(t, func() bool { return reported() == 1 }, 10*time.Second, 50*time.Millisecond, "the bad file is reported")
	// Watching reports a problem once; SIGHUP re-reads and reports again.
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return reported() == 2 }, 10*time.Second, 50*time.Millisecond, "SIGHUP re-reads the file")
	assert.Equal(t, codes.OK, call("new-token-2"), "a bad file keeps the tokens in force")
	for _, l := range c.logs.Tail(200) {
		for _, secret := range []string{"old-token-1", "new-token-2", "stray-words"} {
			assert.NotContains(t, l, secret, "tokens are never logged")
		}
	}
	select {
	case err := <-c.exited:
		t.Fatalf("SIGHUP ended the server: %v", err)
	default:
	}
}

// --trusted-proxies has its environment variable, and a bad CIDR is
// refused at start naming the flag.
func TestTrustedProxiesFlag(t *testing.T) {
	env := map[string]string{"SHARELOG_TRUSTED_PROXIES": "10.0.0.0/8,192.168.0.1"}
	cfg, _, err := parseFlags(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.0/8,192.168.0.1", cfg.TrustedProxies)
	require.NoError(t, cfg.Validate())
	_, _, err = parseFlags([]string{"--trusted-proxies", "10.0.0.0/40"}, func(string) string { return "" }, io.Discard)
	assert.ErrorContains(t, err, "--trusted-proxies")
}
