package server_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
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
