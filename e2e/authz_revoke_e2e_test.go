package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// An ACL change takes effect on the next request; a change stream is one
// request that may last for days, so a READ revoked while it is open must
// stop it before it sends any later event, not let it tail the topic
// forever.
func TestChangeStreamStopsWhenReadRevoked(t *testing.T) {
	s := newAuthzStack(t)
	s.setupTopic(t, "tailed", 0)
	produce := func(key string) {
		_, err := s.log.Produce(s.admin, &sharelogv1.ProduceRequest{Topic: "tailed", Partition: proto.Int32(0),
			Records: []*sharelogv1.Record{{Key: []byte(key), Value: []byte("v")}}})
		require.NoError(t, err)
	}
	produce("before")
	s.grant(t, acl(rtTopic, "tailed", opRead))

	stream, err := sharelogv1.NewChangeStreamServiceClient(s.conn).StreamChanges(s.user,
		&sharelogv1.StreamChangesRequest{Topic: "tailed", Partition: 0, StartOffset: 0})
	require.NoError(t, err)
	var got []int64
	for len(got) == 0 {
		resp, err := stream.Recv()
		require.NoError(t, err)
		for _, ev := range resp.GetEvents() {
			if m := ev.GetMutation(); m != nil {
				got = append(got, m.GetOffset())
			}
		}
	}
	require.Equal(t, []int64{0}, got)

	s.grant(t) // the user's bindings are gone
	produce("after the revocation")
	for {
		resp, err := stream.Recv()
		if err != nil {
			requireReason(t, err, codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
			return
		}
		for _, ev := range resp.GetEvents() {
			require.Nil(t, ev.GetMutation(), "an event after READ was revoked: %v", ev)
		}
	}
}

// With --dlq-auto-create-topics the server creates a group's missing
// dead-letter topic on the group's behalf: naming one then also needs
// what CreateTopic needs (CREATE on the cluster or on the topic), or WRITE
// on a name prefix would let a principal create topics.
func TestDeadLetterAutoCreateNeedsCreate(t *testing.T) {
	tokens := writeTokens(t, t.TempDir())
	st := newStack(t, app.Options{}, func(c *app.Config) {
		c.AuthTokensFile = tokens
		c.Authorizer = app.AuthorizerACL
		c.SuperUsers = []string{"User:token-1"}
		c.DLQAutoCreateTopics = true
	})
	bearer := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	s := &authzStack{stack: st, admin: bearer(adminToken), user: bearer(userToken),
		acls: sharelogv1.NewAclServiceClient(st.conn), sg: sharelogv1.NewShareGroupServiceClient(st.conn)}
	s.setupTopic(t, "q", 1)
	_, err := s.sg.UpdateShareGroupConfig(s.admin, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
		Config: &sharelogv1.ShareGroupConfig{DeliveryCountLimit: proto.Int32(3)}})
	require.NoError(t, err)

	update := func() error {
		_, err := s.sg.UpdateShareGroupConfig(s.user, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "g",
			Config: &sharelogv1.ShareGroupConfig{DeadLetterTopic: proto.String("dlq.made-up")}})
		return err
	}
	dlqOf := func() string {
		c, err := s.sg.GetShareGroupConfig(s.admin, &sharelogv1.GetShareGroupConfigRequest{GroupId: "g"})
		require.NoError(t, err)
		return c.GetConfig().GetDeadLetterTopic()
	}
	s.grant(t, acl(rtGroup, "g", opAlterConfigs), &sharelogv1.AclBinding{Principal: userName, ResourceType: rtTopic,
		PatternType: prefixed, ResourceName: "dlq.", Operation: opWrite, Permission: allow})
	requireReason(t, update(), codes.PermissionDenied, "TOPIC_AUTHORIZATION_FAILED")
	assert.Empty(t, dlqOf(), "a refused update changes nothing")

	s.grant(t, acl(rtGroup, "g", opAlterConfigs), acl(rtTopic, "dlq.made-up", opWrite), acl(rtTopic, "dlq.made-up", opCreate))
	require.NoError(t, update(), "WRITE and CREATE on the topic")
	assert.Equal(t, "dlq.made-up", dlqOf())
}
