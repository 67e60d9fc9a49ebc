package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

func (s *authzStack) topicNames(t *testing.T, ctx context.Context) []string {
	resp, err := s.log.ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
	require.NoError(t, err)
	var out []string
	for _, tp := range resp.GetTopics() {
		out = append(out, tp.GetName())
	}
	return out
}

func TestAuthorizationListFiltering(t *testing.T) {
	s := newAuthzStack(t)
	for _, n := range []string{"alpha", "beta.1", "beta.2", "gamma"} {
		s.setupTopic(t, n, 0)
		s.setupGroup(t, names{topic: "x-" + n, group: "grp-" + n})
	}
	s.grant(t,
		acl(rtTopic, "alpha", opRead), // READ implies DESCRIBE
		&sharelogv1.AclBinding{Principal: userName, ResourceType: rtTopic, PatternType: prefixed, ResourceName: "beta.", Operation: opDescribe, Permission: allow},
		&sharelogv1.AclBinding{Principal: userName, ResourceType: rtTopic, PatternType: literal, ResourceName: "beta.2", Operation: opDescribe, Permission: deny},
		acl(rtGroup, "grp-alpha", opDescribe),
		acl(rtGroup, "grp-hb", opRead),
	)
	assert.Equal(t, []string{"alpha", "beta.1"}, s.topicNames(t, s.user))
	assert.Len(t, s.topicNames(t, s.admin), 8, "the super user sees everything")

	groups, err := s.sg.ListShareGroups(s.user, &sharelogv1.ListShareGroupsRequest{})
	require.NoError(t, err)
	require.Len(t, groups.GetGroups(), 1)
	assert.Equal(t, "grp-alpha", groups.GetGroups()[0].GetGroupId())

	// REST filters the same way.
	st, raw := s.restCall(t, userToken, "GET", "/v1/topics", "")
	require.Equal(t, http.StatusOK, st)
	var listed struct{ Topics []struct{ Name string } }
	require.NoError(t, json.Unmarshal(raw, &listed))
	assert.Len(t, listed.Topics, 2)

	// DescribeCluster needs no permission of its own and leaves out, as the
	// lists do, the topics and groups the caller may not describe.
	dc, err := s.log.DescribeCluster(s.user, &sharelogv1.DescribeClusterRequest{})
	require.NoError(t, err)
	var dcTopics, dcGroups []string
	for _, p := range dc.GetPartitions() {
		dcTopics = append(dcTopics, p.GetTopic())
	}
	for _, g := range dc.GetGroups() {
		dcGroups = append(dcGroups, g.GetGroupId())
	}
	assert.Equal(t, []string{"alpha", "beta.1"}, dcTopics)
	assert.Equal(t, []string{"grp-alpha"}, dcGroups)
	assert.Len(t, dc.GetInstances(), 1)

	// A heartbeat subscribing to a describable and an undescribable topic
	// subscribes to, and is assigned, the describable one only.
	hb, err := s.sg.ShareGroupHeartbeat(s.user, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "grp-hb", MemberId: "m1",
		SubscribedTopicNames: []string{"alpha", "gamma"}})
	require.NoError(t, err)
	assert.Equal(t, "alpha:0", assignmentOf(hb.GetAssignment()))
	d, err := s.sg.DescribeShareGroup(s.admin, &sharelogv1.DescribeShareGroupRequest{GroupId: "grp-hb"})
	require.NoError(t, err)
	assert.Equal(t, []string{"alpha"}, d.GetMembers()[0].GetSubscribedTopicNames())
	// Only undescribable topics: refused, nothing joined.
	_, err = s.sg.ShareGroupHeartbeat(s.user, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "grp-hb", MemberId: "m2",
		SubscribedTopicNames: []string{"gamma", "missing"}})
	requireReason(t, err, codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
	d, err = s.sg.DescribeShareGroup(s.admin, &sharelogv1.DescribeShareGroupRequest{GroupId: "grp-hb"})
	require.NoError(t, err)
	assert.Len(t, d.GetMembers(), 1)
	// The user may describe the group while its members' topics are all
	// describable to it; once a member subscribes to another topic, the
	// group's description would name it: TOPIC_AUTHORIZATION_FAILED.
	_, err = s.sg.DescribeShareGroup(s.user, &sharelogv1.DescribeShareGroupRequest{GroupId: "grp-hb"})
	require.NoError(t, err)
	_, err = s.sg.ShareGroupHeartbeat(s.admin, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "grp-hb", MemberId: "admin-m",
		SubscribedTopicNames: []string{"gamma"}})
	require.NoError(t, err)
	_, err = s.sg.DescribeShareGroup(s.user, &sharelogv1.DescribeShareGroupRequest{GroupId: "grp-hb"})
	requireReason(t, err, codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")

	// Offsets of every topic of a group leave out the undescribable ones.
	_, err = s.sg.AlterShareGroupOffsets(s.admin, &sharelogv1.AlterShareGroupOffsetsRequest{GroupId: "grp-alpha",
		Topics: []*sharelogv1.AlterShareGroupOffsetsTopic{{Topic: "alpha", Partitions: []*sharelogv1.AlterShareGroupOffsetsPartition{{Partition: 0, StartOffset: 0}}}}})
	require.NoError(t, err)
	offs, err := s.sg.DescribeShareGroupOffsets(s.user, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: "grp-alpha"})
	require.NoError(t, err)
	require.Len(t, offs.GetTopics(), 1)
	assert.Equal(t, "alpha", offs.GetTopics()[0].GetTopic())
}

