package e2e

// The authorization matrix in the spirit of Kafka's AuthorizerIntegrationTest:
// for every RPC, over gRPC and over REST, the call without its permission
// fails with the right reason and changes nothing, and with exactly the
// permissions it needs it succeeds.

import (
	"context"
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
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

const (
	adminToken = "tok-admin" // line 1: User:token-1, a super user
	userToken  = "tok-user"  // line 2: User:token-2, the principal under test
	userName   = "User:token-2"

	topicAuthFailed = sharelogv1.ErrorCode_ERROR_CODE_TOPIC_AUTHORIZATION_FAILED
)

// Shorthands for bindings.
const (
	opRead            = sharelogv1.AclOperation_ACL_OPERATION_READ
	opWrite           = sharelogv1.AclOperation_ACL_OPERATION_WRITE
	opCreate          = sharelogv1.AclOperation_ACL_OPERATION_CREATE
	opDelete          = sharelogv1.AclOperation_ACL_OPERATION_DELETE
	opAlter           = sharelogv1.AclOperation_ACL_OPERATION_ALTER
	opDescribe        = sharelogv1.AclOperation_ACL_OPERATION_DESCRIBE
	opAlterConfigs    = sharelogv1.AclOperation_ACL_OPERATION_ALTER_CONFIGS
	opDescribeConfigs = sharelogv1.AclOperation_ACL_OPERATION_DESCRIBE_CONFIGS
	opAll             = sharelogv1.AclOperation_ACL_OPERATION_ALL
	rtTopic           = sharelogv1.ResourceType_RESOURCE_TYPE_TOPIC
	rtGroup           = sharelogv1.ResourceType_RESOURCE_TYPE_GROUP
	rtCluster         = sharelogv1.ResourceType_RESOURCE_TYPE_CLUSTER
	literal           = sharelogv1.PatternType_PATTERN_TYPE_LITERAL
	prefixed          = sharelogv1.PatternType_PATTERN_TYPE_PREFIXED
	allow             = sharelogv1.AclPermission_ACL_PERMISSION_ALLOW
	deny              = sharelogv1.AclPermission_ACL_PERMISSION_DENY
)

func acl(rt sharelogv1.ResourceType, name string, op sharelogv1.AclOperation) *sharelogv1.AclBinding {
	return &sharelogv1.AclBinding{Principal: userName, ResourceType: rt, PatternType: literal, ResourceName: name, Operation: op, Permission: allow}
}

// authzStack is the real server with --authorizer acl and two principals.
type authzStack struct {
	*stack
	admin, user context.Context // outgoing contexts carrying each token
	acls        sharelogv1.AclServiceClient
	sg          sharelogv1.ShareGroupServiceClient
}

func writeTokens(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(path, []byte(adminToken+"\n"+userToken+"\n"), 0o600))
	return path
}

func newAuthzStack(t *testing.T) *authzStack {
	t.Helper()
	tokens := writeTokens(t, t.TempDir())
	s := newStack(t, app.Options{}, func(c *app.Config) {
		c.AuthTokensFile = tokens
		c.Authorizer = app.AuthorizerACL
		c.SuperUsers = []string{"User:token-1"}
	})
	bearer := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	return &authzStack{stack: s, admin: bearer(adminToken), user: bearer(userToken),
		acls: sharelogv1.NewAclServiceClient(s.conn), sg: sharelogv1.NewShareGroupServiceClient(s.conn)}
}

// grant replaces the user's bindings with bs.
func (s *authzStack) grant(t *testing.T, bs ...*sharelogv1.AclBinding) {
	t.Helper()
	_, err := s.acls.DeleteAcls(s.admin, &sharelogv1.DeleteAclsRequest{Filters: []*sharelogv1.AclBindingFilter{{Principal: userName}}})
	require.NoError(t, err)
	if len(bs) == 0 {
		return
	}
	resp, err := s.acls.CreateAcls(s.admin, &sharelogv1.CreateAclsRequest{Bindings: bs})
	require.NoError(t, err)
	for _, r := range resp.GetResults() {
		require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, r.GetErrorCode(), r.GetErrorMessage())
	}
}

// restCall sends a REST request as the user; body "" sends none.
func (s *authzStack) restCall(t *testing.T, token, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.http.URL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, raw
}

// names are one case's resources on one transport; epoch is the share
// session epoch a ShareAcknowledge sends.
type names struct {
	topic, group string
	epoch        *int32
}

