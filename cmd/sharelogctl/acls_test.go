package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	slserver "github.com/sharelog/sharelog/internal/app"
)

func TestACLsCommands(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("admin-token\nalice-token\n"), 0o600))
	srv := startServer(t, func(c *slserver.Config) {
		c.AuthTokensFile, c.Authorizer, c.SuperUsers = tokens, slserver.AuthorizerACL, []string{"User:token-1"}
	})
	admin := func(args ...string) cliResult { return srv.ctl("", append(args, "--token", "admin-token")...) }
	alice := func(args ...string) cliResult { return srv.ctl("x\n", append(args, "--token", "alice-token")...) }

	requireOK(t, admin("topics", "create", "orders.eu"))
	requireFailure(t, alice("topics", "describe", "orders.eu"), "TOPIC_AUTHORIZATION_FAILED")

	r := admin("acls", "add", "--allow-principal", "User:token-2", "--operation", "Describe", "--operation", "Write",
		"--topic", "orders.", "--resource-pattern-type", "prefixed")
	requireOK(t, r)
	assert.Contains(t, r.stdout, `added User:token-2 ALLOW DESCRIBE on PREFIXED TOPIC "orders."`)
	assert.Contains(t, r.stdout, `added User:token-2 ALLOW WRITE on PREFIXED TOPIC "orders."`)
	requireOK(t, admin("acls", "add", "--deny-principal", "User:token-2", "--operation", "Write", "--topic", "orders.eu"))
	requireOK(t, alice("topics", "describe", "orders.eu"))
	requireFailure(t, alice("produce", "orders.eu"), "TOPIC_AUTHORIZATION_FAILED")

	r = admin("acls", "list", "--topic", "orders.eu", "--resource-pattern-type", "match")
	requireOK(t, r)
	assert.Regexp(t, `User:token-2\s+ALLOW\s+DESCRIBE\s+TOPIC\s+PREFIXED\s+orders\.`, r.stdout)
	assert.Regexp(t, `User:token-2\s+DENY\s+WRITE\s+TOPIC\s+LITERAL\s+orders\.eu`, r.stdout)
	r = admin("acls", "list", "--principal", "User:nobody")
	requireOK(t, r)
	assert.NotContains(t, r.stdout, "token-2")
	requireFailure(t, alice("acls", "list"), "CLUSTER_AUTHORIZATION_FAILED")

	r = admin("acls", "remove", "--deny-principal", "User:token-2", "--topic", "orders.eu")
	requireOK(t, r)
	assert.Contains(t, r.stdout, `removed User:token-2 DENY WRITE on LITERAL TOPIC "orders.eu"`)
	requireOK(t, alice("produce", "orders.eu"))

	r = admin("acls", "add", "--allow-principal", "alice", "--topic", "t")
	requireFailure(t, r, "INVALID_REQUEST")
	assert.Contains(t, r.stderr, "principal must be User:")
	r = admin("acls", "add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "unknown operation")
	r = admin("acls", "remove")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "remove needs --topic")
}

// Operation names are read as kafka-acls.sh writes them, and enums print
// without their type prefix (UNSPECIFIED, a filter's wildcard, as ANY).
func TestACLNames(t *testing.T) {
	for _, s := range []string{"DescribeConfigs", "describe-configs", "DESCRIBE_CONFIGS"} {
		op, err := parseOperation(s)
		require.NoError(t, err, s)
		assert.Equal(t, sharelogv1.AclOperation_ACL_OPERATION_DESCRIBE_CONFIGS, op, s)
	}
	_, err := parseOperation("bogus")
	assert.ErrorContains(t, err, "unknown operation \"bogus\"")
	assert.Equal(t, "ANY", enumText(sharelogv1.PatternType_PATTERN_TYPE_UNSPECIFIED))
	assert.Equal(t, "PREFIXED", enumText(sharelogv1.PatternType_PATTERN_TYPE_PREFIXED))
	assert.Equal(t, "DENY", enumText(sharelogv1.AclPermission_ACL_PERMISSION_DENY))
	assert.Equal(t, "TOPIC", enumText(sharelogv1.ResourceType_RESOURCE_TYPE_TOPIC))
	assert.Equal(t, "READ", enumText(sharelogv1.AclOperation_ACL_OPERATION_READ))
}
