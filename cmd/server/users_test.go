package main

import (
	"context"
	"crypto/pbkdf2"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// restJSON sends a request to the child's REST gateway and returns the
// status and the body.
func (c *child) restJSON(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.httpAddr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw)
}

// TestUserServiceSCRAMOnly: the UserService over REST and gRPC with SCRAM
// as the Kafka listener's only mechanism and no tokens file at all (SCRAM
// users exist independently of tokens, as in Kafka): a user set over
// REST logs in over Kafka, one set from a salted password over gRPC too;
// an unauthenticated Kafka request closes the connection; the REST
// routes answer the reasons of docs/errors.md.
func TestUserServiceSCRAMOnly(t *testing.T) {
	c := startChild(t, t.TempDir(), "--kafka-addr", "127.0.0.1:0", "--kafka-sasl-mechanisms", "SCRAM-SHA-512,SCRAM-SHA-256")
	addr := c.kafkaAddr(t)
	ping := func(m kgo.Opt) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), m)
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}

	code, body := c.restJSON(t, http.MethodPost, "/v1/users/alice/scram", `{"mechanism":"SCRAM-SHA-256","password":"rest-pw","iterations":4096}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.JSONEq(t, `{"user":{"name":"alice","credentials":[{"mechanism":"SCRAM-SHA-256","iterations":4096}]}}`, body)
	require.NoError(t, ping(kgo.SASL(scram.Auth{User: "alice", Pass: "rest-pw"}.AsSha256Mechanism())))
	err := ping(kgo.SASL(scram.Auth{User: "alice", Pass: "nope"}.AsSha256Mechanism()))
	require.True(t, errors.Is(err, kerr.SaslAuthenticationFailed), "%v", err)

	users := sharelogv1.NewUserServiceClient(c.conn)
	ctx := context.Background()
	salt := []byte("a salt for bob")
	salted, err := pbkdf2.Key(sha512.New, "grpc-pw", salt, 8192, sha512.Size)
	require.NoError(t, err)
	set, err := users.SetScramCredential(ctx, &sharelogv1.SetScramCredentialRequest{User: "bob", Mechanism: "SCRAM-SHA-512",
		Secret: &sharelogv1.SetScramCredentialRequest_Salted{Salted: &sharelogv1.SaltedPassword{Salt: salt, SaltedPassword: salted}}})
	require.NoError(t, err)
	assert.Equal(t, int32(8192), set.GetUser().GetCredentials()[0].GetIterations(), "iterations default to 8192")
	require.NoError(t, ping(kgo.SASL(scram.Auth{User: "bob", Pass: "grpc-pw"}.AsSha512Mechanism())))

	list, err := users.ListUsers(ctx, &sharelogv1.ListUsersRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetUsers(), 2)
	assert.Equal(t, "alice", list.GetUsers()[0].GetName())
	code, body = c.restJSON(t, http.MethodGet, "/v1/users", "")
	require.Equal(t, http.StatusOK, code)
	var listed struct {
		Users []map[string]any `json:"users"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &listed))
	require.Len(t, listed.Users, 2)
	for _, u := range listed.Users {
		assert.ElementsMatch(t, []string{"name", "credentials"}, keys(u), "a listed user has no salt or key: %v", u)
	}

	// Unauthenticated: ApiVersions is answered, Metadata closes.
	kc := dialKafka(t, addr)
	kc.do(apiVersions())
	_, err = kafkaRoundTrip(kc.nc, metadataReq(), 9)
	require.Error(t, err, "an unauthenticated Metadata request was answered")

	// Only the configured mechanisms are served: PLAIN is refused.
	kc = dialKafka(t, addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	hr := kc.do(hs).(*kmsg.SASLHandshakeResponse)
	assert.Equal(t, kerr.UnsupportedSaslMechanism.Code, hr.ErrorCode)
	assert.Equal(t, []string{"SCRAM-SHA-512", "SCRAM-SHA-256"}, hr.SupportedMechanisms)
	closedWithin(t, kc.nc, time.Now(), 5*time.Second)

	for _, tc := range []struct {
		method, path, body string
		code               int
		reason             string
	}{
		{http.MethodPost, "/v1/users/carol/scram", `{"mechanism":"SCRAM-SHA-256","password":"x","iterations":1000}`, 400, "UNACCEPTABLE_CREDENTIAL"},
		{http.MethodPost, "/v1/users/carol/scram", `{"mechanism":"PLAIN","password":"x"}`, 400, "UNSUPPORTED_SASL_MECHANISM"},
		{http.MethodPost, "/v1/users/carol/scram", `{"mechanism":"SCRAM-SHA-256"}`, 400, "INVALID_REQUEST"},
		{http.MethodDelete, "/v1/users/carol/scram/SCRAM-SHA-256", "", 404, "RESOURCE_NOT_FOUND"},
		{http.MethodDelete, "/v1/users/alice/scram/SCRAM-SHA-1", "", 400, "UNSUPPORTED_SASL_MECHANISM"},
	} {
		code, _, a := c.rest(t, tc.method, tc.path, tc.body)
		assert.Equal(t, tc.code, code, "%s %s %s", tc.method, tc.path, tc.body)
		assert.Equal(t, tc.reason, a.reason(), "%s %s %s: %+v", tc.method, tc.path, tc.body, a)
	}
	_, err = users.SetScramCredential(ctx, &sharelogv1.SetScramCredentialRequest{User: "carol", Mechanism: "SCRAM-SHA-256",
		Iterations: 4095, Secret: &sharelogv1.SetScramCredentialRequest_Password{Password: "x"}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	code, body = c.restJSON(t, http.MethodDelete, "/v1/users/alice/scram/SCRAM-SHA-256", "")
	require.Equal(t, http.StatusOK, code, body)
	err = ping(kgo.SASL(scram.Auth{User: "alice", Pass: "rest-pw"}.AsSha256Mechanism()))
	require.True(t, errors.Is(err, kerr.SaslAuthenticationFailed), "%v", err)
	list, err = users.ListUsers(ctx, &sharelogv1.ListUsersRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetUsers(), 1, "a user without credentials is not listed")
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestUserServiceCluster: in cluster mode the users are in the cluster's
// KV bucket: a user set through one instance is listed by the other, and
// a deletion through the other is seen by the first.
func TestUserServiceCluster(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	a := startMember(t, js.URL(), prefix, "a")
	b := startMember(t, js.URL(), prefix, "b")
	ua, ub := sharelogv1.NewUserServiceClient(a.conn), sharelogv1.NewUserServiceClient(b.conn)
	ctx := context.Background()
	_, err := ua.SetScramCredential(ctx, &sharelogv1.SetScramCredentialRequest{User: "alice", Mechanism: "SCRAM-SHA-512",
		Iterations: 4096, Secret: &sharelogv1.SetScramCredentialRequest_Password{Password: "pw"}})
	require.NoError(t, err)
	list, err := ub.ListUsers(ctx, &sharelogv1.ListUsersRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetUsers(), 1)
	assert.Equal(t, "alice", list.GetUsers()[0].GetName())
	assert.Equal(t, "SCRAM-SHA-512", list.GetUsers()[0].GetCredentials()[0].GetMechanism())

	_, err = ub.DeleteScramCredential(ctx, &sharelogv1.DeleteScramCredentialRequest{User: "alice", Mechanism: "SCRAM-SHA-512"})
	require.NoError(t, err)
	list, err = ua.ListUsers(ctx, &sharelogv1.ListUsersRequest{})
	require.NoError(t, err)
	assert.Empty(t, list.GetUsers())
	_, err = ua.DeleteScramCredential(ctx, &sharelogv1.DeleteScramCredentialRequest{User: "alice", Mechanism: "SCRAM-SHA-512"})
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
}
