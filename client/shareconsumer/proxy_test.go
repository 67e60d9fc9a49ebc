package shareconsumer

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sharelog/sharelog/apierr"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// proxy is a gRPC server in front of the real one. It records the share
// requests it sees, can fail the next ShareFetch or ShareAcknowledge in
// transport (before forwarding it, or after: admitted, response lost), and
// can answer ShareGroupHeartbeat itself (a scripted membership: the real
// server's membership is another issue's work).
type proxy struct {
	sharelogv1.UnimplementedShareGroupServiceServer
	up sharelogv1.ShareGroupServiceClient

	mu         sync.Mutex
	heartbeat  func(req *sharelogv1.ShareGroupHeartbeatRequest) (*sharelogv1.ShareGroupHeartbeatResponse, error)
	heartbeats []heartbeatCall
	fetches    []*sharelogv1.ShareFetchRequest
	acks       []*sharelogv1.ShareAcknowledgeRequest
	faults     map[string]*fault // "fetch" or "ack"
}

type heartbeatCall struct {
	req      *sharelogv1.ShareGroupHeartbeatRequest
	clientID string
}

type fault struct {
	forward bool
	err     error // nil: errInjected
}

func (f *fault) error() error {
	if f.err != nil {
		return f.err
	}
	return errInjected
}

type logProxy struct {
	sharelogv1.UnimplementedLogServiceServer
	up sharelogv1.LogServiceClient
}

func (l logProxy) DescribeTopic(ctx context.Context, req *sharelogv1.DescribeTopicRequest) (*sharelogv1.Topic, error) {
	return l.up.DescribeTopic(ctx, req)
}

// startProxy serves a proxy to e on loopback and returns it with a
// connection to it.
func startProxy(t *testing.T, e *env) (*proxy, *grpc.ClientConn) {
	t.Helper()
	p := &proxy{up: e.groups, faults: map[string]*fault{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	sharelogv1.RegisterShareGroupServiceServer(gs, p)
	sharelogv1.RegisterLogServiceServer(gs, logProxy{up: e.log})
	go func() { _ = gs.Serve(lis) }()
	conn := dial(t, lis.Addr().String())
	t.Cleanup(gs.Stop) // after the consumers' cleanups (registered later, run first)
	return p, conn
}

// failNext makes the next call of rpc ("fetch" or "ack") fail with
// UNAVAILABLE, after forwarding it if forward.
func (p *proxy) failNext(rpc string, forward bool) { p.failNextWith(rpc, forward, nil) }

// failNextWith is failNext with err as the failure (nil: a transport's
// UNAVAILABLE without a reason).
func (p *proxy) failNextWith(rpc string, forward bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[rpc] = &fault{forward: forward, err: err}
}

func (p *proxy) takeFault(rpc string) *fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.faults[rpc]
	delete(p.faults, rpc)
	return f
}

var errInjected = status.Error(codes.Unavailable, "injected transport failure")

func (p *proxy) ShareFetch(ctx context.Context, req *sharelogv1.ShareFetchRequest) (*sharelogv1.ShareFetchResponse, error) {
	p.mu.Lock()
	p.fetches = append(p.fetches, proto.Clone(req).(*sharelogv1.ShareFetchRequest))
	p.mu.Unlock()
	f := p.takeFault("fetch")
	if f != nil && !f.forward {
		return nil, f.error()
	}
	resp, err := p.up.ShareFetch(ctx, req)
	if f != nil {
		return nil, f.error()
	}
	return resp, err
}

func (p *proxy) ShareAcknowledge(ctx context.Context, req *sharelogv1.ShareAcknowledgeRequest) (*sharelogv1.ShareAcknowledgeResponse, error) {
	p.mu.Lock()
	p.acks = append(p.acks, proto.Clone(req).(*sharelogv1.ShareAcknowledgeRequest))
	p.mu.Unlock()
	f := p.takeFault("ack")
	if f != nil && !f.forward {
		return nil, f.error()
	}
	resp, err := p.up.ShareAcknowledge(ctx, req)
	if f != nil {
		return nil, f.error()
	}
	return resp, err
}

func (p *proxy) ShareGroupHeartbeat(ctx context.Context, req *sharelogv1.ShareGroupHeartbeatRequest) (*sharelogv1.ShareGroupHeartbeatResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	call := heartbeatCall{req: proto.Clone(req).(*sharelogv1.ShareGroupHeartbeatRequest)}
	if v := md.Get("x-client-id"); len(v) > 0 {
		call.clientID = v[0]
	}
	p.mu.Lock()
	p.heartbeats = append(p.heartbeats, call)
	hb := p.heartbeat
	p.mu.Unlock()
	if hb == nil {
		return p.up.ShareGroupHeartbeat(ctx, req)
	}
	return hb(req)
}

func (p *proxy) fetchEpochs() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int32
	for _, f := range p.fetches {
		out = append(out, f.GetShareSessionEpoch())
	}
	return out
}

