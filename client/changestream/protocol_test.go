package changestream_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sharelog/sharelog/client/changestream"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const fakeTopicID = "11111111-1111-4111-8111-111111111111"

// fakeServer answers each StreamChanges call with the next script: its
// events, then its error (nil: the call completes OK).
type fakeServer struct {
	sharelogv1.UnimplementedChangeStreamServiceServer
	sharelogv1.UnimplementedLogServiceServer
	mu      sync.Mutex
	scripts []script
	reqs    []*sharelogv1.StreamChangesRequest
}

type script struct {
	events []*sharelogv1.ChangeEvent
	// sizes are the events per message, in order (the rest one per
	// message; nil: every event in a message of its own).
	sizes []int
	err   error
}

func (f *fakeServer) DescribeTopic(context.Context, *sharelogv1.DescribeTopicRequest) (*sharelogv1.Topic, error) {
	return &sharelogv1.Topic{Name: "t", TopicId: fakeTopicID, PartitionCount: 1}, nil
}

func (f *fakeServer) StreamChanges(req *sharelogv1.StreamChangesRequest, st sharelogv1.ChangeStreamService_StreamChangesServer) error {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	if len(f.scripts) == 0 {
		f.mu.Unlock()
		<-st.Context().Done() // nothing scripted: hang until cancelled
		return st.Context().Err()
	}
	sc := f.scripts[0]
	f.scripts = f.scripts[1:]
	f.mu.Unlock()
	evs, sizes := sc.events, sc.sizes
	for len(evs) > 0 {
		n := 1
		if len(sizes) > 0 {
			n, sizes = min(sizes[0], len(evs)), sizes[1:]
		}
		if err := st.Send(&sharelogv1.StreamChangesResponse{Events: evs[:n]}); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return sc.err
}

func startFake(t *testing.T, scripts ...script) (*fakeServer, *grpc.ClientConn) {
	t.Helper()
	f := &fakeServer{scripts: scripts}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	sharelogv1.RegisterChangeStreamServiceServer(gs, f)
	sharelogv1.RegisterLogServiceServer(gs, f)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///fake",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return f, conn
}

// Event constructors in the notation of docs/change-streams.md.
func marker(s, e int64) *sharelogv1.ChangeEvent {
	return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_SnapshotMarker{
		SnapshotMarker: &sharelogv1.SnapshotMarker{StartOffset: s, EndOffset: e, Source: sharelogv1.SnapshotSource_SNAPSHOT_SOURCE_DISK}}}
}
func osoStart() *sharelogv1.ChangeEvent {
	return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_OsoSnapshot{OsoSnapshot: &sharelogv1.OsoSnapshot{Phase: sharelogv1.OsoPhase_OSO_PHASE_START}}}
}
func osoEnd() *sharelogv1.ChangeEvent {
	return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_OsoSnapshot{OsoSnapshot: &sharelogv1.OsoSnapshot{Phase: sharelogv1.OsoPhase_OSO_PHASE_END}}}
}
func mut(key string, off int64) *sharelogv1.ChangeEvent {
	return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_Mutation{Mutation: &sharelogv1.Mutation{Offset: off, Key: []byte(key), Value: []byte("v")}}}
}
func del(key string, off int64) *sharelogv1.ChangeEvent {
	return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_Deletion{Deletion: &sharelogv1.Deletion{Offset: off, Key: []byte(key)}}}
}
func adv(o int64) *sharelogv1.ChangeEvent {
	return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_OffsetAdvanced{OffsetAdvanced: &sharelogv1.OffsetAdvanced{Offset: o}}}
}
func end(r sharelogv1.StreamEndReason) *sharelogv1.ChangeEvent {
	return &sharelogv1.ChangeEvent{Event: &sharelogv1.ChangeEvent_StreamEnd{StreamEnd: &sharelogv1.StreamEnd{Reason: r}}}
}