func TestAuthorizationDenyPrefixedWildcard(t *testing.T) {
	s := newAuthzStack(t)
	for _, n := range []string{"public", "secret.keys", "shared.log"} {
		s.setupTopic(t, n, 1)
	}
	fetch := func(topic string) error {
		_, err := s.log.Fetch(s.user, &sharelogv1.FetchRequest{Topic: topic, Partition: 0})
		return err
	}
	s.grant(t,
		acl(rtTopic, "*", opRead),
		&sharelogv1.AclBinding{Principal: userName, ResourceType: rtTopic, PatternType: prefixed, ResourceName: "secret.", Operation: opRead, Permission: deny},
	)
	require.NoError(t, fetch("public"), "literal * allows every topic")
	requireReason(t, fetch("secret.keys"), codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
	// DENY of READ does not deny DESCRIBE, which READ on * allows.
	_, err := s.log.DescribeTopic(s.user, &sharelogv1.DescribeTopicRequest{Name: "secret.keys"})
	require.NoError(t, err)

	// A binding for every principal (User:*), prefixed.
	s.grant(t)
	_, err = s.acls.CreateAcls(s.admin, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{
		{Principal: "User:*", ResourceType: rtTopic, PatternType: prefixed, ResourceName: "shared.", Operation: opWrite, Permission: allow}}})
	require.NoError(t, err)
	produce := func(topic string) error {
		_, err := s.log.Produce(s.user, &sharelogv1.ProduceRequest{Topic: topic, Records: []*sharelogv1.Record{{Value: []byte("v")}}})
		return err
	}
	require.NoError(t, produce("shared.log"))
	requireReason(t, produce("public"), codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
	// DENY wins over ALLOW ALL on the same topic.
	s.grant(t, acl(rtTopic, "shared.log", opAll),
		&sharelogv1.AclBinding{Principal: userName, ResourceType: rtTopic, PatternType: literal, ResourceName: "shared.log", Operation: opWrite, Permission: deny})
	requireReason(t, produce("shared.log"), codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
	require.NoError(t, fetch("shared.log"), "ALL still allows READ")
	_, err = s.acls.DeleteAcls(s.admin, &sharelogv1.DeleteAclsRequest{Filters: []*sharelogv1.AclBindingFilter{{Principal: "User:*"}}})
	require.NoError(t, err)
}

// TestAuthorizationNoExistenceLeak: a caller without DESCRIBE gets the same
// answer for a topic or group that exists and one that does not.
func TestAuthorizationNoExistenceLeak(t *testing.T) {
	s := newAuthzStack(t)
	s.setupGroup(t, names{topic: "real", group: "realg"})
	s.grant(t, acl(rtGroup, "readable", opRead)) // for ShareFetch's per-partition answer
	type call func(topic, group string) (string, error)
	calls := map[string]call{
		"DescribeTopic": func(tp, _ string) (string, error) {
			_, err := s.log.DescribeTopic(s.user, &sharelogv1.DescribeTopicRequest{Name: tp})
			return "", err
		},
		"DeleteTopic": func(tp, _ string) (string, error) {
			_, err := s.log.DeleteTopic(s.user, &sharelogv1.DeleteTopicRequest{Name: tp})
			return "", err
		},
		"Produce": func(tp, _ string) (string, error) {
			_, err := s.log.Produce(s.user, &sharelogv1.ProduceRequest{Topic: tp, Records: []*sharelogv1.Record{{Value: []byte("v")}}})
			return "", err
		},
		"Fetch": func(tp, _ string) (string, error) {
			_, err := s.log.Fetch(s.user, &sharelogv1.FetchRequest{Topic: tp})
			return "", err
		},
		"ListOffsets": func(tp, _ string) (string, error) {
			_, err := s.log.ListOffsets(s.user, &sharelogv1.ListOffsetsRequest{Topic: tp, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
			return "", err
		},
		"Purge": func(tp, _ string) (string, error) {
			r, err := s.log.Purge(s.user, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: tp, Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 1}}}}})
			return r.GetTopics()[0].GetPartitions()[0].GetErrorCode().String() + strings.ReplaceAll(r.GetTopics()[0].GetPartitions()[0].GetErrorMessage(), tp, "X"), err
		},
		"ShareFetch": func(tp, _ string) (string, error) {
			r, err := s.sg.ShareFetch(s.user, &sharelogv1.ShareFetchRequest{GroupId: "readable", MemberId: "m", Topics: topicReq(tp, part(0))})
			p := r.GetResponses()[0].GetPartitions()[0]
			return p.GetErrorCode().String() + strings.ReplaceAll(p.GetErrorMessage(), tp, "X"), err
		},
		"DescribeShareGroup": func(_, g string) (string, error) {
			_, err := s.sg.DescribeShareGroup(s.user, &sharelogv1.DescribeShareGroupRequest{GroupId: g})
			return "", err
		},
		"DeleteShareGroup": func(_, g string) (string, error) {
			_, err := s.sg.DeleteShareGroup(s.user, &sharelogv1.DeleteShareGroupRequest{GroupId: g})
			return "", err
		},
		"GetShareGroupConfig": func(_, g string) (string, error) {
			_, err := s.sg.GetShareGroupConfig(s.user, &sharelogv1.GetShareGroupConfigRequest{GroupId: g})
			return "", err
		},
	}
	for name, c := range calls {
		t.Run(name, func(t *testing.T) {
			body1, err1 := c("real", "realg")
			body2, err2 := c("nothere", "nothereg")
			assert.Equal(t, body1, body2)
			assert.Equal(t, codesOf(err1), codesOf(err2))
			if err1 != nil {
				assert.Equal(t, codes.PermissionDenied, codesOf(err1))
				m1 := strings.NewReplacer("realg", "G", "real", "X").Replace(err1.Error())
				m2 := strings.NewReplacer("nothereg", "G", "nothere", "X").Replace(err2.Error())
				assert.Equal(t, m1, m2)
			} else {
				assert.Contains(t, body1, "TOPIC_AUTHORIZATION_FAILED")
			}
		})
	}
	assert.True(t, s.topicExists(t, "real"))
	assert.True(t, s.groupExists(t, "realg"))
}