func (p *proxy) ackEpochs() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int32
	for _, a := range p.acks {
		out = append(out, a.GetShareSessionEpoch())
	}
	return out
}

func reasonError(c codes.Code, reason string) error {
	st, err := status.New(c, reason).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "sharelog"})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// scriptedGroup is a one-member share group answering heartbeats.
type scriptedGroup struct {
	mu          sync.Mutex
	groupEpoch  int32
	memberEpoch int32 // 0: not a member
	assignment  []int32
	fail        error // returned once by the next heartbeat
}

func (g *scriptedGroup) assign(parts ...int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.groupEpoch++
	g.assignment = parts
}

func (g *scriptedGroup) failNext(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail = err
}

func (g *scriptedGroup) heartbeat(req *sharelogv1.ShareGroupHeartbeatRequest) (*sharelogv1.ShareGroupHeartbeatResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.fail; err != nil {
		g.fail = nil
		g.memberEpoch = 0
		return nil, err
	}
	resp := &sharelogv1.ShareGroupHeartbeatResponse{MemberId: req.GetMemberId(), HeartbeatIntervalMs: 50}
	switch e := req.GetMemberEpoch(); {
	case e == -1:
		g.memberEpoch = 0
		resp.MemberEpoch = -1
		return resp, nil
	case e == 0 || g.memberEpoch != g.groupEpoch:
		resp.Assignment = &sharelogv1.Assignment{TopicPartitions: []*sharelogv1.TopicPartitions{{Topic: "t", Partitions: slices.Clone(g.assignment)}}}
	}
	g.memberEpoch = g.groupEpoch
	resp.MemberEpoch = g.groupEpoch
	return resp, nil
}