type rpcCase struct {
	name   string
	method string // gRPC full method name
	req    func(n names) proto.Message
	resp   func() proto.Message
	// rest is the route and body of the same request (body "" = none).
	rest  func(n names) (method, path, body string)
	needs func(n names) []*sharelogv1.AclBinding
	// setup prepares the resources, as the super user.
	setup func(t *testing.T, s *authzStack, n names)
	// deniedReason is the request-level reason without the permissions;
	// when empty, deniedBody checks the per-partition answer instead.
	deniedReason string
	deniedBody   func(t *testing.T, resp proto.Message)
	// okBody checks the successful answer (nil: success is enough).
	okBody func(t *testing.T, resp proto.Message)
	// unchanged checks, as the super user, that the denied call changed nothing.
	unchanged func(t *testing.T, s *authzStack, n names)
	// advancesEpoch: each answered call moves *names.epoch on.
	advancesEpoch bool
}

func (s *authzStack) topicExists(t *testing.T, name string) bool {
	_, err := s.log.DescribeTopic(s.admin, &sharelogv1.DescribeTopicRequest{Name: name})
	if err == nil {
		return true
	}
	requireReason(t, err, codes.NotFound, "UNKNOWN_TOPIC_OR_PARTITION")
	return false
}

func (s *authzStack) setupTopic(t *testing.T, name string, records int) {
	t.Helper()
	_, err := s.log.CreateTopic(s.admin, &sharelogv1.CreateTopicRequest{Name: name, Partitions: 1})
	require.NoError(t, err)
	if records > 0 {
		req := &sharelogv1.ProduceRequest{Topic: name, Partition: proto.Int32(0)}
		for range records {
			req.Records = append(req.Records, &sharelogv1.Record{Value: []byte("v")})
		}
		_, err = s.log.Produce(s.admin, req)
		require.NoError(t, err)
	}
}

// setupGroup gives group a start offset of 1 on topic (creating both).
func (s *authzStack) setupGroup(t *testing.T, n names) {
	t.Helper()
	s.setupTopic(t, n.topic, 3)
	resp, err := s.sg.AlterShareGroupOffsets(s.admin, &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: n.group,
		Topics: []*sharelogv1.AlterShareGroupOffsetsTopic{{Topic: n.topic, Partitions: []*sharelogv1.AlterShareGroupOffsetsPartition{{Partition: 0, StartOffset: 1}}}}})
	require.NoError(t, err)
	require.Equal(t, none, resp.GetTopics()[0].GetPartitions()[0].GetErrorCode())
}

func (s *authzStack) groupStartOffset(t *testing.T, n names) int64 {
	t.Helper()
	resp, err := s.sg.DescribeShareGroupOffsets(s.admin, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: n.group,
		Topics: []*sharelogv1.TopicPartitions{{Topic: n.topic, Partitions: []int32{0}}}})
	require.NoError(t, err)
	return resp.GetTopics()[0].GetPartitions()[0].GetStartOffset()
}

func (s *authzStack) groupExists(t *testing.T, group string) bool {
	_, err := s.sg.DescribeShareGroup(s.admin, &sharelogv1.DescribeShareGroupRequest{GroupId: group})
	if err == nil {
		return true
	}
	requireReason(t, err, codes.NotFound, "GROUP_ID_NOT_FOUND")
	return false
}

func (s *authzStack) highWatermark(t *testing.T, topic string) int64 {
	tp, err := s.log.DescribeTopic(s.admin, &sharelogv1.DescribeTopicRequest{Name: topic})
	require.NoError(t, err)
	return tp.GetPartitions()[0].GetHighWatermark()
}

func (s *authzStack) userBindings(t *testing.T, name string) int {
	resp, err := s.acls.DescribeAcls(s.admin, &sharelogv1.DescribeAclsRequest{Filter: &sharelogv1.AclBindingFilter{ResourceName: name}})
	require.NoError(t, err)
	return len(resp.GetBindings())
}

func shareFetchReq(n names) *sharelogv1.ShareFetchRequest {
	return &sharelogv1.ShareFetchRequest{GroupId: n.group, MemberId: "m-" + n.group, Topics: topicReq(n.topic, part(0))}
}

