package e2e

// Helpers of the DCP listener's tests (docs/dcp.md): gocbcore v10's
// DCPAgent, unmodified, against the real server in-process. Events are
// written in docs/change-streams.md's notation with DCP seqnos
// (seqno = offset + 1): marker(s..e, DISK|MEMORY), oso(START|END),
// mut(key@seqno), del(key@seqno), adv(seqno), end(reason).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/couchbase/gocbcore/v10"
	"github.com/couchbase/gocbcore/v10/memd"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// dcpStack is the real server with the DCP listener on a free loopback
// port and OSO snapshots whenever eligible (so tiny partitions get them).
func dcpStack(t testing.TB, mutate ...func(*app.Config)) *stack {
	t.Helper()
	return newStack(t, app.Options{}, append([]func(*app.Config){func(c *app.Config) {
		c.DCPAddr = "127.0.0.1:0"
		c.OSOBackfill = "enabled"
	}}, mutate...)...)
}

// logBuffer collects a server's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// dcpStackLogged is dcpStack with the server's log (debug level) in the
// returned buffer.
func dcpStackLogged(t testing.TB, mutate ...func(*app.Config)) (*stack, *logBuffer) {
	t.Helper()
	lb := &logBuffer{}
	st := testsupport.NewStack(t, testsupport.StackOptions{Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))},
		append([]func(*app.Config){func(c *app.Config) {
			c.DCPAddr = "127.0.0.1:0"
			c.OSOBackfill = "enabled"
		}}, mutate...)...)
	return stackOf(st), lb
}

// dcpOpts configures a test agent.
type dcpOpts struct {
	oso   bool
	user  string
	pass  string
	mechs []gocbcore.AuthMechanism
	wait  time.Duration // how long to wait for the agent to be ready; 0 = 10 s
	// collections negotiates HELLO Collections (IoConfig.UseCollections).
	collections bool
}

// newDCPAgent bootstraps a gocbcore DCPAgent on bucket (a topic) and waits
// until it is ready; it is closed at t's cleanup.
func newDCPAgent(t testing.TB, addr, bucket string, o dcpOpts) (*dcpAgent, error) {
	t.Helper()
	cfg := &gocbcore.DCPAgentConfig{
		UserAgent:  "sharelog-e2e",
		BucketName: bucket,
		SeedConfig: gocbcore.SeedConfig{MemdAddrs: []string{addr}},
		SecurityConfig: gocbcore.SecurityConfig{
			Auth:           gocbcore.PasswordAuthProvider{Username: o.user, Password: o.pass},
			AuthMechanisms: o.mechs,
		},
		EnableCCCPPoller: true,
		IoConfig:         gocbcore.IoConfig{UseCollections: o.collections},
		KVConfig:         gocbcore.KVConfig{ConnectTimeout: 5 * time.Second},
		DCPConfig:        gocbcore.DCPConfig{UseOSOBackfill: o.oso, BufferSize: 1 << 20},
	}
	agent, err := gocbcore.CreateDcpAgent(cfg, fmt.Sprintf("sharelog-e2e-%p", t), memd.DcpOpenFlagProducer)
	if err != nil {
		return nil, err
	}
	ready := make(chan error, 1)
	if o.wait == 0 {
		o.wait = 10 * time.Second
	}
	if _, err := agent.WaitUntilReady(time.Now().Add(o.wait), gocbcore.WaitUntilReadyOptions{},
		func(_ *gocbcore.WaitUntilReadyResult, err error) { ready <- err }); err != nil {
		agent.Close()
		return nil, err
	}
	if err := <-ready; err != nil {
		agent.Close()
		return nil, err
	}
	a := &dcpAgent{DCPAgent: agent}
	t.Cleanup(func() { a.Close() })
	return a, nil
}

// dcpAgent is a DCPAgent whose Close may be called twice (gocbcore's
// panics the second time).
type dcpAgent struct {
	*gocbcore.DCPAgent
	once sync.Once
	err  error
}