func codesOf(err error) codes.Code { return statusCode(err) }

func TestAuthorizationPartialShareFetch(t *testing.T) {
	s := newAuthzStack(t)
	s.setupGroup(t, names{topic: "ok", group: "g"})
	s.setupTopic(t, "forbidden", 2)
	s.grant(t, acl(rtGroup, "g", opRead), acl(rtTopic, "ok", opRead))
	resp, err := s.sg.ShareFetch(s.user, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m",
		Topics: []*sharelogv1.ShareFetchTopic{{Topic: "ok", Partitions: []*sharelogv1.ShareFetchPartition{part(0)}}, {Topic: "forbidden", Partitions: []*sharelogv1.ShareFetchPartition{part(0)}}}})
	require.NoError(t, err)
	byTopic := map[string]*sharelogv1.ShareFetchPartitionResponse{}
	for _, tr := range resp.GetResponses() {
		byTopic[tr.GetTopic()] = tr.GetPartitions()[0]
	}
	assert.Equal(t, none, byTopic["ok"].GetErrorCode())
	assert.Len(t, byTopic["ok"].GetRecords(), 2)
	assert.Equal(t, topicAuthFailed, byTopic["forbidden"].GetErrorCode())
	assert.Empty(t, byTopic["forbidden"].GetRecords())

	// Purge with one allowed and one refused entry: each answered alone.
	s.grant(t, acl(rtTopic, "ok", opDelete))
	pr, err := s.log.Purge(s.user, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{
		{Topic: "forbidden", Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 1}}},
		{Topic: "ok", Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 1}}},
	}})
	require.NoError(t, err)
	assert.Equal(t, topicAuthFailed, pr.GetTopics()[0].GetPartitions()[0].GetErrorCode())
	assert.Equal(t, none, pr.GetTopics()[1].GetPartitions()[0].GetErrorCode())
	assert.Equal(t, int64(1), pr.GetTopics()[1].GetPartitions()[0].GetLowWatermark())
	tp, err := s.log.DescribeTopic(s.admin, &sharelogv1.DescribeTopicRequest{Name: "forbidden"})
	require.NoError(t, err)
	assert.Zero(t, tp.GetPartitions()[0].GetLogStartOffset())
}