var (
	endOK       = end(sharelogv1.StreamEndReason_STREAM_END_REASON_OK)
	endShutdown = end(sharelogv1.StreamEndReason_STREAM_END_REASON_SHUTDOWN)
	endRollback = end(sharelogv1.StreamEndReason_STREAM_END_REASON_ROLLBACK)
	endDeleted  = end(sharelogv1.StreamEndReason_STREAM_END_REASON_TOPIC_DELETED)
)

// recorder is a Handler that records what it is told.
type recorder struct {
	mu     sync.Mutex
	calls  []string
	failOn string // a call name that returns an error
}

var errHandler = errors.New("handler failed")

func (r *recorder) add(s string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
	if r.failOn != "" && s == r.failOn {
		return errHandler
	}
	return nil
}
func (r *recorder) OnSnapshot(_ context.Context, s changestream.Snapshot) error {
	return r.add("snapshot:" + s.Kind.String())
}
func (r *recorder) OnMutation(_ context.Context, m changestream.Mutation) error {
	return r.add("mut:" + string(m.Key))
}
func (r *recorder) OnDeletion(_ context.Context, d changestream.Deletion) error {
	return r.add("del:" + string(d.Key))
}
func (r *recorder) OnReset(_ context.Context, x changestream.Reset) error {
	return r.add("reset:" + x.Cause.String())
}
func (r *recorder) OnCheckpoint(context.Context, changestream.Checkpoint) error {
	return r.add("checkpoint")
}

func i64(v int64) *int64 { return &v }

func fastBackoff() changestream.Backoff {
	return changestream.Backoff{Initial: time.Millisecond, Max: time.Millisecond}
}

func runScripts(t *testing.T, cfg changestream.Config, scripts ...script) (*changestream.Stream, *fakeServer, *recorder, error) {
	t.Helper()
	f, conn := startFake(t, scripts...)
	cfg.Topic = "t"
	cfg.Backoff = fastBackoff()
	rec := &recorder{}
	st, err := changestream.New(conn, cfg, rec)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return st, f, rec, st.Run(ctx)
}

