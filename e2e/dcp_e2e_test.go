package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/couchbase/gocbcore/v10"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// dcpExample creates topic (partitions partitions) with the example
// partition of docs/change-streams.md in partition 0 followed by one
// keyless record (offset 8), so an OSO snapshot ends with SEQNO_ADVANCED,
// and n records key-i=v-i in each other partition.
func (s *stack) dcpExample(t testing.TB, topic string, partitions int32, n int) string {
	t.Helper()
	id := s.exampleTopicN(t, topic, partitions)
	s.produceKV(t, topic, "-", "keyless")
	for p := int32(1); p < partitions; p++ {
		req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &p}
		for i := range n {
			req.Records = append(req.Records, &sharelogv1.Record{Key: fmt.Appendf(nil, "p%d-key-%d", p, i), Value: fmt.Appendf(nil, "v-%d", i)})
		}
		_, err := s.log.Produce(context.Background(), req)
		require.NoError(t, err)
	}
	return id
}

func (s *stack) exampleTopicN(t testing.TB, topic string, partitions int32) string {
	t.Helper()
	info := s.createTopic(t, topic, partitions, nil)
	var kvs []string
	for _, r := range exampleRecords {
		kvs = append(kvs, r.key, r.value)
	}
	s.produceKV(t, topic, kvs...)
	return info.GetTopicId()
}

// TestDCPBackfillGocbcore: gocbcore's DCPAgent backfills every vBucket,
// with OSO snapshots (UseOSOBackfill: true_with_seqno_advanced) and
// ordered ones, then tails live mutations.
func TestDCPBackfillGocbcore(t *testing.T) {
	s, logs := dcpStackLogged(t)
	t.Cleanup(func() {
		// Everything gocbcore's DCPAgent sent was understood.
		require.NotContains(t, logs.String(), "unknown opcode")
		require.Contains(t, logs.String(), "dcp HELLO", "the log is the DCP listener's")
	})
	const parts, n = 4, 50
	s.dcpExample(t, "dcp-backfill", parts, n)
	addr := s.srv.DCPAddr()

	t.Run("oso", func(t *testing.T) {
		a, err := newDCPAgent(t, addr, "dcp-backfill", dcpOpts{oso: true})
		require.NoError(t, err)
		snap, err := a.ConfigSnapshot()
		require.NoError(t, err)
		vbs, err := snap.NumVbuckets()
		require.NoError(t, err)
		require.Equal(t, parts, vbs, "one vBucket per partition")
		o := newObserver()
		for vb := range uint16(parts) {
			fl := failoverLog(t, a, vb)
			require.Len(t, fl, 1)
			_, err := openStream(t, a, o, vb, fl[0].VbUUID, 0, math.MaxUint64)
			require.NoError(t, err)
		}
		// vb 0: every key's latest record, in some order, then
		// SEQNO_ADVANCED to the keyless record's seqno 9 (docs/change-streams.md Ex3).
		require.Equal(t, "oso(START)", o.next(t, 0).String())
		var got []string
		for range 5 {
			got = append(got, o.next(t, 0).String())
		}
		slices.Sort(got)
		require.Equal(t, []string{"del(u/b@5)", "del(x/z@8)", "mut(u/a@4)", "mut(u/c@7)", "mut(x/y@6)"}, got)
		require.Equal(t, "adv(9)", o.next(t, 0).String())
		require.Equal(t, "oso(END)", o.next(t, 0).String())
		o.quiet(t, 0, 100*time.Millisecond)
		for vb := uint16(1); vb < parts; vb++ {
			require.Equal(t, "oso(START)", o.next(t, vb).String())
			keys := map[string]bool{}
			for range n {
				e := o.next(t, vb)
				require.Equal(t, "mut", e.kind, e.String())
				keys[e.key] = true
			}
			require.Len(t, keys, n)
			require.Equal(t, "oso(END)", o.next(t, vb).String())
		}
		// Live tail: after END the position is E (offset 9), the first
		// marker is MEMORY 10..10.
		s.produceKV(t, "dcp-backfill", "u/d", "4")
		require.Equal(t, "marker(10..10, MEMORY)", o.next(t, 0).String())
		e := o.next(t, 0)
		require.Equal(t, "mut(u/d@10)", e.String())
		require.Equal(t, "4", e.value)
		require.NotZero(t, e.cas, "CAS is the record timestamp")
	})

	t.Run("ordered", func(t *testing.T) {
		a, err := newDCPAgent(t, addr, "dcp-backfill", dcpOpts{})
		require.NoError(t, err)
		o := newObserver()
		fl := failoverLog(t, a, 0)
		_, err = openStream(t, a, o, 0, fl[0].VbUUID, 0, math.MaxUint64)
		require.NoError(t, err)
		// Ordered: no deduplication, seqno order; the keyless record is
		// passed over (SEQNO_ADVANCED was not asked for); u/d (produced by
		// the oso subtest) is in the same DISK snapshot.
		want := []string{"marker(1..10, DISK)", "mut(u/a@1)", "mut(x/z@2)", "mut(u/b@3)", "mut(u/a@4)", "del(u/b@5)",
			"mut(x/y@6)", "mut(u/c@7)", "del(x/z@8)", "mut(u/d@10)"}
		for _, w := range want {
			require.Equal(t, w, o.next(t, 0).String())
		}
		o.quiet(t, 0, 100*time.Millisecond)
	})

	t.Run("seqnos", func(t *testing.T) {
		a, err := newDCPAgent(t, addr, "dcp-backfill", dcpOpts{})
		require.NoError(t, err)
		ch := make(chan []gocbcore.VbSeqNoEntry, 1)
		_, err = a.GetVbucketSeqnos(0, 1, gocbcore.GetVbucketSeqnoOptions{}, func(e []gocbcore.VbSeqNoEntry, err error) {
			require.NoError(t, err)
			ch <- e
		})
		require.NoError(t, err)
		got := <-ch
		require.Len(t, got, parts)
		require.Equal(t, gocbcore.SeqNo(10), got[0].SeqNo)
		for _, e := range got[1:] {
			require.Equal(t, gocbcore.SeqNo(n), e.SeqNo)
		}
	})
}

