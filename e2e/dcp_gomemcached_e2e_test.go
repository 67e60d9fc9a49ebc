package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/couchbase/gomemcached"
	memcached "github.com/couchbase/gomemcached/client"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// uprString renders a gomemcached UprEvent in the notation of
// dcp_helpers_test.go.
func uprString(t testing.TB, e *memcached.UprEvent) string {
	t.Helper()
	switch e.Opcode {
	case gomemcached.UPR_STREAMREQ:
		return fmt.Sprintf("streamreq(%v)", e.Status)
	case gomemcached.UPR_SNAPSHOT:
		src := "MEMORY"
		if e.SnapshotType&0x02 != 0 {
			src = "DISK"
		}
		return fmt.Sprintf("marker(%d..%d, %s)", e.SnapstartSeq, e.SnapendSeq, src)
	case gomemcached.UPR_MUTATION:
		return fmt.Sprintf("mut(%s@%d)", e.Key, e.Seqno)
	case gomemcached.UPR_DELETION:
		return fmt.Sprintf("del(%s@%d)", e.Key, e.Seqno)
	case gomemcached.DCP_SEQNO_ADV:
		return fmt.Sprintf("adv(%d)", e.Seqno)
	case gomemcached.DCP_OSO_SNAPSHOT:
		begin, err := e.GetOsoBegin()
		require.NoError(t, err)
		if begin {
			return "oso(START)"
		}
		return "oso(END)"
	case gomemcached.UPR_STREAMEND:
		return fmt.Sprintf("end(%d)", e.Flags)
	}
	return fmt.Sprintf("opcode(0x%02x)", byte(e.Opcode))
}

// uprFeed connects gomemcached's client, logs in (user "" = anonymous),
// selects bucket and opens an UprFeed with features; it returns the
// client's failover logs of vbs too.
func uprFeed(t *testing.T, addr, bucket, user, pass string, scram bool, features memcached.UprFeatures, vbs ...uint16) (*memcached.UprFeed, map[uint16]*memcached.FailoverLog) {
	t.Helper()
	mc, err := memcached.Connect("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { mc.Close() })
	if user != "" {
		if scram {
			_, err = mc.AuthScramSha(user, pass)
		} else {
			_, err = mc.Auth(user, pass)
		}
		require.NoError(t, err)
	}
	_, err = mc.SelectBucket(bucket)
	require.NoError(t, err)
	fl, err := mc.UprGetFailoverLog(vbs)
	require.NoError(t, err)
	feed, err := mc.NewUprFeedWithConfig(false)
	require.NoError(t, err)
	t.Cleanup(feed.Close)
	err, _ = feed.UprOpenWithFeatures(fmt.Sprintf("gomemcached-%p", t), 0, 1<<20, features)
	require.NoError(t, err)
	require.NoError(t, feed.StartFeed())
	return feed, fl
}

// nextUpr is the feed's next event, failing after evTimeout.
func nextUpr(t *testing.T, feed *memcached.UprFeed) *memcached.UprEvent {
	t.Helper()
	select {
	case e, ok := <-feed.GetUprEventCh():
		require.True(t, ok, "the feed closed: %v", feed.GetError())
		return e
	case <-time.After(evTimeout):
		t.Fatalf("no UPR event within %s", evTimeout)
	}
	return nil
}

// TestDCPGomemcachedUprFeed: gomemcached's UprFeed (the client of goxdcr
// and the indexer) backfills with an OSO snapshot (enable_out_of_order_snapshots
// = true: no SEQNO_ADVANCED), tails, closes a stream with a STREAM_END,
// and backfills another vBucket in order; over SASL PLAIN and SCRAM.
func TestDCPGomemcachedUprFeed(t *testing.T) {
	tokens := writeTokens(t, t.TempDir())
	s := dcpStack(t, func(c *app.Config) { c.AuthTokensFile = tokens })
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	_, err := s.log.CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: "dcp-upr", Partitions: 2})
	require.NoError(t, err)
	produce := func(p int32, kvs ...string) {
		req := &sharelogv1.ProduceRequest{Topic: "dcp-upr", Partition: &p}
		for i := 0; i+1 < len(kvs); i += 2 {
			r := &sharelogv1.Record{Key: []byte(kvs[i])}
			if kvs[i+1] != "" {
				r.Value = []byte(kvs[i+1])
			}
			req.Records = append(req.Records, r)
		}
		_, err := s.log.Produce(admin, req)
		require.NoError(t, err)
	}
	var kvs []string
	for _, r := range exampleRecords {
		kvs = append(kvs, r.key, r.value)
	}
	produce(0, kvs...)
	produce(0, "u/z", "0") // seqno 9: the OSO snapshot's greatest seqno is E, no SEQNO_ADVANCED is due anyway
	produce(1, "p1-key-0", "v-0", "p1-key-1", "v-1", "p1-key-2", "v-2")
	addr := s.srv.DCPAddr()

	t.Run("oso", func(t *testing.T) {
		feed, fl := uprFeed(t, addr, "dcp-upr", "token-1", adminToken, false,
			memcached.UprFeatures{EnableOso: true, SendStreamEndOnClose: true}, 0)
		vbuuid, _, err := fl[0].Latest()
		require.NoError(t, err)
		require.NoError(t, feed.UprRequestStream(0, 7, 0, vbuuid, 0, math.MaxUint64, 0, 0))
		require.Equal(t, "streamreq(SUCCESS)", uprString(t, nextUpr(t, feed)))
		require.Equal(t, "oso(START)", uprString(t, nextUpr(t, feed)))
		var got []string
		for range 6 {
			got = append(got, uprString(t, nextUpr(t, feed)))
		}
		slices.Sort(got)
		require.Equal(t, []string{"del(u/b@5)", "del(x/z@8)", "mut(u/a@4)", "mut(u/c@7)", "mut(u/z@9)", "mut(x/y@6)"}, got)
		require.Equal(t, "oso(END)", uprString(t, nextUpr(t, feed)))
		produce(0, "u/d", "4")
		require.Equal(t, "marker(10..10, MEMORY)", uprString(t, nextUpr(t, feed)))
		e := nextUpr(t, feed)
		require.Equal(t, "mut(u/d@10)", uprString(t, e))
		require.Equal(t, "4", string(e.Value))
		require.NoError(t, feed.CloseStream(0, 7))
		// gomemcached turns the CLOSE_STREAM answer into a STREAM_END of
		// its own (flags 0); the server's STREAM_END (closed) follows.
		require.Equal(t, "end(0)", uprString(t, nextUpr(t, feed)))
		require.Equal(t, "end(1)", uprString(t, nextUpr(t, feed)), "STREAM_END closed")
	})
	t.Run("ordered over SCRAM", func(t *testing.T) {
		users := newUserClient(t, s)
		users.setPassword(t, "bob", "SCRAM-SHA-512", "bob-secret")
		feed, fl := uprFeed(t, addr, "dcp-upr", "bob", "bob-secret", true, memcached.UprFeatures{}, 1)
		vbuuid, _, err := fl[1].Latest()
		require.NoError(t, err)
		require.NoError(t, feed.UprRequestStream(1, 9, 0, vbuuid, 0, 3, 0, 0))
		want := []string{"streamreq(SUCCESS)", "marker(1..3, DISK)", "mut(p1-key-0@1)", "mut(p1-key-1@2)", "mut(p1-key-2@3)", "end(0)"}
		for _, w := range want {
			require.Equal(t, w, uprString(t, nextUpr(t, feed)))
		}
	})
}