// TestProtocolViolations: every violation of the event grammar
// stops Run with *ProtocolError and leaves the checkpoint where the last
// valid consistent point put it.
func TestProtocolViolations(t *testing.T) {
	t.Parallel()
	from := func(n int64) *changestream.Checkpoint {
		return &changestream.Checkpoint{TopicID: fakeTopicID, NextOffset: n}
	}
	cases := []struct {
		name   string
		cfg    changestream.Config
		events []*sharelogv1.ChangeEvent
		next   int64 // checkpoint after Run
	}{
		{"OSO START in mode OFF", changestream.Config{OSO: changestream.OSOOff}, []*sharelogv1.ChangeEvent{osoStart()}, 0},
		{"OSO START after another event", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 1), mut("a", 0), osoStart()}, 1},
		{"OSO START while one is open", changestream.Config{}, []*sharelogv1.ChangeEvent{osoStart(), osoStart()}, 0},
		{"OSO END with none open", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 1), adv(1), osoEnd()}, 2},
		{"a marker inside OSO", changestream.Config{}, []*sharelogv1.ChangeEvent{osoStart(), marker(0, 1)}, 0},
		{"an item before the first marker", changestream.Config{}, []*sharelogv1.ChangeEvent{mut("a", 0)}, 0},
		{"offset_advanced before the first marker", changestream.Config{}, []*sharelogv1.ChangeEvent{adv(0)}, 0},
		{"an ordered item below s", changestream.Config{From: from(3)}, []*sharelogv1.ChangeEvent{marker(3, 5), mut("a", 2)}, 3},
		{"an ordered item above e", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 5), mut("a", 6)}, 0},
		{"an ordered item not above the previous", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 5), mut("a", 2), mut("b", 2)}, 3},
		{"an ordered item not matching the prefix", changestream.Config{KeyPrefix: []byte("u/")}, []*sharelogv1.ChangeEvent{marker(0, 5), mut("x/a", 2)}, 0},
		{"an item with an empty key", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 5), mut("", 2)}, 0},
		{"a marker before the previous closed", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 5), mut("a", 2), marker(6, 7)}, 3},
		{"a marker with e < s", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(5, 4)}, 0},
		{"a gap between snapshots", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 1), adv(1), marker(3, 4)}, 2},
		{"an overlap between snapshots", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 1), adv(1), marker(1, 4)}, 2},
		{"first marker not at start_offset", changestream.Config{From: from(4)}, []*sharelogv1.ChangeEvent{marker(5, 6)}, 4},
		{"after END: s <= X", changestream.Config{OSO: changestream.OSOOn}, []*sharelogv1.ChangeEvent{osoStart(), mut("a", 3), osoEnd(), marker(3, 5)}, 4},
		{"after END: s != X+1 with offset_advanced", changestream.Config{}, []*sharelogv1.ChangeEvent{osoStart(), mut("a", 3), adv(7), osoEnd(), marker(9, 9)}, 8},
		{"offset_advanced not at e", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 5), adv(4)}, 0},
		{"offset_advanced after the record at e", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 5), mut("a", 5), adv(5)}, 6},
		{"OSO item at or below Y", changestream.Config{From: from(4)}, []*sharelogv1.ChangeEvent{osoStart(), mut("a", 3)}, 4},
		{"offset_advanced inside OSO in mode ON", changestream.Config{OSO: changestream.OSOOn}, []*sharelogv1.ChangeEvent{osoStart(), adv(3)}, 0},
		{"a second offset_advanced inside OSO", changestream.Config{}, []*sharelogv1.ChangeEvent{osoStart(), adv(3), adv(4)}, 0},
		{"offset_advanced inside OSO at or below X", changestream.Config{}, []*sharelogv1.ChangeEvent{osoStart(), mut("a", 5), adv(5)}, 0},
		{"an OSO item after offset_advanced", changestream.Config{}, []*sharelogv1.ChangeEvent{osoStart(), adv(5), mut("a", 2)}, 0},
		{"stream_end{OK} without end_offset", changestream.Config{}, []*sharelogv1.ChangeEvent{marker(0, 1), adv(1), endOK}, 2},
		{"stream_end{OK} first when start != end", changestream.Config{EndOffset: i64(5), From: from(2)}, []*sharelogv1.ChangeEvent{endOK}, 2},
		{"stream_end{OK} before the end was covered", changestream.Config{EndOffset: i64(5)}, []*sharelogv1.ChangeEvent{marker(0, 2), adv(2), endOK}, 3},
		{"stream_end{OK} inside a snapshot", changestream.Config{EndOffset: i64(5)}, []*sharelogv1.ChangeEvent{marker(0, 4), mut("a", 1), endOK}, 2},
		{"an event after stream_end", changestream.Config{EndOffset: i64(2)}, []*sharelogv1.ChangeEvent{marker(0, 1), adv(1), endOK, marker(2, 2)}, 2},
		{"an unknown event type", changestream.Config{}, []*sharelogv1.ChangeEvent{{}}, 0},
		{"an unknown stream_end reason", changestream.Config{}, []*sharelogv1.ChangeEvent{end(0)}, 0},
	}
	for _, tc := range cases {
		// Each case twice: one event per message, and every event in one
		// message; batching changes neither the verdict nor the checkpoint.
		for _, batched := range []bool{false, true} {
			name := tc.name
			sc := script{events: tc.events}
			if batched {
				name += "/one message"
				sc.sizes = []int{len(tc.events)}
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				st, _, _, err := runScripts(t, tc.cfg, sc)
				var pe *changestream.ProtocolError
				require.ErrorAs(t, err, &pe, "err: %v", err)
				assert.NotEmpty(t, pe.Rule)
				assert.Equal(t, tc.next, st.Checkpoint().NextOffset)
			})
		}
	}
}