func TestAuthorizationStreamChanges(t *testing.T) {
	s := newAuthzStack(t)
	s.setupTopic(t, "cdc", 0)
	_, err := s.log.Produce(s.admin, &sharelogv1.ProduceRequest{Topic: "cdc", Records: []*sharelogv1.Record{{Key: []byte("k"), Value: []byte("v")}}})
	require.NoError(t, err)
	cl := sharelogv1.NewChangeStreamServiceClient(s.conn)
	stream := func() error {
		st, err := cl.StreamChanges(s.user, &sharelogv1.StreamChangesRequest{Topic: "cdc", EndOffset: proto.Int64(1)})
		require.NoError(t, err)
		for {
			if _, err := st.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	s.grant(t, acl(rtTopic, "cdc", opDescribe))
	requireReason(t, stream(), codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
	st, raw := s.restCall(t, userToken, "GET", "/v1/topics/cdc/partitions/0/changes?endOffset=1", "")
	assert.Equal(t, http.StatusForbidden, st, "%s", raw)
	assert.Contains(t, string(raw), "TOPIC_AUTHORIZATION_FAILED")

	s.grant(t, acl(rtTopic, "cdc", opRead))
	require.NoError(t, stream())
	st, raw = s.restCall(t, userToken, "GET", "/v1/topics/cdc/partitions/0/changes?endOffset=1", "")
	assert.Equal(t, http.StatusOK, st, "%s", raw)
}

func TestAclServiceRules(t *testing.T) {
	s := newAuthzStack(t)
	resp, err := s.acls.CreateAcls(s.admin, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{
		{Principal: "User:a", ResourceType: rtTopic, PatternType: literal, ResourceName: "orders", Operation: opRead, Permission: allow},
		{Principal: "alice", ResourceType: rtTopic, PatternType: literal, ResourceName: "orders", Operation: opRead, Permission: allow},
		{Principal: "User:a", ResourceType: rtTopic, PatternType: sharelogv1.PatternType_PATTERN_TYPE_MATCH, ResourceName: "orders", Operation: opRead, Permission: allow},
		{Principal: "User:a", ResourceType: rtTopic, PatternType: prefixed, ResourceName: "ord", Operation: opWrite, Permission: deny},
		{Principal: "User:a", ResourceType: rtTopic, PatternType: literal, ResourceName: "x", Operation: sharelogv1.AclOperation(77), Permission: allow},
	}})
	require.NoError(t, err)
	var codesGot []sharelogv1.ErrorCode
	for _, r := range resp.GetResults() {
		codesGot = append(codesGot, r.GetErrorCode())
	}
	invalid := sharelogv1.ErrorCode_ERROR_CODE_INVALID_REQUEST
	assert.Equal(t, []sharelogv1.ErrorCode{none, invalid, invalid, none, invalid}, codesGot)

	// MATCH finds the literal and the prefixed binding applying to "orders".
	d, err := s.acls.DescribeAcls(s.admin, &sharelogv1.DescribeAclsRequest{Filter: &sharelogv1.AclBindingFilter{
		ResourceType: rtTopic, PatternType: sharelogv1.PatternType_PATTERN_TYPE_MATCH, ResourceName: "orders"}})
	require.NoError(t, err)
	assert.Len(t, d.GetBindings(), 2)
	_, err = s.acls.DescribeAcls(s.admin, &sharelogv1.DescribeAclsRequest{Filter: &sharelogv1.AclBindingFilter{Principal: "nobody"}})
	requireReason(t, err, codes.InvalidArgument, "INVALID_REQUEST")

	// REST: the filter as query parameters, protobuf JSON names.
	st, raw := s.restCall(t, adminToken, "GET", "/v1/acls?filter.principal=User:a&filter.permission=ACL_PERMISSION_DENY", "")
	require.Equal(t, http.StatusOK, st, "%s", raw)
	assert.JSONEq(t, `{"bindings":[{"principal":"User:a","resourceType":"RESOURCE_TYPE_TOPIC","patternType":"PATTERN_TYPE_PREFIXED",
		"resourceName":"ord","operation":"ACL_OPERATION_WRITE","permission":"ACL_PERMISSION_DENY"}]}`, string(raw))

	st, raw = s.restCall(t, adminToken, "POST", "/v1/acls:delete", `{"filters":[{"principal":"User:a","patternType":"PATTERN_TYPE_PREFIXED"},{"principal":"bad"}]}`)
	require.Equal(t, http.StatusOK, st, "%s", raw)
	var del struct {
		Results []struct {
			ErrorCode        string
			MatchingBindings []map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(raw, &del))
	require.Len(t, del.Results, 2)
	assert.Len(t, del.Results[0].MatchingBindings, 1)
	assert.Equal(t, "ERROR_CODE_INVALID_REQUEST", del.Results[1].ErrorCode)
	d, err = s.acls.DescribeAcls(s.admin, &sharelogv1.DescribeAclsRequest{})
	require.NoError(t, err)
	assert.Len(t, d.GetBindings(), 1)
}

func TestAuthorizerConfigRefused(t *testing.T) {
	for name, c := range map[string]struct {
		mutate func(*app.Config)
		want   string
	}{
		"unknown":    {func(c *app.Config) { c.Authorizer = "ranger" }, "--authorizer must be none or acl"},
		"jetstream":  {func(c *app.Config) { c.Authorizer, c.Cluster.Store = app.AuthorizerACL, app.StoreJetStream }, "not supported with --store jetstream"},
		"super user": {func(c *app.Config) { c.SuperUsers = []string{"admin"} }, "--super-users"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := app.DefaultConfig()
			c.mutate(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	// Every Kafka API is authorized: acl with the Kafka listener, with or
	// without tokens, starts.
	cfg := app.DefaultConfig()
	cfg.Authorizer, cfg.KafkaAddr, cfg.AuthTokensFile = app.AuthorizerACL, "127.0.0.1:0", "t"
	require.NoError(t, cfg.Validate())
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		if m["logger"] == "audit" {
			out = append(out, m)
		}
	}
	return out
}

func TestAuditLog(t *testing.T) {
	var logs syncBuffer
	tokens := writeTokens(t, t.TempDir())
	st := testsupport.NewStack(t, testsupport.StackOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, func(cfg *app.Config) {
		cfg.AuthTokensFile, cfg.Authorizer, cfg.SuperUsers = tokens, app.AuthorizerACL, []string{"User:token-1"}
	})
	conn := st.Conn
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	user := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+userToken)
	lc := sharelogv1.NewLogServiceClient(conn)

	_, err := lc.CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: "audited", Partitions: 1})
	require.NoError(t, err)
	_, err = lc.Produce(user, &sharelogv1.ProduceRequest{Topic: "audited", Records: []*sharelogv1.Record{{Value: []byte("v")}}})
	requireReason(t, err, codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
	_, err = sharelogv1.NewAclServiceClient(conn).CreateAcls(admin, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{acl(rtTopic, "audited", opWrite)}})
	require.NoError(t, err)
	_, err = lc.DeleteTopic(admin, &sharelogv1.DeleteTopicRequest{Name: "audited"})
	require.NoError(t, err)

	lines := logs.lines(t)
	require.Len(t, lines, 4, "%v", lines)
	pick := func(m map[string]any) [5]any {
		return [5]any{m["principal"], m["operation"], m["resource_type"], m["resource"], m["outcome"]}
	}
	assert.Equal(t, [5]any{"User:token-1", "CreateTopic", "TOPIC", "audited", "ok"}, pick(lines[0]))
	assert.Equal(t, [5]any{"User:token-2", "WRITE", "TOPIC", "audited", "denied"}, pick(lines[1]))
	assert.Equal(t, [5]any{"User:token-1", "CreateAcls", "CLUSTER", "kafka-cluster", "ok"}, pick(lines[2]))
	assert.Contains(t, lines[2]["binding"], "principal=User:token-2")
	assert.Equal(t, [5]any{"User:token-1", "DeleteTopic", "TOPIC", "audited", "ok"}, pick(lines[3]))
	logs.mu.Lock()
	defer logs.mu.Unlock()
	assert.NotContains(t, logs.buf.String(), userToken, "tokens are never logged")
	assert.NotContains(t, logs.buf.String(), adminToken)
}

// TestAuthorizationSessionPartitionsRechecked: a permission revoked while a
// share session holds the partition applies to the next incremental
// ShareFetch, which names no partition; granted again, the session goes on.
func TestAuthorizationSessionPartitionsRechecked(t *testing.T) {
	s := newAuthzStack(t)
	s.setupGroup(t, names{topic: "held", group: "g"})
	s.grant(t, acl(rtGroup, "g", opRead), acl(rtTopic, "held", opRead))
	fetch := func(epoch int32, topics []*sharelogv1.ShareFetchTopic) *sharelogv1.ShareFetchPartitionResponse {
		t.Helper()
		resp, err := s.sg.ShareFetch(s.user, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: epoch, Topics: topics})
		require.NoError(t, err)
		require.Len(t, resp.GetResponses(), 1)
		require.Len(t, resp.GetResponses()[0].GetPartitions(), 1)
		return resp.GetResponses()[0].GetPartitions()[0]
	}
	first := fetch(0, []*sharelogv1.ShareFetchTopic{{Topic: "held", Partitions: []*sharelogv1.ShareFetchPartition{part(0)}}})
	require.Equal(t, none, first.GetErrorCode())
	require.Len(t, first.GetRecords(), 2)
	_, err := s.log.Produce(s.admin, &sharelogv1.ProduceRequest{Topic: "held", Partition: proto.Int32(0), Records: []*sharelogv1.Record{{Value: []byte("new")}}})
	require.NoError(t, err)

	s.grant(t, acl(rtGroup, "g", opRead)) // READ on the topic revoked
	denied := fetch(1, nil)
	assert.Equal(t, topicAuthFailed, denied.GetErrorCode())
	assert.Empty(t, denied.GetRecords(), "nothing acquired from a partition the caller may no longer read")
	assert.Empty(t, denied.GetAcquiredRecords())

	s.grant(t, acl(rtGroup, "g", opRead), acl(rtTopic, "held", opRead))
	again := fetch(2, nil)
	assert.Equal(t, none, again.GetErrorCode())
	require.Len(t, again.GetRecords(), 1, "the partition stayed in the session")
	assert.Equal(t, int64(3), again.GetRecords()[0].GetOffset())
}

// TestAuthorizationDeadLetterTopicNeedsWrite: the server writes a group's
// dead-letter topic on its behalf, so naming one needs WRITE on it.
func TestAuthorizationDeadLetterTopicNeedsWrite(t *testing.T) {
	s := newAuthzStack(t)
	s.setupGroup(t, names{topic: "src", group: "g"})
	s.setupTopic(t, "dlq.g", 0)
	s.grant(t, acl(rtGroup, "g", opAlterConfigs))
	update := func() error {
		_, err := s.sg.UpdateShareGroupConfig(s.user, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
			Config: &sharelogv1.ShareGroupConfig{DeadLetterTopic: proto.String("dlq.g")}})
		return err
	}
	requireReason(t, update(), codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
	cfg, err := s.sg.GetShareGroupConfig(s.admin, &sharelogv1.GetShareGroupConfigRequest{GroupId: "g"})
	require.NoError(t, err)
	assert.Empty(t, cfg.GetConfig().GetDeadLetterTopic(), "the refused update changed nothing")

	s.grant(t, acl(rtGroup, "g", opAlterConfigs), acl(rtTopic, "dlq.g", opWrite))
	require.NoError(t, update())
	cfg, err = s.sg.GetShareGroupConfig(s.admin, &sharelogv1.GetShareGroupConfigRequest{GroupId: "g"})
	require.NoError(t, err)
	assert.Equal(t, "dlq.g", cfg.GetConfig().GetDeadLetterTopic())
}