// TestDCPReadRevoked: with --authorizer acl, a stream whose READ is
// revoked ends with STREAM_END lost privileges (8) before it sends the
// events it held.
func TestDCPReadRevoked(t *testing.T) {
	tokens := writeTokens(t, t.TempDir())
	s := dcpStack(t, func(c *app.Config) {
		c.AuthTokensFile = tokens
		c.Authorizer = app.AuthorizerACL
		c.SuperUsers = []string{"User:token-1"}
	})
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	_, err := s.log.CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: "dcp-revoke", Partitions: 1})
	require.NoError(t, err)
	acls := sharelogv1.NewAclServiceClient(s.conn)
	_, err = acls.CreateAcls(admin, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{
		{Principal: userName, ResourceType: rtTopic, PatternType: literal, ResourceName: "dcp-revoke", Operation: opRead, Permission: allow}}})
	require.NoError(t, err)
	feed, fl := uprFeed(t, s.srv.DCPAddr(), "dcp-revoke", "token-2", userToken, false, memcached.UprFeatures{}, 0)
	vbuuid, _, err := fl[0].Latest()
	require.NoError(t, err)
	require.NoError(t, feed.UprRequestStream(0, 3, 0, vbuuid, 0, math.MaxUint64, 0, 0))
	require.Equal(t, "streamreq(SUCCESS)", uprString(t, nextUpr(t, feed)))
	p := int32(0)
	produce := func(v string) {
		_, err := s.log.Produce(admin, &sharelogv1.ProduceRequest{Topic: "dcp-revoke", Partition: &p,
			Records: []*sharelogv1.Record{{Key: []byte("k"), Value: []byte(v)}}})
		require.NoError(t, err)
	}
	produce("1")
	require.Equal(t, "marker(1..1, MEMORY)", uprString(t, nextUpr(t, feed)))
	require.Equal(t, "mut(k@1)", uprString(t, nextUpr(t, feed)))
	_, err = acls.DeleteAcls(admin, &sharelogv1.DeleteAclsRequest{Filters: []*sharelogv1.AclBindingFilter{{Principal: userName}}})
	require.NoError(t, err)
	produce("2")
	require.Equal(t, "end(8)", uprString(t, nextUpr(t, feed)), "STREAM_END lost privileges, without the held events")
}