// TestClientBatchedMessages: the events of a message are handled one by
// one, exactly as if each had come alone: the same handler calls, and the
// same checkpoints, which fall between events of one message.
func TestClientBatchedMessages(t *testing.T) {
	t.Parallel()
	events := []*sharelogv1.ChangeEvent{
		osoStart(), mut("u/a", 3), del("u/b", 4), mut("u/c", 6), adv(7), osoEnd(), marker(8, 10), mut("u/d", 8), mut("u/e", 10),
		marker(11, 12), adv(12), endOK}
	want := []string{"snapshot:OSOStart", "mut:u/a", "del:u/b", "mut:u/c", "snapshot:OSOEnd", "checkpoint",
		"snapshot:Ordered", "mut:u/d", "mut:u/e", "checkpoint", "snapshot:Ordered", "checkpoint", "checkpoint"}
	for _, sizes := range [][]int{nil, {len(events)}, {2, 5, 5}, {7, 1, 4}} {
		t.Run(fmt.Sprint(sizes), func(t *testing.T) {
			t.Parallel()
			st, f, rec, err := runScripts(t, changestream.Config{EndOffset: i64(13)}, script{events: events, sizes: sizes})
			require.NoError(t, err)
			assert.Equal(t, want, rec.calls)
			assert.Equal(t, int64(13), st.Checkpoint().NextOffset)
			assert.Len(t, f.reqs, 1)
		})
	}
}