// reference is the key -> value state of vb 0 read with an ordered stream
// from 0 to the current high seqno (its end).
func dcpReference(t *testing.T, addr, topic string) map[string]string {
	t.Helper()
	a, err := newDCPAgent(t, addr, topic, dcpOpts{})
	require.NoError(t, err)
	o := newObserver()
	fl := failoverLog(t, a, 0)
	hw := highSeqno(t, a, 0)
	_, err = openStream(t, a, o, 0, fl[0].VbUUID, 0, hw)
	require.NoError(t, err)
	d := newDocState()
	for !d.apply(o.next(t, 0)) {
	}
	return d.snapshot()
}

// highSeqno is vb's high seqno (GET_ALL_VB_SEQNOS).
func highSeqno(t testing.TB, a *dcpAgent, vb uint16) uint64 {
	t.Helper()
	ch := make(chan []gocbcore.VbSeqNoEntry, 1)
	errs := make(chan error, 1)
	_, err := a.GetVbucketSeqnos(0, 1, gocbcore.GetVbucketSeqnoOptions{}, func(e []gocbcore.VbSeqNoEntry, err error) {
		errs <- err
		ch <- e
	})
	require.NoError(t, err)
	require.NoError(t, <-errs)
	for _, e := range <-ch {
		if e.VbID == vb {
			return uint64(e.SeqNo)
		}
	}
	t.Fatalf("no seqno of vb %d", vb)
	return 0
}

