package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	slserver "github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// TestUsersScramCommands: sharelogctl users scram set|list|delete against
// the real server: a user set from stdin logs in over Kafka with SCRAM,
// the list shows mechanisms and iterations, the bounds and permissions
// are the server's reasons, and a deleted user no longer logs in.
func TestUsersScramCommands(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("admin-token\nalice-token\n"), 0o600))
	srv := testsupport.Serve(t, func(c *slserver.Config) {
		c.AuthTokensFile, c.Authorizer, c.SuperUsers = tokens, slserver.AuthorizerACL, []string{"User:token-1"}
		c.KafkaAddr = "127.0.0.1:0"
	})
	s := &testServer{t: t, addr: srv.GRPCAddr()}
	admin := func(stdin string, args ...string) cliResult {
		return s.ctl(stdin, append(args, "--token", "admin-token")...)
	}
	login := func(user, pass string) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(srv.KafkaAddr()), kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}

	r := admin("p@ss word\n", "users", "scram", "set", "alice", "--password-stdin")
	requireOK(t, r)
	assert.Equal(t, "set SCRAM-SHA-512 credential of alice (8192 iterations)\n", r.stdout)
	requireOK(t, admin("", "users", "scram", "set", "alice", "--mechanism", "scram-sha-256", "--password", "other", "--iterations", "4096"))
	require.NoError(t, login("alice", "p@ss word"))

	r = admin("", "users", "scram", "list")
	requireOK(t, r)
	assert.Regexp(t, `USER\s+MECHANISM\s+ITERATIONS\nalice\s+SCRAM-SHA-256\s+4096\nalice\s+SCRAM-SHA-512\s+8192\n`, r.stdout)
	r = admin("", "users", "scram", "list", "-o", "json")
	requireOK(t, r)
	assert.JSONEq(t, `{"users":[{"name":"alice","credentials":[{"mechanism":"SCRAM-SHA-256","iterations":4096},{"mechanism":"SCRAM-SHA-512","iterations":8192}]}]}`, r.stdout)

	requireFailure(t, admin("", "users", "scram", "set", "bob", "--password", "x", "--iterations", "4095"), "UNACCEPTABLE_CREDENTIAL")
	requireFailure(t, admin("", "users", "scram", "set", "bob", "--password", "x", "--mechanism", "SCRAM-SHA-1"), "UNSUPPORTED_SASL_MECHANISM")
	requireFailure(t, s.ctl("", "users", "scram", "list", "--token", "alice-token"), "CLUSTER_AUTHORIZATION_FAILED")
	requireFailure(t, s.ctl("", "users", "scram", "set", "mallory", "--password", "x", "--token", "alice-token"), "CLUSTER_AUTHORIZATION_FAILED")
	r = admin("", "users", "scram", "set", "bob", "--password-stdin")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "stdin holds no password")
	r = admin("", "users", "scram", "set", "bob")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "exactly one of --password and --password-stdin")

	requireOK(t, admin("", "users", "scram", "delete", "alice", "--mechanism", "SCRAM-SHA-512"))
	requireFailure(t, admin("", "users", "scram", "delete", "alice", "--mechanism", "SCRAM-SHA-512"), "RESOURCE_NOT_FOUND")
	err := login("alice", "p@ss word")
	assert.True(t, errors.Is(err, kerr.SaslAuthenticationFailed), "%v", err)
	r = admin("", "users", "scram", "list")
	requireOK(t, r)
	assert.NotContains(t, r.stdout, "SCRAM-SHA-512")
	assert.NotContains(t, r.stdout, "mallory")
}
