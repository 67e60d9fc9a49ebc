package changestream_test

import (
	"context"
	"fmt"

	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/client/changestream"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// startServer runs the real server in-process (gRPC over bufconn, file
// store in a temp dir) and returns a client connection to it, dialled with
// the client's recommended options.
func startServer(t *testing.T, mutate func(*app.Config)) *grpc.ClientConn {
	t.Helper()
	var muts []func(*app.Config)
	if mutate != nil {
		muts = append(muts, mutate)
	}
	return testsupport.NewStack(t, testsupport.StackOptions{Dial: changestream.DialOptions()}, muts...).Conn
}

// cutConn fails the first StreamChanges call it sees after delivering
// cutAfter events (UNAVAILABLE, as a broken connection would); later calls
// go through. A cut may fall inside a message of several events: the
// events before it are delivered, the rest of the message is lost with the
// connection. It is the fault-injecting proxy of the resume tests.
type cutConn struct {
	grpc.ClientConnInterface
	cutAfter  atomic.Int64 // -1: no cut pending
	cuts      atomic.Int64
	delivered atomic.Int64 // events received through the proxy
	messages  atomic.Int64 // messages received through the proxy
}

func (c *cutConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := c.ClientConnInterface.NewStream(ctx, desc, method, opts...)
	if err != nil || method != sharelogv1.ChangeStreamService_StreamChanges_FullMethodName {
		return cs, err
	}
	return &cutStream{ClientStream: cs, c: c, left: c.cutAfter.Swap(-1)}, nil
}

type cutStream struct {
	grpc.ClientStream
	c    *cutConn
	left int64 // events to deliver before the cut; -1: none pending
}

func (s *cutStream) RecvMsg(m any) error {
	if s.left == 0 {
		s.left = -1
		s.c.cuts.Add(1)
		return status.Error(codes.Unavailable, "injected cut")
	}
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		return err
	}
	resp := m.(*sharelogv1.StreamChangesResponse)
	if s.left > 0 {
		if n := int64(len(resp.Events)); n > s.left {
			resp.Events = resp.Events[:s.left] // the cut falls inside this message
			s.left = 0
		} else {
			s.left -= n
		}
	}
	s.c.delivered.Add(int64(len(resp.Events)))
	s.c.messages.Add(1)
	return nil
}

// materializer applies the stream to a key → value map and checks the
// checkpoint rules (commit only at consistent points) as it goes.
type materializer struct {
	t          *testing.T
	stream     *changestream.Stream
	state      map[string]string
	inOSO      bool
	atStart    changestream.Checkpoint
	events     int
	resets     []changestream.ResetCause
	violations []string
}

func newMaterializer(t *testing.T) *materializer {
	return &materializer{t: t, state: map[string]string{}}
}

func (m *materializer) checkFrozen(what string) {
	if m.inOSO && m.stream.Checkpoint() != m.atStart {
		m.violations = append(m.violations, fmt.Sprintf("%s: checkpoint moved inside an OSO snapshot: %+v -> %+v", what, m.atStart, m.stream.Checkpoint()))
	}
}

func (m *materializer) OnSnapshot(_ context.Context, s changestream.Snapshot) error {
	m.events++
	switch s.Kind {
	case changestream.OSOStart:
		m.inOSO, m.atStart = true, m.stream.Checkpoint()
	case changestream.OSOEnd:
		m.checkFrozen("OSO END")
		m.inOSO = false
	case changestream.Ordered:
		if m.inOSO {
			m.violations = append(m.violations, "an ordered snapshot while the handler thinks an OSO snapshot is open")
		}
	}
	return nil
}

func (m *materializer) OnMutation(_ context.Context, mu changestream.Mutation) error {
	m.events++
	m.checkFrozen("mutation")
	if mu.InOSO != m.inOSO {
		m.violations = append(m.violations, fmt.Sprintf("mutation %s InOSO=%v", mu.Key, mu.InOSO))
	}
	m.state[string(mu.Key)] = string(mu.Value)
	return nil
}

func (m *materializer) OnDeletion(_ context.Context, d changestream.Deletion) error {
	m.events++
	m.checkFrozen("deletion")
	delete(m.state, string(d.Key))
	return nil
}

func (m *materializer) OnReset(_ context.Context, r changestream.Reset) error {
	m.resets = append(m.resets, r.Cause)
	m.state, m.inOSO = map[string]string{}, false
	return nil
}