// TestDCPResumeOSO: a gocbcore client whose connection drops inside an
// OSO snapshot resumes with the seed's rules (docs/change-streams.md 5.1):
// from Y it gets the snapshot again in full and ends with the reference
// state; from X (before END) it gets a partial view, which the test
// detects; after END, X is a correct resume point.
func TestDCPResumeOSO(t *testing.T) {
	s := dcpStack(t)
	s.dcpExample(t, "dcp-resume", 1, 0)
	addr := s.srv.DCPAddr()
	ref := dcpReference(t, addr, "dcp-resume")
	require.Equal(t, map[string]string{"u/a": "3", "u/c": "5", "x/y": "7"}, ref)

	// The first connection applies three items of the OSO snapshot (keys
	// in byte order: u/a@4, u/b@5, u/c@7), then drops.
	a, err := newDCPAgent(t, addr, "dcp-resume", dcpOpts{oso: true})
	require.NoError(t, err)
	o := newObserver()
	vbuuid := failoverLog(t, a, 0)[0].VbUUID
	_, err = openStream(t, a, o, 0, vbuuid, 0, math.MaxUint64)
	require.NoError(t, err)
	failed := newDocState()
	for failed.osoItems < 3 {
		failed.apply(o.next(t, 0))
	}
	require.True(t, failed.inOSO)
	require.Equal(t, uint64(0), failed.y)
	require.Equal(t, uint64(7), failed.x)
	require.NoError(t, a.Close())

	resume := func(t *testing.T, d *docState, from uint64, end uint64) *docState {
		b, err := newDCPAgent(t, addr, "dcp-resume", dcpOpts{oso: true})
		require.NoError(t, err)
		ob := newObserver()
		_, err = openStream(t, b, ob, 0, vbuuid, from, end)
		require.NoError(t, err)
		d.next = from
		for !d.apply(ob.next(t, 0)) {
		}
		return d
	}

	t.Run("from Y", func(t *testing.T) {
		// Y = 0 and items were delivered: the client resets (drops its
		// state) and gets the whole snapshot again.
		d := resume(t, newDocState(), failed.y, 9)
		require.Equal(t, ref, d.snapshot())
	})
	t.Run("from X before END is a partial view", func(t *testing.T) {
		d := &docState{docs: failed.snapshot()}
		d = resume(t, d, failed.x, 9)
		require.NotEqual(t, ref, d.snapshot(), "resuming from X inside an OSO snapshot must lose something")
		require.NotContains(t, d.snapshot(), "x/y", "x/y (seqno 6 < X) was never delivered")
	})
	t.Run("from X after END", func(t *testing.T) {
		b, err := newDCPAgent(t, addr, "dcp-resume", dcpOpts{oso: true})
		require.NoError(t, err)
		ob := newObserver()
		_, err = openStream(t, b, ob, 0, vbuuid, 0, math.MaxUint64)
		require.NoError(t, err)
		d := newDocState()
		for {
			e := ob.next(t, 0)
			d.apply(e)
			if e.String() == "oso(END)" {
				break
			}
		}
		require.Equal(t, uint64(9), d.next, "X after SEQNO_ADVANCED is the snapshot point")
		require.NoError(t, b.Close())
		s.produceKV(t, "dcp-resume", "u/e", "8")
		d = resume(t, d, d.next, 10)
		want := map[string]string{"u/e": "8"}
		for k, v := range ref {
			want[k] = v
		}
		require.Equal(t, want, d.snapshot())
	})
}

// TestDCPRollback: a stream request below the log start after a purge,
// and one with the vbuuid of a re-created topic, answer ROLLBACK to 0;
// the re-created topic's failover log has a new entry.
func TestDCPRollback(t *testing.T) {
	s := dcpStack(t)
	s.dcpExample(t, "dcp-rb", 1, 0)
	addr := s.srv.DCPAddr()
	a, err := newDCPAgent(t, addr, "dcp-rb", dcpOpts{oso: true})
	require.NoError(t, err)
	old := failoverLog(t, a, 0)
	require.Len(t, old, 1)
	require.NotZero(t, old[0].VbUUID)

	_, err = s.log.Purge(context.Background(), &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: "dcp-rb",
		Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: 3}}}}})
	require.NoError(t, err)

	t.Run("below the log start", func(t *testing.T) {
		o := newObserver()
		_, err := openStream(t, a, o, 0, old[0].VbUUID, 2, math.MaxUint64)
		require.Equal(t, uint64(0), rollbackSeqno(t, err))
	})
	t.Run("at the log start", func(t *testing.T) {
		// Seqno 3 = offset 3 = the log start: an OSO backfill of what is
		// left (docs/change-streams.md Ex7).
		o := newObserver()
		_, err := openStream(t, a, o, 0, old[0].VbUUID, 3, 9)
		require.NoError(t, err)
		require.Equal(t, "oso(START)", o.next(t, 0).String())
		var got []string
		for e := o.next(t, 0); e.kind != "oso"; e = o.next(t, 0) {
			got = append(got, e.String())
		}
		slices.Sort(got)
		require.Equal(t, []string{"adv(9)", "del(u/b@5)", "del(x/z@8)", "mut(u/a@4)", "mut(u/c@7)", "mut(x/y@6)"}, got)
		require.Equal(t, "end(<nil>)", o.next(t, 0).String())
	})
	t.Run("above the high seqno", func(t *testing.T) {
		o := newObserver()
		_, err := openStream(t, a, o, 0, old[0].VbUUID, 50, math.MaxUint64)
		require.ErrorIs(t, err, gocbcore.ErrMemdRangeError)
	})
	t.Run("re-created topic", func(t *testing.T) {
		o := newObserver()
		_, err := openStream(t, a, o, 0, old[0].VbUUID, 9, math.MaxUint64)
		require.NoError(t, err) // a tail at the high seqno
		_, err = s.log.DeleteTopic(context.Background(), &sharelogv1.DeleteTopicRequest{Name: "dcp-rb"})
		require.NoError(t, err)
		e := o.next(t, 0)
		require.Equal(t, "end", e.kind, e.String())
		require.ErrorIs(t, e.err, gocbcore.ErrDCPStreamStateChanged)
		s.dcpExample(t, "dcp-rb", 1, 0)
		b, err := newDCPAgent(t, addr, "dcp-rb", dcpOpts{oso: true})
		require.NoError(t, err)
		fresh := failoverLog(t, b, 0)
		require.Len(t, fresh, 1)
		require.NotEqual(t, old[0].VbUUID, fresh[0].VbUUID, "a re-created topic has a new failover entry")
		_, err = openStream(t, b, newObserver(), 0, old[0].VbUUID, 5, math.MaxUint64)
		require.Equal(t, uint64(0), rollbackSeqno(t, err))
		// From 0 nothing is held: no rollback, whatever the vbuuid.
		o2 := newObserver()
		_, err = openStream(t, b, o2, 0, old[0].VbUUID, 0, math.MaxUint64)
		require.NoError(t, err)
		require.Equal(t, "oso(START)", o2.next(t, 0).String())
	})
}