// TestClientValidSequences: what the library accepts and how the
// checkpoint moves.
func TestClientValidSequences(t *testing.T) {
	t.Parallel()
	t.Run("Ex3 then a tail: X from offset_advanced", func(t *testing.T) {
		st, _, rec, err := runScripts(t, changestream.Config{EndOffset: i64(9)}, script{events: []*sharelogv1.ChangeEvent{
			osoStart(), mut("u/a", 3), del("u/b", 4), mut("u/c", 6), adv(7), osoEnd(), marker(8, 8), mut("u/d", 8), endOK}})
		require.NoError(t, err)
		assert.Equal(t, changestream.Checkpoint{TopicID: fakeTopicID, NextOffset: 9}, st.Checkpoint())
		assert.Equal(t, []string{"snapshot:OSOStart", "mut:u/a", "del:u/b", "mut:u/c", "snapshot:OSOEnd", "checkpoint",
			"snapshot:Ordered", "mut:u/d", "checkpoint", "checkpoint"}, rec.calls)
	})
	t.Run("Ex4: ON, X = 6, resume from 7", func(t *testing.T) {
		st, f, _, err := runScripts(t, changestream.Config{OSO: changestream.OSOOn},
			script{events: []*sharelogv1.ChangeEvent{osoStart(), mut("u/a", 3), del("u/b", 4), mut("u/c", 6), osoEnd()},
				err: status.Error(codes.Unavailable, "gone")},
			script{events: []*sharelogv1.ChangeEvent{marker(7, 7), adv(7), endDeleted}})
		assert.ErrorIs(t, err, changestream.ErrTopicDeleted)
		assert.Equal(t, int64(8), st.Checkpoint().NextOffset)
		require.Len(t, f.reqs, 2)
		assert.Equal(t, int64(7), f.reqs[1].GetStartOffset(), "reconnect from X+1")
		assert.Equal(t, fakeTopicID, f.reqs[0].GetTopicId(), "topic_id learnt by DescribeTopic, sent on every request")
		assert.Equal(t, sharelogv1.OsoMode_OSO_MODE_ON, f.reqs[0].GetOsoMode())
	})
	t.Run("Ex5 with ON: X stays Y", func(t *testing.T) {
		st, f, _, err := runScripts(t, changestream.Config{OSO: changestream.OSOOn},
			script{events: []*sharelogv1.ChangeEvent{osoStart(), osoEnd(), endShutdown}},
			script{events: []*sharelogv1.ChangeEvent{endDeleted}})
		assert.ErrorIs(t, err, changestream.ErrTopicDeleted)
		assert.Zero(t, st.Checkpoint().NextOffset)
		assert.Equal(t, int64(0), f.reqs[1].GetStartOffset(), "SHUTDOWN is retried from C")
	})
	t.Run("Ex7: a failure inside OSO with Y >= 0 resumes from Y+1 without a reset", func(t *testing.T) {
		from := &changestream.Checkpoint{TopicID: fakeTopicID, NextOffset: 3}
		st, f, rec, err := runScripts(t, changestream.Config{From: from},
			script{events: []*sharelogv1.ChangeEvent{osoStart(), mut("u/a", 3), del("u/b", 4)}, err: status.Error(codes.Internal, "x")},
			script{events: []*sharelogv1.ChangeEvent{endDeleted}})
		assert.ErrorIs(t, err, changestream.ErrTopicDeleted)
		assert.Equal(t, int64(3), st.Checkpoint().NextOffset)
		assert.Equal(t, int64(3), f.reqs[1].GetStartOffset())
		assert.NotContains(t, rec.calls, "reset:OSOAborted")
	})
	t.Run("a failure inside OSO with Y = -1 after items resets first", func(t *testing.T) {
		st, f, rec, err := runScripts(t, changestream.Config{},
			script{events: []*sharelogv1.ChangeEvent{osoStart(), mut("u/a", 3)}}, // ends without stream_end
			script{events: []*sharelogv1.ChangeEvent{endDeleted}})
		assert.ErrorIs(t, err, changestream.ErrTopicDeleted)
		assert.Contains(t, rec.calls, "reset:OSOAborted")
		assert.Equal(t, int64(0), f.reqs[1].GetStartOffset())
		assert.Zero(t, st.Checkpoint().NextOffset)
	})
	t.Run("stream_end{ROLLBACK} resets and restarts from 0", func(t *testing.T) {
		st, f, rec, err := runScripts(t, changestream.Config{From: &changestream.Checkpoint{TopicID: fakeTopicID, NextOffset: 5}},
			script{events: []*sharelogv1.ChangeEvent{marker(5, 6), mut("a", 5), endRollback}},
			script{events: []*sharelogv1.ChangeEvent{endDeleted}})
		assert.ErrorIs(t, err, changestream.ErrTopicDeleted)
		assert.Equal(t, []string{"snapshot:Ordered", "mut:a", "reset:Overtaken", "checkpoint"}, rec.calls)
		assert.Equal(t, int64(0), f.reqs[1].GetStartOffset())
		assert.Zero(t, st.Checkpoint().NextOffset)
	})
	t.Run("ROLLBACK_REQUIRED resets with its cause", func(t *testing.T) {
		st0 := status.New(codes.FailedPrecondition, "purged")
		st1, err := st0.WithDetails(&errdetails.ErrorInfo{Reason: "ROLLBACK_REQUIRED", Domain: "sharelog", Metadata: map[string]string{"cause": "history_purged"}})
		require.NoError(t, err)
		_, _, rec, err := runScripts(t, changestream.Config{From: &changestream.Checkpoint{TopicID: fakeTopicID, NextOffset: 5}},
			script{err: st1.Err()}, script{events: []*sharelogv1.ChangeEvent{endDeleted}})
		assert.ErrorIs(t, err, changestream.ErrTopicDeleted)
		assert.Equal(t, []string{"reset:HistoryPurged", "checkpoint"}, rec.calls)
	})
	t.Run("only stream_end when start = end", func(t *testing.T) {
		st, _, _, err := runScripts(t, changestream.Config{EndOffset: i64(4), From: &changestream.Checkpoint{TopicID: fakeTopicID, NextOffset: 4}},
			script{events: []*sharelogv1.ChangeEvent{endOK}})
		require.NoError(t, err)
		assert.Equal(t, int64(4), st.Checkpoint().NextOffset)
	})
	t.Run("non-retryable statuses are returned", func(t *testing.T) {
		for _, code := range []codes.Code{codes.InvalidArgument, codes.NotFound, codes.OutOfRange, codes.DataLoss,
			codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.FailedPrecondition} {
			_, f, _, err := runScripts(t, changestream.Config{}, script{err: status.Error(code, "no")})
			assert.Equal(t, code, status.Code(err))
			assert.Len(t, f.reqs, 1, "%v is not retried", code)
		}
	})
	t.Run("retryable statuses are retried", func(t *testing.T) {
		var scripts []script
		for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.Internal, codes.Unknown} {
			scripts = append(scripts, script{err: status.Error(code, "again")})
		}
		scripts = append(scripts, script{events: []*sharelogv1.ChangeEvent{endDeleted}})
		_, f, _, err := runScripts(t, changestream.Config{}, scripts...)
		assert.ErrorIs(t, err, changestream.ErrTopicDeleted)
		assert.Len(t, f.reqs, 5)
	})
	t.Run("a handler error stops Run; the checkpoint does not move past the event", func(t *testing.T) {
		f, conn := startFake(t, script{events: []*sharelogv1.ChangeEvent{marker(0, 3), mut("a", 0), mut("b", 1)}})
		rec := &recorder{failOn: "mut:b"}
		st, err := changestream.New(conn, changestream.Config{Topic: "t", Backoff: fastBackoff()}, rec)
		require.NoError(t, err)
		assert.ErrorIs(t, st.Run(context.Background()), errHandler)
		assert.Equal(t, int64(1), st.Checkpoint().NextOffset)
		assert.Len(t, f.reqs, 1)
	})
}