func rpcCases() []rpcCase {
	var cases []rpcCase
	topicWrite := func(op sharelogv1.AclOperation) func(n names) []*sharelogv1.AclBinding {
		return func(n names) []*sharelogv1.AclBinding { return []*sharelogv1.AclBinding{acl(rtTopic, n.topic, op)} }
	}
	groupAnd := func(gop, top sharelogv1.AclOperation) func(n names) []*sharelogv1.AclBinding {
		return func(n names) []*sharelogv1.AclBinding {
			return []*sharelogv1.AclBinding{acl(rtGroup, n.group, gop), acl(rtTopic, n.topic, top)}
		}
	}
	groupOnly := func(op sharelogv1.AclOperation) func(n names) []*sharelogv1.AclBinding {
		return func(n names) []*sharelogv1.AclBinding { return []*sharelogv1.AclBinding{acl(rtGroup, n.group, op)} }
	}
	cases = append(cases,
		rpcCase{
			name: "CreateTopic", method: "/sharelog.v1.LogService/CreateTopic",
			req:  func(n names) proto.Message { return &sharelogv1.CreateTopicRequest{Name: n.topic, Partitions: 1} },
			resp: func() proto.Message { return &sharelogv1.Topic{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/topics", `{"name":"` + n.topic + `","partitions":1}`
			},
			needs: topicWrite(opCreate), deniedReason: "TOPIC_AUTHORIZATION_FAILED",
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.False(t, s.topicExists(t, n.topic)) },
		},
		rpcCase{
			name: "CreateTopicByCluster", method: "/sharelog.v1.LogService/CreateTopic",
			req:  func(n names) proto.Message { return &sharelogv1.CreateTopicRequest{Name: n.topic, Partitions: 1} },
			resp: func() proto.Message { return &sharelogv1.Topic{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/topics", `{"name":"` + n.topic + `","partitions":1}`
			},
			needs: func(names) []*sharelogv1.AclBinding {
				return []*sharelogv1.AclBinding{acl(rtCluster, "kafka-cluster", opCreate)}
			},
			deniedReason: "TOPIC_AUTHORIZATION_FAILED",
			unchanged:    func(t *testing.T, s *authzStack, n names) { assert.False(t, s.topicExists(t, n.topic)) },
		},
		rpcCase{
			name: "DeleteTopic", method: "/sharelog.v1.LogService/DeleteTopic",
			req:   func(n names) proto.Message { return &sharelogv1.DeleteTopicRequest{Name: n.topic} },
			resp:  func() proto.Message { return &sharelogv1.DeleteTopicResponse{} },
			rest:  func(n names) (string, string, string) { return "DELETE", "/v1/topics/" + n.topic, "" },
			needs: topicWrite(opDelete), deniedReason: "TOPIC_AUTHORIZATION_FAILED",
			setup:     func(t *testing.T, s *authzStack, n names) { s.setupTopic(t, n.topic, 0) },
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.True(t, s.topicExists(t, n.topic)) },
		},
		rpcCase{
			name: "CreatePartitions", method: "/sharelog.v1.LogService/CreatePartitions",
			req: func(n names) proto.Message {
				return &sharelogv1.CreatePartitionsRequest{Topic: n.topic, Count: 2}
			},
			resp: func() proto.Message { return &sharelogv1.CreatePartitionsResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/topics/" + n.topic + ":createPartitions", `{"count":2}`
			},
			needs: topicWrite(opAlter), deniedReason: "TOPIC_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupTopic(t, n.topic, 0) },
			unchanged: func(t *testing.T, s *authzStack, n names) {
				tp, err := s.log.DescribeTopic(s.admin, &sharelogv1.DescribeTopicRequest{Name: n.topic})
				require.NoError(t, err)
				assert.Equal(t, int32(1), tp.GetPartitionCount())
			},
		},
		rpcCase{
			name: "DescribeTopic", method: "/sharelog.v1.LogService/DescribeTopic",
			req:   func(n names) proto.Message { return &sharelogv1.DescribeTopicRequest{Name: n.topic} },
			resp:  func() proto.Message { return &sharelogv1.Topic{} },
			rest:  func(n names) (string, string, string) { return "GET", "/v1/topics/" + n.topic, "" },
			needs: topicWrite(opDescribe), deniedReason: "TOPIC_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupTopic(t, n.topic, 0) },
		},
		rpcCase{
			name: "Produce", method: "/sharelog.v1.LogService/Produce",
			req: func(n names) proto.Message {
				return &sharelogv1.ProduceRequest{Topic: n.topic, Records: []*sharelogv1.Record{{Value: []byte("x")}}}
			},
			resp: func() proto.Message { return &sharelogv1.ProduceResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/topics/" + n.topic + "/records", `{"records":[{"value":"eA=="}]}`
			},
			needs: topicWrite(opWrite), deniedReason: "TOPIC_AUTHORIZATION_FAILED",
			setup:     func(t *testing.T, s *authzStack, n names) { s.setupTopic(t, n.topic, 0) },
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.Zero(t, s.highWatermark(t, n.topic)) },
		},
		rpcCase{
			// WRITE on any topic, as Kafka's InitProducerId without a
			// transactional id; the topic need not exist.
			name: "InitProducer", method: "/sharelog.v1.LogService/InitProducer",
			req:   func(names) proto.Message { return &sharelogv1.InitProducerRequest{} },
			resp:  func() proto.Message { return &sharelogv1.InitProducerResponse{} },
			rest:  func(names) (string, string, string) { return "POST", "/v1/producers:init", "{}" },
			needs: topicWrite(opWrite), deniedReason: "CLUSTER_AUTHORIZATION_FAILED",
			okBody: func(t *testing.T, m proto.Message) {
				assert.Positive(t, m.(*sharelogv1.InitProducerResponse).GetProducerId())
			},
		},
		rpcCase{
			name: "Fetch", method: "/sharelog.v1.LogService/Fetch",
			req:  func(n names) proto.Message { return &sharelogv1.FetchRequest{Topic: n.topic, Partition: 0, Offset: 0} },
			resp: func() proto.Message { return &sharelogv1.FetchResponse{} },
			rest: func(n names) (string, string, string) {
				return "GET", "/v1/topics/" + n.topic + "/partitions/0/records?offset=0", ""
			},
			needs: topicWrite(opRead), deniedReason: "TOPIC_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupTopic(t, n.topic, 2) },
			okBody: func(t *testing.T, m proto.Message) {
				assert.Len(t, m.(*sharelogv1.FetchResponse).GetRecords(), 2)
			},
		},
		rpcCase{
			name: "ListOffsets", method: "/sharelog.v1.LogService/ListOffsets",
			req: func(n names) proto.Message {
				return &sharelogv1.ListOffsetsRequest{Topic: n.topic, Partition: 0, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST}
			},
			resp: func() proto.Message { return &sharelogv1.ListOffsetsResponse{} },
			rest: func(n names) (string, string, string) {
				return "GET", "/v1/topics/" + n.topic + "/partitions/0/offsets?spec=OFFSET_SPEC_LATEST", ""
			},
			needs: topicWrite(opDescribe), deniedReason: "TOPIC_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupTopic(t, n.topic, 2) },
		},
		rpcCase{
			name: "Purge", method: "/sharelog.v1.LogService/Purge",
			req: func(n names) proto.Message {
				return &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: n.topic, Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 2}}}}}
			},
			resp: func() proto.Message { return &sharelogv1.PurgeResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/purge", `{"topics":[{"topic":"` + n.topic + `","partitions":[{"partition":0,"offset":"2"}]}]}`
			},
			needs: topicWrite(opDelete),
			setup: func(t *testing.T, s *authzStack, n names) { s.setupTopic(t, n.topic, 3) },
			deniedBody: func(t *testing.T, m proto.Message) {
				p := m.(*sharelogv1.PurgeResponse).GetTopics()[0].GetPartitions()[0]
				assert.Equal(t, topicAuthFailed, p.GetErrorCode())
				assert.Equal(t, int64(-1), p.GetLowWatermark())
			},
			okBody: func(t *testing.T, m proto.Message) {
				p := m.(*sharelogv1.PurgeResponse).GetTopics()[0].GetPartitions()[0]
				assert.Equal(t, none, p.GetErrorCode(), p.GetErrorMessage())
				assert.Equal(t, int64(2), p.GetLowWatermark())
			},
			unchanged: func(t *testing.T, s *authzStack, n names) {
				tp, err := s.log.DescribeTopic(s.admin, &sharelogv1.DescribeTopicRequest{Name: n.topic})
				require.NoError(t, err)
				assert.Zero(t, tp.GetPartitions()[0].GetLogStartOffset())
			},
		},
		rpcCase{
			name: "ShareGroupHeartbeat", method: "/sharelog.v1.ShareGroupService/ShareGroupHeartbeat",
			req: func(n names) proto.Message {
				return &sharelogv1.ShareGroupHeartbeatRequest{GroupId: n.group, MemberId: "m-" + n.group, MemberEpoch: 0, SubscribedTopicNames: []string{n.topic}}
			},
			resp: func() proto.Message { return &sharelogv1.ShareGroupHeartbeatResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/share-groups/" + n.group + ":heartbeat", `{"memberId":"m-` + n.group + `","memberEpoch":0,"subscribedTopicNames":["` + n.topic + `"]}`
			},
			needs: groupAnd(opRead, opDescribe), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupTopic(t, n.topic, 0) },
			okBody: func(t *testing.T, m proto.Message) {
				a := m.(*sharelogv1.ShareGroupHeartbeatResponse).GetAssignment()
				require.NotNil(t, a)
				require.Len(t, a.GetTopicPartitions(), 1)
			},
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.False(t, s.groupExists(t, n.group)) },
		},
		rpcCase{
			name: "ShareFetch", method: "/sharelog.v1.ShareGroupService/ShareFetch",
			req:  func(n names) proto.Message { return shareFetchReq(n) },
			resp: func() proto.Message { return &sharelogv1.ShareFetchResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/share-groups/" + n.group + ":fetch", `{"memberId":"m-` + n.group + `","topics":[{"topic":"` + n.topic + `","partitions":[{"partition":0}]}]}`
			},
			needs: groupAnd(opRead, opRead), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
			okBody: func(t *testing.T, m proto.Message) {
				p := m.(*sharelogv1.ShareFetchResponse).GetResponses()[0].GetPartitions()[0]
				assert.Equal(t, none, p.GetErrorCode(), p.GetErrorMessage())
				assert.Len(t, p.GetRecords(), 2, "offsets 1 and 2")
			},
			unchanged: func(t *testing.T, s *authzStack, n names) {
				// Nothing was acquired.
				resp, err := s.sg.DescribeSharePartitionState(s.admin, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: n.group,
					Topics: []*sharelogv1.TopicPartitions{{Topic: n.topic}}})
				require.NoError(t, err)
				for _, r := range resp.GetTopics()[0].GetPartitions()[0].GetRanges() {
					assert.NotEqual(t, sharelogv1.InFlightState_IN_FLIGHT_STATE_ACQUIRED, r.GetState())
				}
			},
		},
		rpcCase{
			name: "ShareAcknowledge", method: "/sharelog.v1.ShareGroupService/ShareAcknowledge",
			req: func(n names) proto.Message {
				return &sharelogv1.ShareAcknowledgeRequest{GroupId: n.group, MemberId: "m-" + n.group, ShareSessionEpoch: *n.epoch,
					Topics: topicReq(n.topic, part(0, batch(1, 2, accept)))}
			},
			resp: func() proto.Message { return &sharelogv1.ShareAcknowledgeResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/share-groups/" + n.group + ":acknowledge", `{"memberId":"m-` + n.group + `","shareSessionEpoch":` + strconv.Itoa(int(*n.epoch)) + `,"topics":[{"topic":"` + n.topic +
					`","partitions":[{"partition":0,"acknowledgementBatches":[{"firstOffset":"1","lastOffset":"2","acknowledgeTypes":["ACKNOWLEDGE_TYPE_ACCEPT"]}]}]}]}`
			},
			needs: groupAnd(opRead, opRead), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) {
				s.setupGroup(t, n)
				// The user opens the session (with its permissions for the
				// moment) and acquires offsets 1 and 2.
				s.grant(t, acl(rtGroup, n.group, opRead), acl(rtTopic, n.topic, opRead))
				resp, err := s.sg.ShareFetch(s.user, shareFetchReq(n))
				require.NoError(t, err)
				require.Len(t, resp.GetResponses()[0].GetPartitions()[0].GetRecords(), 2)
				s.grant(t)
				*n.epoch = 1
			},
			// A call that reaches the session (with READ on the group)
			// moves its epoch on, as in Kafka, even when every partition
			// in it is refused.
			advancesEpoch: true,
			okBody: func(t *testing.T, m proto.Message) {
				p := m.(*sharelogv1.ShareAcknowledgeResponse).GetResponses()[0].GetPartitions()[0]
				assert.Equal(t, none, p.GetErrorCode(), p.GetErrorMessage())
			},
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.Equal(t, int64(1), s.groupStartOffset(t, n)) },
		},
		rpcCase{
			name: "DescribeShareGroup", method: "/sharelog.v1.ShareGroupService/DescribeShareGroup",
			req:   func(n names) proto.Message { return &sharelogv1.DescribeShareGroupRequest{GroupId: n.group} },
			resp:  func() proto.Message { return &sharelogv1.DescribeShareGroupResponse{} },
			rest:  func(n names) (string, string, string) { return "GET", "/v1/share-groups/" + n.group, "" },
			needs: groupOnly(opDescribe), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
		},
		rpcCase{
			name: "DescribeShareGroupOffsets", method: "/sharelog.v1.ShareGroupService/DescribeShareGroupOffsets",
			req: func(n names) proto.Message {
				return &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: n.group, Topics: []*sharelogv1.TopicPartitions{{Topic: n.topic}}}
			},
			resp: func() proto.Message { return &sharelogv1.DescribeShareGroupOffsetsResponse{} },
			rest: func(n names) (string, string, string) {
				return "GET", "/v1/share-groups/" + n.group + "/offsets", "" // all topics: a repeated field is no query parameter
			},
			needs: groupAnd(opDescribe, opDescribe), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
			okBody: func(t *testing.T, m proto.Message) {
				p := m.(*sharelogv1.DescribeShareGroupOffsetsResponse).GetTopics()[0].GetPartitions()[0]
				assert.Equal(t, none, p.GetErrorCode(), p.GetErrorMessage())
				assert.Equal(t, int64(1), p.GetStartOffset())
			},
		},
		rpcCase{
			name: "DescribeSharePartitionState", method: "/sharelog.v1.ShareGroupService/DescribeSharePartitionState",
			req: func(n names) proto.Message {
				return &sharelogv1.DescribeSharePartitionStateRequest{GroupId: n.group, Topics: []*sharelogv1.TopicPartitions{{Topic: n.topic}}}
			},
			resp: func() proto.Message { return &sharelogv1.DescribeSharePartitionStateResponse{} },
			rest: func(n names) (string, string, string) {
				return "GET", "/v1/share-groups/" + n.group + "/partitions:state", ""
			},
			needs: groupAnd(opDescribe, opDescribe), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
			okBody: func(t *testing.T, m proto.Message) {
				p := m.(*sharelogv1.DescribeSharePartitionStateResponse).GetTopics()[0].GetPartitions()[0]
				assert.Equal(t, none, p.GetErrorCode(), p.GetErrorMessage())
			},
		},
		rpcCase{
			name: "AlterShareGroupOffsets", method: "/sharelog.v1.ShareGroupService/AlterShareGroupOffsets",
			req: func(n names) proto.Message {
				return &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: n.group, Topics: []*sharelogv1.AlterShareGroupOffsetsTopic{
					{Topic: n.topic, Partitions: []*sharelogv1.AlterShareGroupOffsetsPartition{{Partition: 0, StartOffset: 2}}}}}
			},
			resp: func() proto.Message { return &sharelogv1.AlterShareGroupOffsetsResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/share-groups/" + n.group + "/offsets:alter", `{"topics":[{"topic":"` + n.topic + `","partitions":[{"partition":0,"startOffset":"2"}]}]}`
			},
			needs: groupAnd(opRead, opRead), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
			okBody: func(t *testing.T, m proto.Message) {
				p := m.(*sharelogv1.AlterShareGroupOffsetsResponse).GetTopics()[0].GetPartitions()[0]
				assert.Equal(t, none, p.GetErrorCode(), p.GetErrorMessage())
			},
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.Equal(t, int64(1), s.groupStartOffset(t, n)) },
		},
		rpcCase{
			name: "DeleteShareGroupOffsets", method: "/sharelog.v1.ShareGroupService/DeleteShareGroupOffsets",
			req: func(n names) proto.Message {
				return &sharelogv1.DeleteShareGroupOffsetsRequest{GroupId: n.group, Topics: []string{n.topic}}
			},
			resp: func() proto.Message { return &sharelogv1.DeleteShareGroupOffsetsResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/share-groups/" + n.group + "/offsets:delete", `{"topics":["` + n.topic + `"]}`
			},
			needs: groupOnly(opDelete), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup:     func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.Equal(t, int64(1), s.groupStartOffset(t, n)) },
		},
		rpcCase{
			name: "DeleteShareGroup", method: "/sharelog.v1.ShareGroupService/DeleteShareGroup",
			req:   func(n names) proto.Message { return &sharelogv1.DeleteShareGroupRequest{GroupId: n.group} },
			resp:  func() proto.Message { return &sharelogv1.DeleteShareGroupResponse{} },
			rest:  func(n names) (string, string, string) { return "DELETE", "/v1/share-groups/" + n.group, "" },
			needs: groupOnly(opDelete), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup:     func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.True(t, s.groupExists(t, n.group)) },
		},
		rpcCase{
			name: "GetShareGroupConfig", method: "/sharelog.v1.ShareGroupService/GetShareGroupConfig",
			req:   func(n names) proto.Message { return &sharelogv1.GetShareGroupConfigRequest{GroupId: n.group} },
			resp:  func() proto.Message { return &sharelogv1.GetShareGroupConfigResponse{} },
			rest:  func(n names) (string, string, string) { return "GET", "/v1/share-groups/" + n.group + "/config", "" },
			needs: groupOnly(opDescribeConfigs), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
		},
		rpcCase{
			name: "UpdateShareGroupConfig", method: "/sharelog.v1.ShareGroupService/UpdateShareGroupConfig",
			req: func(n names) proto.Message {
				return &sharelogv1.UpdateShareGroupConfigRequest{GroupId: n.group, Config: &sharelogv1.ShareGroupConfig{DeliveryCountLimit: proto.Int32(3)}}
			},
			resp: func() proto.Message { return &sharelogv1.UpdateShareGroupConfigResponse{} },
			rest: func(n names) (string, string, string) {
				return "PATCH", "/v1/share-groups/" + n.group + "/config", `{"config":{"deliveryCountLimit":3}}`
			},
			needs: groupOnly(opAlterConfigs), deniedReason: "GROUP_AUTHORIZATION_FAILED",
			setup: func(t *testing.T, s *authzStack, n names) { s.setupGroup(t, n) },
			unchanged: func(t *testing.T, s *authzStack, n names) {
				resp, err := s.sg.GetShareGroupConfig(s.admin, &sharelogv1.GetShareGroupConfigRequest{GroupId: n.group})
				require.NoError(t, err)
				assert.NotEqual(t, int32(3), resp.GetConfig().GetDeliveryCountLimit())
			},
		},
		rpcCase{
			name: "CreateAcls", method: "/sharelog.v1.AclService/CreateAcls",
			req: func(n names) proto.Message {
				return &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{{Principal: "User:other", ResourceType: rtTopic,
					PatternType: literal, ResourceName: n.topic, Operation: opRead, Permission: allow}}}
			},
			resp: func() proto.Message { return &sharelogv1.CreateAclsResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/acls", `{"bindings":[{"principal":"User:other","resourceType":"RESOURCE_TYPE_TOPIC","patternType":"PATTERN_TYPE_LITERAL","resourceName":"` +
					n.topic + `","operation":"ACL_OPERATION_READ","permission":"ACL_PERMISSION_ALLOW"}]}`
			},
			needs: func(names) []*sharelogv1.AclBinding {
				return []*sharelogv1.AclBinding{acl(rtCluster, "kafka-cluster", opAlter)}
			},
			deniedReason: "CLUSTER_AUTHORIZATION_FAILED",
			okBody: func(t *testing.T, m proto.Message) {
				assert.Equal(t, none, m.(*sharelogv1.CreateAclsResponse).GetResults()[0].GetErrorCode())
			},
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.Zero(t, s.userBindings(t, n.topic)) },
		},
		rpcCase{
			name: "DescribeAcls", method: "/sharelog.v1.AclService/DescribeAcls",
			req:  func(names) proto.Message { return &sharelogv1.DescribeAclsRequest{} },
			resp: func() proto.Message { return &sharelogv1.DescribeAclsResponse{} },
			rest: func(names) (string, string, string) { return "GET", "/v1/acls", "" },
			needs: func(names) []*sharelogv1.AclBinding {
				return []*sharelogv1.AclBinding{acl(rtCluster, "kafka-cluster", opDescribe)}
			},
			deniedReason: "CLUSTER_AUTHORIZATION_FAILED",
			okBody: func(t *testing.T, m proto.Message) {
				assert.NotEmpty(t, m.(*sharelogv1.DescribeAclsResponse).GetBindings())
			},
		},
		rpcCase{
			name: "DeleteAcls", method: "/sharelog.v1.AclService/DeleteAcls",
			req: func(n names) proto.Message {
				return &sharelogv1.DeleteAclsRequest{Filters: []*sharelogv1.AclBindingFilter{{Principal: "User:other", ResourceName: n.topic}}}
			},
			resp: func() proto.Message { return &sharelogv1.DeleteAclsResponse{} },
			rest: func(n names) (string, string, string) {
				return "POST", "/v1/acls:delete", `{"filters":[{"principal":"User:other","resourceName":"` + n.topic + `"}]}`
			},
			needs: func(names) []*sharelogv1.AclBinding {
				return []*sharelogv1.AclBinding{acl(rtCluster, "kafka-cluster", opAlter)}
			},
			setup: func(t *testing.T, s *authzStack, n names) {
				_, err := s.acls.CreateAcls(s.admin, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{{Principal: "User:other",
					ResourceType: rtTopic, PatternType: literal, ResourceName: n.topic, Operation: opRead, Permission: allow}}})
				require.NoError(t, err)
			},
			deniedReason: "CLUSTER_AUTHORIZATION_FAILED",
			okBody: func(t *testing.T, m proto.Message) {
				assert.Len(t, m.(*sharelogv1.DeleteAclsResponse).GetResults()[0].GetMatchingBindings(), 1)
			},
			unchanged: func(t *testing.T, s *authzStack, n names) { assert.Equal(t, 1, s.userBindings(t, n.topic)) },
		},
	)
	return cases
}