// The assignment decides what the consumer fetches: it adds and forgets
// partitions in its share session as the assignment changes, rejoins when
// fenced or forgotten, and leaves on Close.
func TestMembershipDrivesTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 3)
	for p := range int32(3) {
		e.produce("t", p, 0, 5)
	}
	e.configureGroup("g", 30*time.Second)
	p, conn := startProxy(t, e)
	g := &scriptedGroup{}
	g.assign(0)
	p.heartbeat = g.heartbeat
	acks := newAckLog()
	c := newConsumer(t, conn, Config{GroupID: "g", Topics: []string{"t"}, ClientID: "cid", RackID: "rack-1", OnAcknowledgement: acks.hook})

	recs := pollN(t, c, 5)
	for _, r := range recs {
		require.EqualValues(t, 0, r.Partition)
	}
	require.Equal(t, []TopicPartition{{Topic: "t", Partition: 0}}, c.Assignment())
	p.mu.Lock()
	first := p.heartbeats[0]
	p.mu.Unlock()
	require.EqualValues(t, 0, first.req.GetMemberEpoch())
	require.Equal(t, []string{"t"}, first.req.GetSubscribedTopicNames())
	require.Equal(t, "rack-1", first.req.GetRackId())
	require.Equal(t, "cid", first.clientID)
	require.Equal(t, c.MemberID(), first.req.GetMemberId())
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		last := p.heartbeats[len(p.heartbeats)-1].req
		return len(p.heartbeats) >= 3 && last.GetMemberEpoch() == 1 && len(last.GetSubscribedTopicNames()) == 0
	}, 5*time.Second, 10*time.Millisecond, "heartbeats at the member epoch, without the subscription")

	g.assign(1, 2)
	require.Eventually(t, func() bool {
		return slices.Equal(c.Assignment(), []TopicPartition{{Topic: "t", Partition: 1}, {Topic: "t", Partition: 2}})
	}, 5*time.Second, 10*time.Millisecond)
	nFetches := len(p.fetchEpochs())
	recs = pollN(t, c, 10)
	for _, r := range recs {
		require.NotEqualValues(t, 0, r.Partition, "partition 0 was forgotten")
	}
	// The first fetch after the change adds 1 and 2, forgets 0, and carries
	// the (implicit) acceptance of partition 0's records.
	p.mu.Lock()
	req := p.fetches[nFetches]
	p.mu.Unlock()
	require.Equal(t, []*sharelogv1.TopicPartitions{{Topic: "t", Partitions: []int32{0}}}, req.GetForgottenTopicsData(), "%v", req)
	require.Len(t, req.GetTopics(), 1)
	var added []int32
	for _, part := range req.GetTopics()[0].GetPartitions() {
		if part.GetPartition() == 0 {
			require.Len(t, part.GetAcknowledgementBatches(), 1)
		} else {
			added = append(added, part.GetPartition())
			require.Empty(t, part.GetAcknowledgementBatches())
		}
	}
	require.Equal(t, []int32{1, 2}, added)

	for _, reason := range []string{"FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"} {
		p.mu.Lock()
		n := len(p.heartbeats)
		p.mu.Unlock()
		g.failNext(reasonError(codes.NotFound, reason))
		require.Eventually(t, func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, hb := range p.heartbeats[n:] {
				if hb.req.GetMemberEpoch() == 0 && slices.Equal(hb.req.GetSubscribedTopicNames(), []string{"t"}) {
					return true
				}
			}
			return false
		}, 5*time.Second, 10*time.Millisecond, "rejoin after %s", reason)
	}

	require.NoError(t, c.Close(t.Context()))
	p.mu.Lock()
	last := p.heartbeats[len(p.heartbeats)-1]
	p.mu.Unlock()
	require.EqualValues(t, -1, last.req.GetMemberEpoch(), "leave on Close")
	require.Equal(t, []int32{-1}, p.ackEpochs(), "the session closed with the final epoch")
	want := map[TopicPartition]int{}
	for p := range int32(3) {
		want[TopicPartition{Topic: "t", Partition: p}] = 5
	}
	acks.requireAllAcceptedOnce(t, want)
}

func TestFatalMembershipError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	p, conn := startProxy(t, e)
	p.heartbeat = func(*sharelogv1.ShareGroupHeartbeatRequest) (*sharelogv1.ShareGroupHeartbeatResponse, error) {
		return nil, reasonError(codes.ResourceExhausted, "GROUP_MAX_SIZE_REACHED")
	}
	c := newConsumer(t, conn, Config{GroupID: "g", Topics: []string{"t"}})
	_, err := c.Poll(t.Context())
	require.Error(t, err)
	require.Equal(t, "GROUP_MAX_SIZE_REACHED", Reason(err))
}

// A ShareFetch lost in transport is resent unchanged: here it had not
// reached the server, so the resend is simply processed and the session
// carries on.
func TestFetchLostBeforeTheServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 10)
	e.configureGroup("g", 30*time.Second)
	p, conn := startProxy(t, e)
	acks := newAckLog()
	c := newConsumer(t, conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 5, OnAcknowledgement: acks.hook})

	acceptAll(t, c, pollN(t, c, 5))
	p.failNext("fetch", false)
	recs := pollN(t, c, 5)
	require.Equal(t, seq(5, 9), offsets(recs))
	require.Equal(t, []int32{0, 1, 1}, p.fetchEpochs(), "the same epoch, resent")
	require.Empty(t, p.ackEpochs(), "no session close")
	acceptAll(t, c, recs)
	_, err := c.Commit(t.Context())
	require.NoError(t, err)
	acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: 10})
}