func (m *materializer) OnCheckpoint(_ context.Context, c changestream.Checkpoint) error {
	if m.inOSO {
		m.violations = append(m.violations, fmt.Sprintf("OnCheckpoint(%+v) inside an OSO snapshot", c))
	}
	if c != m.stream.Checkpoint() {
		m.violations = append(m.violations, fmt.Sprintf("OnCheckpoint(%+v) is not the committed checkpoint %+v", c, m.stream.Checkpoint()))
	}
	return nil
}

// resumeTopic writes a partition with several versions per key, tombstones
// and keyless records, and returns the ground truth of [from, hw) under
// prefix: latest value per key, tombstoned keys absent.
func resumeTopic(t *testing.T, conn *grpc.ClientConn, topic string, purgeTo int64) (id string, hw int64, truth func(prefix string) map[string]string) {
	t.Helper()
	ctx := context.Background()
	logc := sharelogv1.NewLogServiceClient(conn)
	tp, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: topic, Partitions: 1})
	require.NoError(t, err)
	type rec struct{ key, value string }
	var recs []rec
	p := int32(0)
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &p}
	for i := range 40 {
		r := &sharelogv1.Record{Key: []byte(fmt.Sprintf("%c/%d", "ab"[i%2], i%9)), Value: []byte(fmt.Sprint("v", i))}
		switch {
		case i%6 == 5:
			r.Value = nil
		case i%13 == 12:
			r.Key = nil
		}
		recs = append(recs, rec{string(r.Key), string(r.Value)})
		req.Records = append(req.Records, r)
	}
	_, err = logc.Produce(ctx, req)
	require.NoError(t, err)
	if purgeTo > 0 {
		_, err = logc.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{{Topic: topic,
			Partitions: []*sharelogv1.PurgePartition{{Partition: 0, Offset: purgeTo}}}}})
		require.NoError(t, err)
	}
	return tp.GetTopicId(), int64(len(recs)), func(prefix string) map[string]string {
		m := map[string]string{}
		for _, r := range recs[purgeTo:] {
			if r.key == "" || !strings.HasPrefix(r.key, prefix) {
				continue
			}
			if r.value == "" {
				delete(m, r.key)
			} else {
				m[r.key] = r.value
			}
		}
		return m
	}
}

// TestResumeAfterEveryEvent cuts the first call after every event of a
// stream that begins with an OSO snapshot, inside the server's messages of
// several events too, and resumes through the library: the materialised
// state always equals the ground truth and no checkpoint is ever taken
// inside an open OSO snapshot.
func TestResumeAfterEveryEvent(t *testing.T) {
	t.Parallel()
	conn := startServer(t, func(c *app.Config) { c.OSOBackfill = "enabled" })
	cases := []struct {
		name    string
		purgeTo int64 // > 0: resume from a checkpoint at the LSO, so Y = LSO-1
		oso     changestream.OSOMode
		prefix  string
	}{
		{"from nothing, ON_WITH_OFFSET_ADVANCED", 0, changestream.OSOWithOffsetAdvanced, ""},
		{"from nothing, ON", 0, changestream.OSOOn, ""},
		{"from nothing, prefix", 0, changestream.OSOWithOffsetAdvanced, "b/"},
		{"from the LSO, ON_WITH_OFFSET_ADVANCED", 7, changestream.OSOWithOffsetAdvanced, ""},
		{"from the LSO, ON, prefix", 7, changestream.OSOOn, "a/"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("resume%d", i)
			id, hw, truth := resumeTopic(t, conn, topic, tc.purgeTo)
			want := truth(tc.prefix)
			run := func(cutAfter int64) (*materializer, *changestream.Stream, *cutConn) {
				cc := &cutConn{ClientConnInterface: conn}
				cc.cutAfter.Store(cutAfter)
				m := newMaterializer(t)
				cfg := changestream.Config{Topic: topic, KeyPrefix: []byte(tc.prefix), OSO: tc.oso, EndOffset: &hw,
					Backoff: changestream.Backoff{Initial: time.Millisecond, Max: time.Millisecond}}
				if tc.purgeTo > 0 {
					cfg.From = &changestream.Checkpoint{TopicID: id, NextOffset: tc.purgeTo}
				}
				st, err := changestream.New(cc, cfg, m)
				require.NoError(t, err)
				m.stream = st
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, st.Run(ctx), "cut after %d", cutAfter)
				return m, st, cc
			}
			whole, _, cc := run(-1)
			require.Equal(t, want, whole.state)
			total := cc.delivered.Load() // every event of the call, stream_end included
			require.Greater(t, total, int64(10))
			require.Less(t, cc.messages.Load(), total/4, "the server batches events")
			aborted := 0
			for cut := int64(0); cut < total; cut++ {
				m, st, cc := run(cut)
				assert.Equal(t, int64(1), cc.cuts.Load(), "cut after %d: the fault was injected", cut)
				assert.Equal(t, want, m.state, "cut after %d events", cut)
				assert.Empty(t, m.violations, "cut after %d", cut)
				assert.Equal(t, changestream.Checkpoint{TopicID: id, NextOffset: hw}, st.Checkpoint())
				if tc.purgeTo > 0 {
					assert.Empty(t, m.resets, "cut after %d: Y >= 0, resume from Y+1 without a reset", cut)
				}
				for _, r := range m.resets {
					assert.Equal(t, changestream.OSOAborted, r)
				}
				aborted += len(m.resets)
			}
			if tc.purgeTo == 0 {
				assert.Positive(t, aborted, "cuts inside the OSO snapshot (Y = -1, items delivered) reset the state")
			}
		})
	}
}

