package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// restAnswer is a REST error body: the google.rpc.Status JSON.
type restAnswer struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type   string `json:"@type"`
		Reason string `json:"reason"`
	} `json:"details"`
}

func (a restAnswer) reason() string {
	for _, d := range a.Details {
		if strings.HasSuffix(d.Type, "google.rpc.ErrorInfo") {
			return d.Reason
		}
	}
	return ""
}

// rest sends one request to the child's HTTP listener, the raw path as
// given (not re-escaped), and returns the status, the Allow header and
// the decoded error body.
func (c *child) rest(t *testing.T, method, rawPath, body string) (int, string, restAnswer) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.httpAddr+"/", strings.NewReader(body))
	require.NoError(t, err)
	req.URL.Opaque = rawPath // sent as written: %ff stays %ff
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var a restAnswer
	if resp.StatusCode >= 400 {
		require.NoError(t, json.Unmarshal(raw, &a), "error body %s", raw)
	}
	return resp.StatusCode, resp.Header.Get("Allow"), a
}

// Bad input is the client's error, answered as such with an ErrorInfo:
// never a recovered panic (500), a marshaling failure (500) or the
// gateway's 501.
func TestBadInputIsAClientError(t *testing.T) {
	c := startChild(t, t.TempDir(), "--fsync", "never")

	t.Run("share-group config without a config", func(t *testing.T) {
		code, _, a := c.rest(t, http.MethodPatch, "/v1/share-groups/g/config", "{}")
		assert.Equal(t, http.StatusBadRequest, code, "%+v", a)
		assert.Equal(t, "INVALID_REQUEST", a.reason(), "%+v", a)

		_, err := sharelogv1.NewShareGroupServiceClient(c.conn).UpdateShareGroupConfig(context.Background(),
			&sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g"})
		st := status.Convert(err)
		assert.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
		assert.Equal(t, "INVALID_REQUEST", grpcReason(st), "%v", err)
	})
	t.Run("invalid UTF-8 in the path", func(t *testing.T) {
		for _, p := range []string{"/v1/topics/%ff%fe", "/v1/topics/%FF", "/v1/topics/a%c3/partitions/0/records"} {
			code, _, a := c.rest(t, http.MethodGet, p, "")
			assert.Equal(t, http.StatusBadRequest, code, "%s: %+v", p, a)
			assert.Equal(t, "INVALID_REQUEST", a.reason(), "%s: %+v", p, a)
		}
	})
	t.Run("wrong method with a trailing slash", func(t *testing.T) {
		for _, p := range []string{"/v1/topics/", "/v1/share-groups/"} {
			for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodPost} {
				code, allow, a := c.rest(t, m, p, "")
				assert.Equal(t, http.StatusMethodNotAllowed, code, "%s %s: %+v", m, p, a)
				assert.Contains(t, allow, http.MethodGet, "%s %s", m, p)
				assert.Equal(t, "INVALID_REQUEST", a.reason(), "%s %s: %+v", m, p, a)
			}
		}
	})
	t.Run("the server survived", func(t *testing.T) {
		_, err := sharelogv1.NewLogServiceClient(c.conn).ListTopics(context.Background(), &sharelogv1.ListTopicsRequest{})
		require.NoError(t, err)
		for _, l := range c.logs.Tail(200) {
			assert.NotContains(t, l, "panic in handler")
		}
	})
}

func grpcReason(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// --authorizer acl without --super-users starts (bindings may grant what
// is needed) but says at WARN that no principal can repair a lost binding.
func TestACLWithoutSuperUsersWarns(t *testing.T) {
	warned := func(c *child) bool {
		for _, l := range c.startup {
			if l["level"] == "WARN" && strings.Contains(l["msg"].(string), "--super-users") {
				return true
			}
		}
		return false
	}
	assert.True(t, warned(startChild(t, t.TempDir(), "--fsync", "never", "--authorizer", "acl")), "no super user: a warning")
	assert.False(t, warned(startChild(t, t.TempDir(), "--fsync", "never", "--authorizer", "acl", "--super-users", "User:admin")),
		"with a super user: none")
}