func (a *dcpAgent) Close() error {
	a.once.Do(func() { a.err = a.DCPAgent.Close() })
	return a.err
}

// dcpEvent is one event a StreamObserver received.
type dcpEvent struct {
	kind       string // marker, oso, mut, del, adv, end
	seqno      uint64
	start, end uint64 // marker
	disk       bool   // marker
	osoStart   bool   // oso
	key, value string
	cas        uint64
	cid        uint32 // mut, del: the collection id
	err        error  // end
}

func (e dcpEvent) String() string {
	switch e.kind {
	case "marker":
		src := "MEMORY"
		if e.disk {
			src = "DISK"
		}
		return fmt.Sprintf("marker(%d..%d, %s)", e.start, e.end, src)
	case "oso":
		if e.osoStart {
			return "oso(START)"
		}
		return "oso(END)"
	case "mut", "del":
		return fmt.Sprintf("%s(%s@%d)", e.kind, e.key, e.seqno)
	case "adv":
		return fmt.Sprintf("adv(%d)", e.seqno)
	case "end":
		return fmt.Sprintf("end(%v)", e.err)
	}
	return e.kind
}

// observer is a gocbcore.StreamObserver that queues every event of every
// vBucket.
type observer struct {
	mu  sync.Mutex
	evs map[uint16]chan dcpEvent
}

func newObserver() *observer { return &observer{evs: make(map[uint16]chan dcpEvent)} }

func (o *observer) ch(vb uint16) chan dcpEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.evs[vb]
	if !ok {
		c = make(chan dcpEvent, 1<<16)
		o.evs[vb] = c
	}
	return c
}

func (o *observer) SnapshotMarker(m gocbcore.DcpSnapshotMarker) {
	o.ch(m.VbID) <- dcpEvent{kind: "marker", start: m.StartSeqNo, end: m.EndSeqNo, disk: m.SnapshotType&0x02 != 0}
}
func (o *observer) Mutation(m gocbcore.DcpMutation) {
	o.ch(m.VbID) <- dcpEvent{kind: "mut", seqno: m.SeqNo, key: string(m.Key), value: string(m.Value), cas: m.Cas, cid: m.CollectionID}
}
func (o *observer) Deletion(d gocbcore.DcpDeletion) {
	o.ch(d.VbID) <- dcpEvent{kind: "del", seqno: d.SeqNo, key: string(d.Key), cas: d.Cas, cid: d.CollectionID}
}
func (o *observer) Expiration(e gocbcore.DcpExpiration) {
	o.ch(e.VbID) <- dcpEvent{kind: "expiration", seqno: e.SeqNo, key: string(e.Key)}
}
func (o *observer) End(e gocbcore.DcpStreamEnd, err error) {
	o.ch(e.VbID) <- dcpEvent{kind: "end", err: err}
}
func (o *observer) CreateCollection(gocbcore.DcpCollectionCreation)     {}
func (o *observer) DeleteCollection(gocbcore.DcpCollectionDeletion)     {}
func (o *observer) FlushCollection(gocbcore.DcpCollectionFlush)         {}
func (o *observer) CreateScope(gocbcore.DcpScopeCreation)               {}
func (o *observer) DeleteScope(gocbcore.DcpScopeDeletion)               {}
func (o *observer) ModifyCollection(gocbcore.DcpCollectionModification) {}
func (o *observer) OSOSnapshot(s gocbcore.DcpOSOSnapshot) {
	o.ch(s.VbID) <- dcpEvent{kind: "oso", osoStart: s.SnapshotType == 1}
}
func (o *observer) SeqNoAdvanced(s gocbcore.DcpSeqNoAdvanced) {
	o.ch(s.VbID) <- dcpEvent{kind: "adv", seqno: s.SeqNo}
}

// next is the vBucket's next event, failing after evTimeout.
func (o *observer) next(t testing.TB, vb uint16) dcpEvent {
	t.Helper()
	select {
	case e := <-o.ch(vb):
		return e
	case <-time.After(evTimeout):
		t.Fatalf("vb %d: no DCP event within %s", vb, evTimeout)
	}
	return dcpEvent{}
}

