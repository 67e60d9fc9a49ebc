package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// Bindings are acknowledged only once saved: they survive a SIGKILL right
// after the answer, and a damaged file stops the next start, naming it.
func TestACLBindingsSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("admin-token\nuser-token\n"), 0o600))
	args := []string{"--fsync", "never", "--auth-tokens-file", tokens, "--authorizer", "acl", "--super-users", "User:token-1"}
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer admin-token")
	user := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer user-token")
	produce := func(c *child) error {
		_, err := sharelogv1.NewLogServiceClient(c.conn).Produce(user, &sharelogv1.ProduceRequest{Topic: "orders",
			Records: []*sharelogv1.Record{{Value: []byte("v")}}})
		return err
	}

	c := startChild(t, dir, args...)
	_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 1})
	require.NoError(t, err)
	assert.Equal(t, codes.PermissionDenied, status.Code(produce(c)))
	_, err = sharelogv1.NewAclServiceClient(c.conn).CreateAcls(admin, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{{
		Principal: "User:token-2", ResourceType: sharelogv1.ResourceType_RESOURCE_TYPE_TOPIC, PatternType: sharelogv1.PatternType_PATTERN_TYPE_LITERAL,
		ResourceName: "orders", Operation: sharelogv1.AclOperation_ACL_OPERATION_WRITE, Permission: sharelogv1.AclPermission_ACL_PERMISSION_ALLOW}}})
	require.NoError(t, err)
	c.kill(t) // right after the answer

	c = startChild(t, dir, args...)
	require.NoError(t, produce(c), "the binding survived the kill")
	d, err := sharelogv1.NewAclServiceClient(c.conn).DescribeAcls(admin, &sharelogv1.DescribeAclsRequest{})
	require.NoError(t, err)
	assert.Len(t, d.GetBindings(), 1)
	c.kill(t)

	// A damaged file: the server refuses to start and names it.
	path := filepath.Join(dir, "acls.json")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw[:len(raw)/2], 0o644))
	cfg, logCfg, err := parseFlags(append([]string{"--data-dir", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, args...),
		func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	log, err := newLogger(logCfg, io.Discard)
	require.NoError(t, err)
	srv, err := app.Start(context.Background(), cfg, log)
	if err == nil {
		srv.Close()
	}
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), path), "error names the file: %v", err)
}

func TestAuthorizerFlags(t *testing.T) {
	none := func(string) string { return "" }
	cfg, _, err := parseFlags(nil, none, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, app.AuthorizerNone, cfg.Authorizer)
	assert.Empty(t, cfg.SuperUsers)
	cfg, _, err = parseFlags([]string{"--authorizer", "acl", "--super-users", "User:a, User:b"}, none, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, app.AuthorizerACL, cfg.Authorizer)
	assert.Equal(t, []string{"User:a", "User:b"}, cfg.SuperUsers)
	env := map[string]string{"SHARELOG_AUTHORIZER": "acl", "SHARELOG_SUPER_USERS": "User:ops"}
	cfg, _, err = parseFlags(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, app.AuthorizerACL, cfg.Authorizer)
	assert.Equal(t, []string{"User:ops"}, cfg.SuperUsers)
}