// TestDCPAuth: SASL PLAIN (a token) and SCRAM-SHA256/512 (the Kafka
// listener's SCRAM users) log a gocbcore agent in; a wrong password, no
// login, and a principal without READ (or without DESCRIBE) on the topic
// are refused.
func TestDCPAuth(t *testing.T) {
	tokens := writeTokens(t, t.TempDir())
	s := dcpStack(t, func(c *app.Config) {
		c.AuthTokensFile = tokens
		c.Authorizer = app.AuthorizerACL
		c.SuperUsers = []string{"User:token-1"}
	})
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	_, err := s.log.CreateTopic(admin, &sharelogv1.CreateTopicRequest{Name: "dcp-auth", Partitions: 1})
	require.NoError(t, err)
	p := int32(0)
	_, err = s.log.Produce(admin, &sharelogv1.ProduceRequest{Topic: "dcp-auth", Partition: &p,
		Records: []*sharelogv1.Record{{Key: []byte("k"), Value: []byte("v")}}})
	require.NoError(t, err)
	users := sharelogv1.NewUserServiceClient(s.conn)
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		_, err := users.SetScramCredential(admin, &sharelogv1.SetScramCredentialRequest{User: "alice", Mechanism: mech,
			Secret: &sharelogv1.SetScramCredentialRequest_Password{Password: "alice-secret"}})
		require.NoError(t, err)
	}
	acls := sharelogv1.NewAclServiceClient(s.conn)
	grant := func(principal string, op sharelogv1.AclOperation) {
		_, err := acls.CreateAcls(admin, &sharelogv1.CreateAclsRequest{Bindings: []*sharelogv1.AclBinding{{Principal: principal,
			ResourceType: rtTopic, PatternType: literal, ResourceName: "dcp-auth", Operation: op, Permission: allow}}})
		require.NoError(t, err)
	}
	grant("User:alice", opRead)
	grant(userName, opDescribe) // token-2 may select the bucket, not stream it
	addr := s.srv.DCPAddr()

	stream := func(t *testing.T, a *dcpAgent) error {
		o := newObserver()
		_, err := openStream(t, a, o, 0, 0, 0, 1)
		if err != nil {
			return err
		}
		require.Equal(t, "marker(1..1, DISK)", o.next(t, 0).String())
		require.Equal(t, "mut(k@1)", o.next(t, 0).String())
		require.Equal(t, "end(<nil>)", o.next(t, 0).String())
		return nil
	}
	for _, tc := range []struct {
		name, user, pass string
		mech             gocbcore.AuthMechanism
	}{
		{"PLAIN", "token-1", adminToken, gocbcore.PlainAuthMechanism},
		{"SCRAM-SHA512", "alice", "alice-secret", gocbcore.ScramSha512AuthMechanism},
		{"SCRAM-SHA256", "alice", "alice-secret", gocbcore.ScramSha256AuthMechanism},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := newDCPAgent(t, addr, "dcp-auth", dcpOpts{user: tc.user, pass: tc.pass, mechs: []gocbcore.AuthMechanism{tc.mech}})
			require.NoError(t, err)
			require.NoError(t, stream(t, a))
		})
		t.Run(tc.name+" wrong password", func(t *testing.T) {
			_, err := newDCPAgent(t, addr, "dcp-auth", dcpOpts{user: tc.user, pass: "nope", mechs: []gocbcore.AuthMechanism{tc.mech},
				wait: time.Second})
			require.ErrorIs(t, err, gocbcore.ErrAuthenticationFailure)
		})
	}
	t.Run("no login", func(t *testing.T) {
		_, err := newDCPAgent(t, addr, "dcp-auth", dcpOpts{wait: time.Second})
		require.ErrorIs(t, err, gocbcore.ErrAuthenticationFailure)
	})
	t.Run("ACL: DESCRIBE without READ", func(t *testing.T) {
		a, err := newDCPAgent(t, addr, "dcp-auth", dcpOpts{user: "token-2", pass: userToken, mechs: []gocbcore.AuthMechanism{gocbcore.PlainAuthMechanism}})
		require.NoError(t, err)
		err = stream(t, a)
		require.ErrorIs(t, err, gocbcore.ErrAuthenticationFailure) // gocbcore's name for EACCESS
		require.ErrorContains(t, err, `READ on topic \"dcp-auth\" is required`)
	})
	t.Run("ACL: nothing granted", func(t *testing.T) {
		_, err := acls.DeleteAcls(admin, &sharelogv1.DeleteAclsRequest{Filters: []*sharelogv1.AclBindingFilter{{Principal: userName}}})
		require.NoError(t, err)
		_, err = newDCPAgent(t, addr, "dcp-auth", dcpOpts{user: "token-2", pass: userToken, mechs: []gocbcore.AuthMechanism{gocbcore.PlainAuthMechanism},
			wait: time.Second})
		require.ErrorIs(t, err, gocbcore.ErrAuthenticationFailure, "SELECT_BUCKET needs DESCRIBE on the topic")
	})
}

