package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// tokensFile writes a tokens file: alice's token in clear, bob's as its
// SHA-256.
func tokensFile(t *testing.T) string {
	t.Helper()
	sum := sha256.Sum256([]byte("tok-bob"))
	path := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(path, []byte("# principals\nalice tok-alice\nbob sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600))
	return path
}

func bearer(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// impersonationSetup: alice's member "m" of group "g" has joined and holds
// offsets 0-2 of q/0 in its share session (next epoch 1).
func impersonationSetup(t *testing.T) (s *shareStack, alice, bob context.Context, memberEpoch int32) {
	t.Helper()
	s = newShareStack(t, func(c *app.Config) { c.AuthTokensFile = tokensFile(t) })
	alice, bob = bearer("tok-alice"), bearer("tok-bob")
	_, err := s.log.CreateTopic(alice, &sharelogv1.CreateTopicRequest{Name: "q", Partitions: 1})
	require.NoError(t, err)
	p := int32(0)
	_, err = s.log.Produce(alice, &sharelogv1.ProduceRequest{Topic: "q", Partition: &p,
		Records: []*sharelogv1.Record{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}}})
	require.NoError(t, err)
	_, err = s.sg.UpdateShareGroupConfig(alice, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)
	hb, err := s.sg.ShareGroupHeartbeat(alice, hbReq("g", "m", 0, "q"))
	require.NoError(t, err)
	open, err := s.sg.ShareFetch(alice, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", Topics: topicReq("q", part(0))})
	require.NoError(t, err)
	require.Equal(t, []rng{{0, 2, 1}}, acquired(partitionOf(open, "q", 0)))
	return s, alice, bob, hb.GetMemberEpoch()
}

// ownerUntouched: alice's member keeps its epoch, her session its epoch
// and her records their locks: she heartbeats, acknowledges 0-2 at epoch 1
// (an acknowledgement of records another had released or rejected would
// fail), and nothing is left to deliver.
func ownerUntouched(t *testing.T, s *shareStack, alice context.Context, memberEpoch int32) {
	t.Helper()
	hb, err := s.sg.ShareGroupHeartbeat(alice, hbReq("g", "m", memberEpoch))
	require.NoError(t, err, "the owner's member is intact")
	assert.Equal(t, memberEpoch, hb.GetMemberEpoch())
	ack, err := s.sg.ShareAcknowledge(alice, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1,
		Topics: topicReq("q", part(0, batch(0, 2, accept)))})
	require.NoError(t, err, "the owner's session is at the epoch she left it")
	assert.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode(), "her records were still hers")
	off, err := s.sg.DescribeShareGroupOffsets(alice, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "g"})
	require.NoError(t, err)
	require.Len(t, off.GetTopics(), 1)
	assert.Equal(t, int64(3), off.GetTopics()[0].GetPartitions()[0].GetStartOffset(), "0-2 acknowledged by the owner")
}

// impCase is one impersonation attempt by bob and the error it must get.
type impCase struct {
	name   string
	call   func(s *shareStack, bob context.Context, memberEpoch int32) error
	code   codes.Code
	reason string
}

// doREST sends req and reads the answer.
func doREST(t *testing.T, s *stack, req *http.Request) restResponse {
	t.Helper()
	resp, err := s.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return restFrom(t, resp)
}

// restFrom reads an HTTP answer.
func restFrom(t *testing.T, resp *http.Response) restResponse {
	t.Helper()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := restResponse{Status: resp.StatusCode, Raw: string(raw)}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &out.Body), "body: %s", raw)
	}
	return out
}