// quiet fails if an event arrives within d.
func (o *observer) quiet(t testing.TB, vb uint16, d time.Duration) {
	t.Helper()
	select {
	case e := <-o.ch(vb):
		t.Fatalf("vb %d: unexpected event %s", vb, e)
	case <-time.After(d):
	}
}

// openStream opens a stream of vb from start (seqno) to end with vbuuid
// and returns the failover log of the answer.
func openStream(t testing.TB, a *dcpAgent, o *observer, vb uint16, vbuuid gocbcore.VbUUID, start, end uint64) ([]gocbcore.FailoverEntry, error) {
	t.Helper()
	type res struct {
		fl  []gocbcore.FailoverEntry
		err error
	}
	ch := make(chan res, 1)
	_, err := a.OpenStream(vb, 0, vbuuid, gocbcore.SeqNo(start), gocbcore.SeqNo(end), gocbcore.SeqNo(start), gocbcore.SeqNo(start), o,
		gocbcore.OpenStreamOptions{}, func(fl []gocbcore.FailoverEntry, err error) { ch <- res{fl, err} })
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.fl, r.err
	case <-time.After(evTimeout):
		t.Fatalf("vb %d: no answer to the stream request", vb)
	}
	return nil, nil
}

// failoverLog is GET_FAILOVER_LOG of vb.
func failoverLog(t testing.TB, a *dcpAgent, vb uint16) []gocbcore.FailoverEntry {
	t.Helper()
	type res struct {
		fl  []gocbcore.FailoverEntry
		err error
	}
	ch := make(chan res, 1)
	_, err := a.GetFailoverLog(vb, func(fl []gocbcore.FailoverEntry, err error) { ch <- res{fl, err} })
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	return r.fl
}

// rollbackSeqno is the seqno of a DCP rollback answer, or fails.
func rollbackSeqno(t testing.TB, err error) uint64 {
	t.Helper()
	var rb gocbcore.DCPRollbackError
	require.True(t, errors.As(err, &rb), "want a DCP rollback, got %v", err)
	return uint64(rb.SeqNo)
}

// docState is a DCP client's key -> value state (tombstones remove the
// key), with the seed's X and Y (docs/change-streams.md 5.1, in seqnos).
type docState struct {
	docs     map[string]string
	inOSO    bool
	y, x     uint64 // inside an OSO snapshot
	next     uint64 // the seqno a resume starts from (the greatest seqno consistently held)
	osoItems int
}

func newDocState() *docState { return &docState{docs: make(map[string]string)} }

// apply takes one event and reports whether it was a stream end.
func (d *docState) apply(e dcpEvent) bool {
	switch e.kind {
	case "oso":
		if e.osoStart {
			d.inOSO, d.y, d.x = true, d.next, d.next
		} else {
			d.inOSO, d.next = false, max(d.x, d.y)
		}
	case "mut", "del":
		if e.kind == "mut" {
			d.docs[e.key] = e.value
		} else {
			delete(d.docs, e.key)
		}
		if d.inOSO {
			d.x = max(d.x, e.seqno)
			d.osoItems++
		} else {
			d.next = e.seqno
		}
	case "adv":
		if d.inOSO {
			d.x = max(d.x, e.seqno)
		} else {
			d.next = e.seqno
		}
	case "end":
		return true
	}
	return false
}

func (d *docState) snapshot() map[string]string { return maps.Clone(d.docs) }

// userClient sets SCRAM credentials as the super user (the first token).
type userClient struct {
	s *stack
}

func newUserClient(_ testing.TB, s *stack) userClient { return userClient{s} }

func (u userClient) setPassword(t testing.TB, user, mech, password string) {
	t.Helper()
	admin := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	_, err := sharelogv1.NewUserServiceClient(u.s.conn).SetScramCredential(admin, &sharelogv1.SetScramCredentialRequest{User: user,
		Mechanism: mech, Secret: &sharelogv1.SetScramCredentialRequest_Password{Password: password}})
	require.NoError(t, err)
}