// TestDCPCollections: a gocbcore agent that negotiates collections gets
// the keys without their collection prefix and collection id 0, may filter
// on the default collection, and is refused another one.
func TestDCPCollections(t *testing.T) {
	s := dcpStack(t, func(c *app.Config) { c.OSOBackfill = "disabled" })
	s.dcpExample(t, "dcp-coll", 1, 0)
	a, err := newDCPAgent(t, s.srv.DCPAddr(), "dcp-coll", dcpOpts{collections: true})
	require.NoError(t, err)
	require.True(t, a.HasCollectionsSupport())
	vbuuid := failoverLog(t, a, 0)[0].VbUUID

	stream := func(filter *gocbcore.OpenStreamFilterOptions) (*observer, error) {
		o := newObserver()
		ch := make(chan error, 1)
		_, err := a.OpenStream(0, 0, vbuuid, 0, 9, 0, 0, o, gocbcore.OpenStreamOptions{FilterOptions: filter},
			func(_ []gocbcore.FailoverEntry, err error) { ch <- err })
		if err != nil {
			return nil, err
		}
		return o, <-ch
	}
	for name, filter := range map[string]*gocbcore.OpenStreamFilterOptions{
		"no filter":          nil,
		"default collection": {CollectionIDs: []uint32{0}},
	} {
		t.Run(name, func(t *testing.T) {
			o, err := stream(filter)
			require.NoError(t, err)
			require.Equal(t, "marker(1..9, DISK)", o.next(t, 0).String())
			e := o.next(t, 0)
			require.Equal(t, "mut(u/a@1)", e.String())
			require.Equal(t, uint32(0), e.cid)
			for e.kind != "end" {
				e = o.next(t, 0)
			}
			require.NoError(t, e.err)
		})
	}
	t.Run("another collection", func(t *testing.T) {
		_, err := stream(&gocbcore.OpenStreamFilterOptions{CollectionIDs: []uint32{8}})
		require.ErrorIs(t, err, gocbcore.ErrCollectionNotFound)
	})
	t.Run("seqnos of the default collection", func(t *testing.T) {
		ch := make(chan error, 1)
		var got []gocbcore.VbSeqNoEntry
		_, err := a.GetVbucketSeqnos(0, 1, gocbcore.GetVbucketSeqnoOptions{FilterOptions: &gocbcore.GetVbucketSeqnoFilterOptions{CollectionID: 0}},
			func(e []gocbcore.VbSeqNoEntry, err error) { got = e; ch <- err })
		require.NoError(t, err)
		require.NoError(t, <-ch)
		require.Equal(t, []gocbcore.VbSeqNoEntry{{VbID: 0, SeqNo: 9}}, got)
	})
}