// invoke runs one case's call as token over transport and returns the
// decoded response or the error's (code, reason).
type outcome struct {
	resp   proto.Message
	code   codes.Code
	http   int
	reason string
}

func (s *authzStack) invoke(t *testing.T, c rpcCase, transport string, n names) outcome {
	t.Helper()
	out := outcome{resp: c.resp()}
	defer func() {
		if c.advancesEpoch && out.resp != nil {
			*n.epoch++
		}
	}()
	if transport == "grpc" {
		err := s.conn.Invoke(s.user, c.method, c.req(n), out.resp)
		if err != nil {
			out.code = statusCode(err)
			out.reason = reasonOf(err)
			out.resp = nil
		}
		return out
	}
	method, path, body := c.rest(n)
	st, raw := s.restCall(t, userToken, method, path, body)
	out.http = st
	if st != http.StatusOK {
		var e struct {
			Details []struct {
				Type   string `json:"@type"`
				Reason string `json:"reason"`
			} `json:"details"`
		}
		require.NoError(t, json.Unmarshal(raw, &e), "body: %s", raw)
		for _, d := range e.Details {
			if d.Type == "type.googleapis.com/google.rpc.ErrorInfo" {
				out.reason = d.Reason
			}
		}
		out.resp = nil
		return out
	}
	require.NoError(t, protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(raw, out.resp), "body: %s", raw)
	return out
}