// Another principal using alice's member id — at her member epoch, at 0
// and at -1 — gets UNKNOWN_MEMBER_ID on heartbeats and
// SHARE_SESSION_NOT_FOUND on ShareFetch and ShareAcknowledge (including a
// REJECT of her in-flight records), with no expected_epoch, and alice's
// member, session and records are untouched.
func TestMemberImpersonationGRPC(t *testing.T) {
	t.Parallel()
	var calls []impCase
	for _, e := range []string{"member epoch", "0", "-1"} {
		calls = append(calls, impCase{"heartbeat at " + e, func(s *shareStack, bob context.Context, memberEpoch int32) error {
			epoch := memberEpoch
			if e != "member epoch" {
				n, _ := strconv.Atoi(e)
				epoch = int32(n)
			}
			_, err := s.sg.ShareGroupHeartbeat(bob, hbReq("g", "m", epoch, "q"))
			return err
		}, codes.NotFound, "UNKNOWN_MEMBER_ID"})
	}
	fetches := map[string]*sharelogv1.ShareFetchRequest{
		"fetch at the session epoch with a REJECT": {GroupId: "g", MemberId: "m", ShareSessionEpoch: 1, Topics: topicReq("q", part(0, batch(0, 2, reject)))},
		"fetch at 0":  {GroupId: "g", MemberId: "m", ShareSessionEpoch: 0, Topics: topicReq("q", part(0))},
		"fetch at -1": {GroupId: "g", MemberId: "m", ShareSessionEpoch: -1},
	}
	for name, req := range fetches {
		calls = append(calls, impCase{name, func(s *shareStack, bob context.Context, _ int32) error {
			_, err := s.sg.ShareFetch(bob, req)
			return err
		}, codes.NotFound, "SHARE_SESSION_NOT_FOUND"})
	}
	for _, epoch := range []int32{1, 0, -1} {
		calls = append(calls, impCase{"acknowledge REJECT at " + strconv.Itoa(int(epoch)), func(s *shareStack, bob context.Context, _ int32) error {
			_, err := s.sg.ShareAcknowledge(bob, &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: epoch,
				Topics: topicReq("q", part(0, batch(0, 2, reject)))})
			return err
		}, codes.NotFound, "SHARE_SESSION_NOT_FOUND"})
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, alice, bob, memberEpoch := impersonationSetup(t)
			err := c.call(s, bob, memberEpoch)
			reason := c.reason
			if strings.HasSuffix(c.name, "at 0") && strings.HasPrefix(c.name, "acknowledge") {
				// ShareAcknowledge never opens a session: epoch 0 is
				// refused before any session is looked up.
				reason = "INVALID_SHARE_SESSION_EPOCH"
				requireReason(t, err, codes.FailedPrecondition, reason)
			} else {
				info := requireReason(t, err, c.code, reason)
				assert.NotContains(t, info.GetMetadata(), "expected_epoch")
			}
			ownerUntouched(t, s, alice, memberEpoch)
		})
	}
}

// The same over REST: bob's token through the gateway is bob.
func TestMemberImpersonationREST(t *testing.T) {
	t.Parallel()
	s, alice, _, memberEpoch := impersonationSetup(t)
	call := func(path, body string) restResponse {
		req, err := http.NewRequest(http.MethodPost, s.http.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "bearer tok-bob") // the scheme word in any case
		return doREST(t, s.stack, req)
	}
	requireRESTError(t, call("/v1/share-groups/g:heartbeat", `{"memberId":"m","memberEpoch":`+strconv.Itoa(int(memberEpoch))+`}`),
		http.StatusNotFound, "UNKNOWN_MEMBER_ID")
	requireRESTError(t, call("/v1/share-groups/g:heartbeat", `{"memberId":"m","memberEpoch":-1}`), http.StatusNotFound, "UNKNOWN_MEMBER_ID")
	requireRESTError(t, call("/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":0,"topics":[{"topic":"q","partitions":[{"partition":0}]}]}`),
		http.StatusNotFound, "SHARE_SESSION_NOT_FOUND")
	reject := `{"memberId":"m","shareSessionEpoch":1,"topics":[{"topic":"q","partitions":[{"partition":0,"acknowledgementBatches":[{"firstOffset":"0","lastOffset":"2","acknowledgeTypes":["ACKNOWLEDGE_TYPE_REJECT"]}]}]}]}`
	requireRESTError(t, call("/v1/share-groups/g:acknowledge", reject), http.StatusNotFound, "SHARE_SESSION_NOT_FOUND")
	requireRESTError(t, call("/v1/share-groups/g:fetch", reject), http.StatusNotFound, "SHARE_SESSION_NOT_FOUND")
	requireRESTError(t, call("/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":-1}`), http.StatusNotFound, "SHARE_SESSION_NOT_FOUND")
	ownerUntouched(t, s, alice, memberEpoch)
}

// memberHosts returns each member's client_host and client_id.
func memberHosts(t *testing.T, s *shareStack, ctx context.Context) map[string][2]string {
	t.Helper()
	d, err := s.sg.DescribeShareGroup(ctx, &sharelogv1.DescribeShareGroupRequest{GroupId: "g"})
	require.NoError(t, err)
	out := map[string][2]string{}
	for _, m := range d.GetMembers() {
		out[m.GetMemberId()] = [2]string{m.GetClientHost(), m.GetClientId()}
	}
	return out
}