// reasonErr is the status a sharelog instance answers with reason r.
func reasonErr(r apierr.Reason, msg string) error {
	st, err := status.New(codes.Unavailable, msg).WithDetails(&errdetails.ErrorInfo{Reason: string(r), Domain: apierr.Domain})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// NOT_OWNER and OWNER_UNREACHABLE (nothing applied: ownership moved, or
// the owner could not be reached) are retried inside Poll, never
// returned to the application, and nothing is lost or delivered twice
// (docs/cluster.md).
func TestFetchNotOwnerIsRetried(t *testing.T) {
	t.Parallel()
	for _, r := range []apierr.Reason{apierr.NotOwner, apierr.OwnerUnreachable} {
		t.Run(string(r), func(t *testing.T) {
			e := newEnv(t)
			e.createTopic("t", 1)
			e.produce("t", 0, 0, 10)
			e.configureGroup("g", 30*time.Second)
			p, conn := startProxy(t, e)
			acks := newAckLog()
			c := newConsumer(t, conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 5, OnAcknowledgement: acks.hook})
			acceptAll(t, c, pollN(t, c, 5))
			p.failNextWith("fetch", false, reasonErr(r, "moved"))
			recs, err := c.Poll(t.Context())
			require.NoError(t, err, "Poll retries %s", r)
			require.Equal(t, seq(5, 9), offsets(recs))
			acceptAll(t, c, recs)
			_, err = c.Commit(t.Context())
			require.NoError(t, err)
			acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: 10})
		})
	}
}

// OUTCOME_UNKNOWN (an instance forwarded the fetch to the owner, which
// applied it, and the answer was lost): handled as a lost response, the
// acknowledgements resent, every record accepted exactly once.
func TestFetchOutcomeUnknownIsResent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 10)
	e.configureGroup("g", 30*time.Second)
	p, conn := startProxy(t, e)
	acks := newAckLog()
	c := newConsumer(t, conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 5, OnAcknowledgement: acks.hook})
	acceptAll(t, c, pollN(t, c, 5))
	p.failNextWith("fetch", true, reasonErr(apierr.OutcomeUnknown, "answer lost"))
	recs := pollN(t, c, 5)
	require.Equal(t, seq(5, 9), offsets(recs))
	acceptAll(t, c, recs)
	_, err := c.Commit(t.Context())
	require.NoError(t, err)
	acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: 10})
}

// A ShareFetch admitted by the server whose response is lost: the resend is
// refused with INVALID_SHARE_SESSION_EPOCH, which proves the admission; the
// consumer closes the session (releasing what the lost response acquired)
// and reopens it.
func TestFetchResponseLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 10)
	e.configureGroup("g", 30*time.Second)
	p, conn := startProxy(t, e)
	acks := newAckLog()
	c := newConsumer(t, conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 5, OnAcknowledgement: acks.hook})

	acceptAll(t, c, pollN(t, c, 5))
	p.failNext("fetch", true) // applies ACCEPT 0..4, acquires 5..9, then the response is lost
	recs := pollN(t, c, 5)
	require.Equal(t, seq(5, 9), offsets(recs))
	for _, r := range recs {
		require.EqualValues(t, 1, r.DeliveryCount, "the interrupted delivery is not charged")
	}
	require.Equal(t, []int32{0, 1, 1, 0}, p.fetchEpochs())
	require.Equal(t, []int32{-1}, p.ackEpochs(), "closed with the uncertain acknowledgements")
	acceptAll(t, c, recs)
	_, err := c.Commit(t.Context())
	require.NoError(t, err)
	// The resent ACCEPT 0..4 fell below the start offset: the server answers
	// NONE, so each offset is reported accepted exactly once.
	acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: 10})
}

