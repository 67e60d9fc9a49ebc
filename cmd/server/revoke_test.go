package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// Revocation is complete: within one reload interval of a token leaving
// the tokens file, its open change streams (gRPC and REST NDJSON) and its
// waiting long polls end with UNAUTHENTICATED; another token's stream is
// untouched.
func TestRevokedTokenEndsOpenStreamsAndLongPolls(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	replace := func(content string) {
		tmp := filepath.Join(dir, "tokens.tmp")
		require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	replace("alice tok-alice\nbob tok-bob\n")
	c := startChild(t, t.TempDir(), "--fsync", "never", "--auth-tokens-file", path)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	logs := sharelogv1.NewLogServiceClient(c.conn)
	changes := sharelogv1.NewChangeStreamServiceClient(c.conn)
	_, err := logs.CreateTopic(as("tok-bob"), &sharelogv1.CreateTopicRequest{Name: "rv", Partitions: 1})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ended := make(chan string, 4)
	// gRPC change streams of alice and bob.
	openStream := func(token string) sharelogv1.ChangeStreamService_StreamChangesClient {
		s, err := changes.StreamChanges(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token),
			&sharelogv1.StreamChangesRequest{Topic: "rv"})
		require.NoError(t, err)
		return s
	}
	aliceStream, bobStream := openStream("tok-alice"), openStream("tok-bob")
	go func() {
		for {
			if _, err := aliceStream.Recv(); err != nil {
				ended <- "grpc stream: " + status.Code(err).String()
				return
			}
		}
	}()
	// A REST NDJSON change stream of alice.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.httpAddr+"/v1/topics/rv/partitions/0/changes", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer tok-alice")
	go func() {
		// The gateway sends its headers with the first line.
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ended <- "rest stream: " + err.Error()
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		last := ""
		for sc.Scan() {
			last = sc.Text()
		}
		ended <- "rest stream: " + last
	}()
	// A long-polling Fetch of alice, waiting for records that never come.
	go func() {
		_, err := logs.Fetch(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok-alice"),
			&sharelogv1.FetchRequest{Topic: "rv", Offset: 0, MaxWaitMs: 25000})
		ended <- "fetch: " + status.Code(err).String()
	}()
	time.Sleep(300 * time.Millisecond) // all opened and waiting
	select {
	case e := <-ended:
		t.Fatalf("ended before the revocation: %s", e)
	default:
	}

	revokedAt := time.Now()
	replace("bob tok-bob\n")
	got := map[string]bool{}
	for len(got) < 3 {
		select {
		case e := <-ended:
			got[e] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("still running 5s after the revocation; ended so far: %v", got)
		}
	}
	assert.Less(t, time.Since(revokedAt), 4*time.Second, "within a reload interval (and a margin)")
	assert.True(t, got["grpc stream: "+codes.Unauthenticated.String()], "%v", got)
	assert.True(t, got["fetch: "+codes.Unauthenticated.String()], "%v", got)
	var rest string
	for e := range got {
		if strings.HasPrefix(e, "rest stream: ") {
			rest = e
		}
	}
	assert.Contains(t, rest, `"code":16`, "the NDJSON stream ends with an UNAUTHENTICATED line: %v", got)

	// Bob's stream still delivers.
	part := int32(0)
	_, err = logs.Produce(as("tok-bob"), &sharelogv1.ProduceRequest{Topic: "rv", Partition: &part,
		Records: []*sharelogv1.Record{{Key: []byte("k"), Value: []byte("v")}}})
	require.NoError(t, err)
	for {
		m, err := bobStream.Recv()
		require.NoError(t, err, "bob's stream is not revoked")
		if len(m.GetEvents()) > 0 {
			break
		}
	}
}