func TestAuthorizationMatrix(t *testing.T) {
	s := newAuthzStack(t)
	for _, c := range rpcCases() {
		for _, transport := range []string{"grpc", "rest"} {
			t.Run(c.name+"/"+transport, func(t *testing.T) {
				n := names{topic: "t-" + strings.ToLower(c.name) + "-" + transport, group: "g-" + strings.ToLower(c.name) + "-" + transport, epoch: new(int32)}
				s.grant(t)
				if c.setup != nil {
					c.setup(t, s, n)
				}
				// Without the permission: the reason, and nothing changed.
				got := s.invoke(t, c, transport, n)
				if c.deniedReason != "" {
					assert.Equal(t, c.deniedReason, got.reason)
					if transport == "grpc" {
						assert.Equal(t, codes.PermissionDenied, got.code)
					} else {
						assert.Equal(t, http.StatusForbidden, got.http)
					}
				} else {
					require.NotNil(t, got.resp, "reason %s", got.reason)
					c.deniedBody(t, got.resp)
				}
				if c.unchanged != nil {
					c.unchanged(t, s, n)
				}
				// Every needed permission but one: still refused.
				needs := c.needs(n)
				for i := range needs {
					if len(needs) == 1 {
						break
					}
					s.grant(t, append(append([]*sharelogv1.AclBinding{}, needs[:i]...), needs[i+1:]...)...)
					got := s.invoke(t, c, transport, n)
					if got.resp != nil {
						assertPartitionDenied(t, transport, got.resp)
					} else {
						assert.Contains(t, []string{"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"}, got.reason)
					}
				}
				if c.unchanged != nil {
					c.unchanged(t, s, n)
				}
				// With exactly the needed permissions: success.
				s.grant(t, needs...)
				got = s.invoke(t, c, transport, n)
				require.NotNil(t, got.resp, "reason %q", got.reason)
				if c.okBody != nil {
					c.okBody(t, got.resp)
				}
			})
		}
	}
}