// A Commit whose response is lost: the acknowledgements that the first
// attempt applied cannot be confirmed (ErrAckOutcomeUnknown), the others are
// not lost, nothing is delivered twice.
func TestCommitResponseLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 10)
	e.configureGroup("g", 30*time.Second)
	p, conn := startProxy(t, e)
	acks := newAckLog()
	c := newConsumer(t, conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 5, OnAcknowledgement: acks.hook})

	recs := pollN(t, c, 5)
	acceptAll(t, c, recs[1:]) // offset 0 stays held: the start offset stays at 0
	p.failNext("ack", true)
	res, err := c.Commit(t.Context())
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.ErrorIs(t, res[0].Err, ErrAckOutcomeUnknown)
	require.Equal(t, []AckRange{{FirstOffset: 1, LastOffset: 4, Type: Accept}}, res[0].Ranges)
	require.Equal(t, []int32{1, 1, -1}, p.ackEpochs(), "resent at the same epoch, then closed")
	require.ErrorIs(t, c.Acknowledge(recs[0], Accept), ErrSessionEnded)

	// Offset 0 was released with the session; 1..4 were applied by the lost
	// attempt and never come back.
	recs = pollN(t, c, 6)
	require.Equal(t, append([]int64{0}, seq(5, 9)...), offsets(recs))
	acceptAll(t, c, recs)
	_, err = c.Commit(t.Context())
	require.NoError(t, err)
	other := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}})
	pollNothing(t, other, 200*time.Millisecond)
}

// A Poll cancelled during its long poll leaves its request in doubt: the
// next Poll replaces the session (epoch 0) instead of guessing the epoch.
func TestCancelledPollReopensTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.configureGroup("g", 30*time.Second)
	p, conn := startProxy(t, e)
	c := newConsumer(t, conn, Config{GroupID: "g", Topics: []string{"t"}, MaxWait: 5 * time.Second})

	// 1 s leaves the Poll 250 ms to answer after its shortened long poll
	// (300 ms left only 75 ms, too little through the proxy on a loaded
	// machine).
	short, cancelShort := context.WithTimeout(t.Context(), time.Second)
	defer cancelShort()
	recs, err := c.Poll(short) // opens the session; the long poll ends before the deadline
	require.NoError(t, err)
	require.Empty(t, recs)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = c.Poll(ctx)
	require.ErrorIs(t, err, context.Canceled)

	e.produce("t", 0, 0, 1)
	recs = pollN(t, c, 1)
	require.Equal(t, []int64{0}, offsets(recs))
	require.Equal(t, []int32{0, 1, 0}, p.fetchEpochs())
}

// Close while a join is in flight sends the leave all the same: the
// server may have made the member, which would otherwise keep its
// assignment until its session timed out.
func TestCloseDuringJoinLeaves(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.configureGroup("g", 30*time.Second)
	p, conn := startProxy(t, e)
	g := &scriptedGroup{}
	g.assign(0)
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p.heartbeat = func(req *sharelogv1.ShareGroupHeartbeatRequest) (*sharelogv1.ShareGroupHeartbeatResponse, error) {
		if req.GetMemberEpoch() == 0 {
			once.Do(func() { close(arrived) })
			<-release // the server takes the join, its answer comes too late
		}
		return g.heartbeat(req)
	}
	c, err := New(conn, Config{GroupID: "g", Topics: []string{"t"}})
	require.NoError(t, err)
	<-arrived
	closed := make(chan error, 1)
	go func() { closed <- c.Close(t.Context()) }()
	time.Sleep(100 * time.Millisecond) // Close has cancelled the join's call
	close(release)
	require.NoError(t, <-closed)
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, p.heartbeats, 2, "the join, then the leave")
	require.EqualValues(t, -1, p.heartbeats[1].req.GetMemberEpoch())
	require.Equal(t, c.MemberID(), p.heartbeats[1].req.GetMemberId())
}
