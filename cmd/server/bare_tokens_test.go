package main

import (
	"context"
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

// Removing a line of the tokens file renumbers no bare token
// (docs/principals.md "Bare tokens"): the token of old line 3 stays
// User:token-3 with its ACL bindings after line 1 is removed and the file
// reloaded (SIGHUP), and after a restart; a new bare token on line 1 gets
// a name no token had before, never User:token-2 or User:token-3 (nor the
// removed token's User:token-1).
func TestBareTokensKeepTheirPrincipals(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "tokens")
	replace := func(content string) {
		tmp := filepath.Join(dir, "tokens.tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	replace("tok-one\ntok-two\ntok-three\nadmin tok-admin\n")
	args := []string{"--fsync", "never", "--auth-tokens-file", path, "--authorizer", "acl", "--super-users", "User:admin"}
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	produce := func(c *child, token string) codes.Code {
		ctx, cancel := context.WithTimeout(as(token), 5*time.Second)
		defer cancel()
		_, err := sharelogv1.NewLogServiceClient(c.conn).Produce(ctx, &sharelogv1.ProduceRequest{Topic: "orders",
			Records: []*sharelogv1.Record{{Value: []byte("v")}}})
		return status.Code(err)
	}
	// denials are the principals the audit log names for the refused
	// produces, in order (the log names principals, never tokens).
	denials := func(c *child) []string {
		var who []string
		for _, l := range c.logs.Tail(200) {
			if strings.Contains(l, `"msg":"authorization denied"`) && strings.Contains(l, `"resource":"orders"`) {
				_, rest, _ := strings.Cut(l, `"principal":"`)
				p, _, _ := strings.Cut(rest, `"`)
				who = append(who, p)
			}
		}
		return who
	}
	// refusedAs produces with token, requires PERMISSION_DENIED and
	// returns the principal the refusal was logged for.
	refusedAs := func(c *child, token string) string {
		t.Helper()
		before := len(denials(c))
		require.Equal(t, codes.PermissionDenied, produce(c, token))
		var who []string
		require.Eventually(t, func() bool { who = denials(c); return len(who) > before }, 5*time.Second, 20*time.Millisecond)
		return who[len(who)-1]
	}

	c := startChild(t, data, args...)
	_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(as("tok-admin"), &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
	require.NoError(t, err)
	_, err = sharelogv1.NewAclServiceClient(c.conn).CreateAcls(as("tok-admin"), &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{{
		Principal: "User:token-3", ResourceType: sharelogv1.ResourceType_RESOURCE_TYPE_TOPIC, PatternType: sharelogv1.PatternType_PATTERN_TYPE_LITERAL,
		ResourceName: "orders", Operation: sharelogv1.AclOperation_ACL_OPERATION_WRITE, Permission: sharelogv1.AclPermission_ACL_PERMISSION_ALLOW}}})
	require.NoError(t, err)
	require.Equal(t, codes.OK, produce(c, "tok-three"), "User:token-3 may write")
	assert.Equal(t, "User:token-2", refusedAs(c, "tok-two"))

	replace("tok-two\ntok-three\nadmin tok-admin\n") // line 1 removed
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return produce(c, "tok-one") == codes.Unauthenticated }, 10*time.Second, 20*time.Millisecond,
		"the removal takes effect")
	assert.Equal(t, codes.OK, produce(c, "tok-three"), "old line 3, now line 2: still User:token-3 with its binding")
	assert.Equal(t, "User:token-2", refusedAs(c, "tok-two"), "old line 2, now line 1: still User:token-2, not User:token-1")

	c.kill(t)
	c = startChild(t, data, args...)
	assert.Equal(t, codes.OK, produce(c, "tok-three"), "after a restart: still User:token-3")
	assert.Equal(t, "User:token-2", refusedAs(c, "tok-two"), "after a restart: still User:token-2")

	replace("tok-new\ntok-two\ntok-three\nadmin tok-admin\n") // a new bare token on line 1
	require.Eventually(t, func() bool { return produce(c, "tok-new") != codes.Unauthenticated }, 10*time.Second, 20*time.Millisecond,
		"the new token is accepted within the reload interval")
	who := refusedAs(c, "tok-new")
	assert.Equal(t, "User:token-4", who, "token-1, -2 and -3 were given before: the next free number above its line")
	var logged bool
	for _, l := range c.logs.Tail(200) {
		if strings.Contains(l, "a new bare token got a principal other than its line's") && strings.Contains(l, `"principal":"User:token-4"`) {
			logged = true
		}
	}
	assert.True(t, logged, "which name it got is logged")
	assert.Equal(t, codes.OK, produce(c, "tok-three"))

	raw, err := os.ReadFile(filepath.Join(data, "auth-principals.json"))
	require.NoError(t, err)
	for _, secret := range []string{"tok-one", "tok-two", "tok-three", "tok-new", "tok-admin"} {
		assert.NotContains(t, string(raw), secret, "the record holds SHA-256 sums only")
		for _, l := range c.logs.Tail(200) {
			assert.NotContains(t, l, secret, "tokens are never logged")
		}
	}
}