func TestCheckpointEncoding(t *testing.T) {
	t.Parallel()
	c := changestream.Checkpoint{TopicID: fakeTopicID, Partition: 3, NextOffset: 1 << 40}
	b, err := c.MarshalBinary()
	require.NoError(t, err)
	assert.JSONEq(t, `{"topic_id":"`+fakeTopicID+`","partition":3,"next_offset":"1099511627776"}`, string(b))
	var back changestream.Checkpoint
	require.NoError(t, back.UnmarshalBinary(b))
	assert.Equal(t, c, back)
	for name, bad := range map[string]string{
		"unknown field":   `{"topic_id":"x","partition":0,"next_offset":"1","extra":1}`,
		"negative offset": `{"topic_id":"x","partition":0,"next_offset":"-1"}`,
		"number offset":   `{"topic_id":"x","partition":0,"next_offset":1}`,
		"trailing data":   `{"topic_id":"x","partition":0,"next_offset":"1"} {}`,
		"not json":        `nope`,
	} {
		var cp changestream.Checkpoint
		assert.Error(t, cp.UnmarshalBinary([]byte(bad)), name)
		assert.Equal(t, changestream.Checkpoint{}, cp, "%s: unchanged on error", name)
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	_, conn := startFake(t)
	h := &recorder{}
	for name, cfg := range map[string]changestream.Config{
		"no topic":             {},
		"negative partition":   {Topic: "t", Partition: -1},
		"foreign checkpoint":   {Topic: "t", Partition: 1, From: &changestream.Checkpoint{Partition: 2}},
		"negative next offset": {Topic: "t", From: &changestream.Checkpoint{NextOffset: -1}},
		"unknown mode":         {Topic: "t", OSO: 7},
		"negative end":         {Topic: "t", EndOffset: i64(-1)},
	} {
		_, err := changestream.New(conn, cfg, h)
		assert.Error(t, err, name)
	}
	_, err := changestream.New(conn, changestream.Config{Topic: "t"}, nil)
	assert.Error(t, err, "no handler")
	st, err := changestream.New(conn, changestream.Config{Topic: "t", Partition: 2, From: &changestream.Checkpoint{TopicID: "x", Partition: 2, NextOffset: 7}}, h)
	require.NoError(t, err)
	assert.Equal(t, changestream.Checkpoint{TopicID: "x", Partition: 2, NextOffset: 7}, st.Checkpoint())
}

func TestOneRunAtATime(t *testing.T) {
	t.Parallel()
	f, conn := startFake(t) // the call hangs
	st, err := changestream.New(conn, changestream.Config{Topic: "t"}, &recorder{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.reqs) == 1
	}, 5*time.Second, time.Millisecond)
	err = st.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "already running", "a second concurrent Run is refused")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}