// assertPartitionDenied checks that a response carries
// TOPIC_AUTHORIZATION_FAILED in its first partition entry.
func assertPartitionDenied(t *testing.T, transport string, m proto.Message) {
	t.Helper()
	var code sharelogv1.ErrorCode
	switch m.(type) {
	case *sharelogv1.DescribeShareGroupOffsetsResponse, *sharelogv1.DescribeSharePartitionStateResponse:
		if transport == "rest" {
			// All topics asked for: the undescribable one is left out.
			assert.Empty(t, m.ProtoReflect().Get(m.ProtoReflect().Descriptor().Fields().ByName("topics")).List().Len())
			return
		}
	}
	switch r := m.(type) {
	case *sharelogv1.ShareFetchResponse:
		code = r.GetResponses()[0].GetPartitions()[0].GetErrorCode()
	case *sharelogv1.ShareAcknowledgeResponse:
		code = r.GetResponses()[0].GetPartitions()[0].GetErrorCode()
	case *sharelogv1.DescribeShareGroupOffsetsResponse:
		code = r.GetTopics()[0].GetPartitions()[0].GetErrorCode()
	case *sharelogv1.DescribeSharePartitionStateResponse:
		code = r.GetTopics()[0].GetPartitions()[0].GetErrorCode()
	case *sharelogv1.AlterShareGroupOffsetsResponse:
		code = r.GetTopics()[0].GetPartitions()[0].GetErrorCode()
	case *sharelogv1.ShareGroupHeartbeatResponse:
		t.Fatalf("heartbeat without DESCRIBE on its only topic succeeded: %v", r)
	default:
		t.Fatalf("unexpected success %T: %v", m, m)
	}
	assert.Equal(t, topicAuthFailed, code)
}

// reasonOf is the ErrorInfo reason of a gRPC error, or "".
func reasonOf(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