// TestResumeResets: every rollback path against the real server.
func TestResumeResets(t *testing.T) {
	t.Parallel()
	conn := startServer(t, func(c *app.Config) { c.OSOBackfill = "enabled" })
	ctx := context.Background()
	logc := sharelogv1.NewLogServiceClient(conn)

	t.Run("history purged", func(t *testing.T) {
		id, hw, truth := resumeTopic(t, conn, "purged", 10)
		m := newMaterializer(t)
		st, err := changestream.New(conn, changestream.Config{Topic: "purged", EndOffset: &hw,
			From: &changestream.Checkpoint{TopicID: id, NextOffset: 4}}, m)
		require.NoError(t, err)
		m.stream = st
		m.state["stale"] = "state"
		require.NoError(t, st.Run(ctx))
		assert.Equal(t, []changestream.ResetCause{changestream.HistoryPurged}, m.resets)
		assert.Equal(t, truth(""), m.state)
	})
	t.Run("topic re-created", func(t *testing.T) {
		_, _, _ = resumeTopic(t, conn, "recreated", 0)
		_, err := logc.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "recreated"})
		require.NoError(t, err)
		id, hw, truth := resumeTopic(t, conn, "recreated", 0)
		m := newMaterializer(t)
		st, err := changestream.New(conn, changestream.Config{Topic: "recreated", EndOffset: &hw,
			From: &changestream.Checkpoint{TopicID: "00000000-0000-4000-8000-000000000000", NextOffset: 12}}, m)
		require.NoError(t, err)
		m.stream = st
		require.NoError(t, st.Run(ctx))
		assert.Equal(t, []changestream.ResetCause{changestream.TopicRecreated}, m.resets)
		assert.Equal(t, truth(""), m.state)
		assert.Equal(t, id, st.Checkpoint().TopicID)
	})
	t.Run("topic deleted", func(t *testing.T) {
		_, _, _ = resumeTopic(t, conn, "deleted", 0)
		m := newMaterializer(t)
		st, err := changestream.New(conn, changestream.Config{Topic: "deleted", OSO: changestream.OSOOff}, m)
		require.NoError(t, err)
		m.stream = st
		done := make(chan error, 1)
		go func() { done <- st.Run(ctx) }()
		require.Eventually(t, func() bool { return st.Checkpoint().NextOffset == 40 }, 5*time.Second, time.Millisecond)
		_, err = logc.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "deleted"})
		require.NoError(t, err)
		assert.ErrorIs(t, <-done, changestream.ErrTopicDeleted)
		assert.Equal(t, int64(40), st.Checkpoint().NextOffset, "unchanged")
	})
	t.Run("unknown topic is returned, not retried", func(t *testing.T) {
		st, err := changestream.New(conn, changestream.Config{Topic: "nope"}, newMaterializer(t))
		require.NoError(t, err)
		assert.Equal(t, codes.NotFound, status.Code(st.Run(ctx)))
	})
	t.Run("cancel", func(t *testing.T) {
		_, _, _ = resumeTopic(t, conn, "cancel", 0)
		m := newMaterializer(t)
		st, err := changestream.New(conn, changestream.Config{Topic: "cancel"}, m)
		require.NoError(t, err)
		m.stream = st
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- st.Run(cctx) }()
		require.Eventually(t, func() bool { return st.Checkpoint().NextOffset == 40 }, 5*time.Second, time.Millisecond)
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
	})
}