// The gateway forwards Authorization, trace context, the request id and
// X-Client-Id only: forged Grpc-Metadata-* headers (credentials, the
// gateway's own metadata, x-forwarded-for) change nothing, and
// X-Forwarded-For from a peer outside --trusted-proxies is ignored for
// client_host, as is x-forwarded-for metadata from a gRPC client.
func TestGatewayHeaderForwarding(t *testing.T) {
	t.Parallel()
	s := newShareStack(t, func(c *app.Config) { c.AuthTokensFile = tokensFile(t) })
	alice := bearer("tok-alice")
	_, err := s.log.CreateTopic(alice, &sharelogv1.CreateTopicRequest{Name: "q", Partitions: 1})
	require.NoError(t, err)

	heartbeat := func(member string, header ...string) restResponse {
		req, err := http.NewRequest(http.MethodPost, s.http.URL+"/v1/share-groups/g:heartbeat",
			strings.NewReader(`{"memberId":"`+member+`","memberEpoch":0,"subscribedTopicNames":["q"]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Add(header[i], header[i+1])
		}
		return doREST(t, s.stack, req)
	}
	requireRESTError(t, heartbeat("x", "Grpc-Metadata-Authorization", "Bearer tok-alice"), http.StatusUnauthorized, "UNAUTHENTICATED")
	requireRESTError(t, heartbeat("x", "Authorization", "Bearer tok-alice", "Authorization", "Bearer tok-bob"),
		http.StatusUnauthorized, "UNAUTHENTICATED")
	r := heartbeat("r", "Authorization", "Bearer tok-alice",
		"X-Forwarded-For", "203.0.113.9",
		"Grpc-Metadata-X-Forwarded-For", "198.51.100.7",
		"Grpc-Metadata-Sharelog-Client-Host", "198.51.100.8",
		"Grpc-Metadata-Sharelog-Client-Addr", "198.51.100.9",
		"Grpc-Metadata-X-Client-Id", "forged-id",
		"X-Request-Id", "req-1", "Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = heartbeat("r2", "Authorization", "Bearer tok-alice", "X-Client-Id", "rest-app")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)

	// A gRPC client's own x-forwarded-for and gateway metadata are ignored.
	forged := metadata.AppendToOutgoingContext(alice, "x-forwarded-for", "203.0.113.10",
		"sharelog-client-host", "203.0.113.11", "sharelog-client-principal", "User:bob")
	_, err = s.sg.ShareGroupHeartbeat(forged, hbReq("g", "grpc", 0, "q"))
	require.NoError(t, err)
	_, err = s.sg.ShareGroupHeartbeat(bearer("tok-bob"), hbReq("g", "grpc", -1))
	requireReason(t, err, codes.NotFound, "UNKNOWN_MEMBER_ID") // still alice's, not bob's

	assert.Equal(t, map[string][2]string{
		"r":    {"127.0.0.1", ""},
		"r2":   {"127.0.0.1", "rest-app"},
		"grpc": {"bufconn", ""},
	}, memberHosts(t, s, alice))
}

// From a peer inside --trusted-proxies, X-Forwarded-For names client_host:
// the nearest hop that is not itself a trusted proxy.
func TestTrustedProxyForwardedFor(t *testing.T) {
	t.Parallel()
	s := newShareStack(t, func(c *app.Config) { c.TrustedProxies = "127.0.0.0/8" })
	s.createTopic(t, "q", 1, nil)
	for member, xff := range map[string]string{"a": "203.0.113.9", "b": "198.51.100.1, 203.0.113.20, 127.0.0.5", "c": ""} {
		req, err := http.NewRequest(http.MethodPost, s.http.URL+"/v1/share-groups/g:heartbeat",
			strings.NewReader(`{"memberId":"`+member+`","memberEpoch":0,"subscribedTopicNames":["q"]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		r := doREST(t, s.stack, req)
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
	}
	_, err := s.sg.ShareGroupHeartbeat(metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "203.0.113.30"),
		hbReq("g", "grpc", 0, "q"))
	require.NoError(t, err)
	assert.Equal(t, map[string][2]string{
		"a":    {"203.0.113.9", ""},
		"b":    {"203.0.113.20", ""},
		"c":    {"127.0.0.1", ""},
		"grpc": {"bufconn", ""}, // an in-memory peer is no trusted proxy
	}, memberHosts(t, s, context.Background()))
}
