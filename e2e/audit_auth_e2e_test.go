package e2e

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// A refused credential is a denial too: one audit line per refused call
// (gRPC, REST and /metrics), with the method and the reason, never the
// token that was sent.
func TestAuditLogsRefusedCredentials(t *testing.T) {
	var logs syncBuffer
	tokens := writeTokens(t, t.TempDir())
	st := testsupport.NewStack(t, testsupport.StackOptions{
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})),
	}, func(cfg *app.Config) { cfg.AuthTokensFile = tokens })
	hs := st.HTTP

	lc := st.Log
	_, err := lc.ListTopics(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer guessed-secret-1"), &sharelogv1.ListTopicsRequest{})
	requireReason(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	_, err = lc.ListTopics(context.Background(), &sharelogv1.ListTopicsRequest{})
	requireReason(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	for _, path := range []string{"/v1/topics", "/metrics"} {
		req, err := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer guessed-secret-2")
		resp, err := hs.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
	}
	_, err = lc.ListTopics(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+userToken), &sharelogv1.ListTopicsRequest{})
	require.NoError(t, err)

	lines := logs.lines(t)
	require.Len(t, lines, 4, "one line per refused call, none for the good one: %v", lines)
	for i, want := range []string{"/sharelog.v1.LogService/ListTopics", "/sharelog.v1.LogService/ListTopics", "/sharelog.v1.LogService/ListTopics", "GET /metrics"} {
		assert.Equal(t, "authentication failed", lines[i]["msg"])
		assert.Equal(t, want, lines[i]["operation"])
		assert.True(t, strings.HasPrefix(lines[i]["outcome"].(string), "unauthenticated: "), lines[i]["outcome"])
		assert.NotEmpty(t, lines[i]["client"])
	}
	for _, secret := range []string{"guessed-secret", userToken, adminToken} {
		assert.NotContains(t, logs.String(), secret, "credentials are never logged")
	}
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
