package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// evTimeout bounds each wait for an event that must come.
const evTimeout = 5 * time.Second

// exampleRecords is the example partition (LSO 0, HW 8):
// u/a@0=1 x/z@1=9 u/b@2=2 u/a@3=3 u/b@4=∅ x/y@5=7 u/c@6=5 x/z@7=∅.
var exampleRecords = []struct{ key, value string }{
	{"u/a", "1"}, {"x/z", "9"}, {"u/b", "2"}, {"u/a", "3"}, {"u/b", ""}, {"x/y", "7"}, {"u/c", "5"}, {"x/z", ""},
}

// produceKV produces keyed records to partition 0; an empty value is a
// tombstone, a key "-" a keyless record.
func (s *stack) produceKV(t testing.TB, topic string, kvs ...string) {
	t.Helper()
	p := int32(0)
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &p}
	for i := 0; i+1 < len(kvs); i += 2 {
		r := &sharelogv1.Record{}
		if kvs[i] != "-" {
			r.Key = []byte(kvs[i])
		}
		if kvs[i+1] != "" {
			r.Value = []byte(kvs[i+1])
		}
		req.Records = append(req.Records, r)
	}
	_, err := s.log.Produce(context.Background(), req)
	require.NoError(t, err)
}

// exampleTopic creates topic with the example partition and returns its id.
func (s *stack) exampleTopic(t testing.TB, topic string) string {
	t.Helper()
	info := s.createTopic(t, topic, 1, nil)
	var kvs []string
	for _, r := range exampleRecords {
		kvs = append(kvs, r.key, r.value)
	}
	s.produceKV(t, topic, kvs...)
	return info.GetTopicId()
}

// evString renders an event in the notation of docs/change-streams.md.
func evString(r *sharelogv1.ChangeEvent) string {
	switch e := r.GetEvent().(type) {
	case *sharelogv1.ChangeEvent_SnapshotMarker:
		src := strings.TrimPrefix(e.SnapshotMarker.GetSource().String(), "SNAPSHOT_SOURCE_")
		return fmt.Sprintf("marker(%d..%d, %s)", e.SnapshotMarker.GetStartOffset(), e.SnapshotMarker.GetEndOffset(), src)
	case *sharelogv1.ChangeEvent_OsoSnapshot:
		return fmt.Sprintf("oso(%s)", strings.TrimPrefix(e.OsoSnapshot.GetPhase().String(), "OSO_PHASE_"))
	case *sharelogv1.ChangeEvent_Mutation:
		return fmt.Sprintf("mut(%s@%d)", e.Mutation.GetKey(), e.Mutation.GetOffset())
	case *sharelogv1.ChangeEvent_Deletion:
		return fmt.Sprintf("del(%s@%d)", e.Deletion.GetKey(), e.Deletion.GetOffset())
	case *sharelogv1.ChangeEvent_OffsetAdvanced:
		return fmt.Sprintf("adv(%d)", e.OffsetAdvanced.GetOffset())
	case *sharelogv1.ChangeEvent_StreamEnd:
		return fmt.Sprintf("end(%s)", strings.TrimPrefix(e.StreamEnd.GetReason().String(), "STREAM_END_REASON_"))
	}
	return fmt.Sprintf("unknown(%v)", r)
}

// changeCall is one StreamChanges call read event by event (a message's
// events are handed out one at a time).
type changeCall struct {
	stream   sharelogv1.ChangeStreamService_StreamChangesClient
	cancel   context.CancelFunc
	pending  []*sharelogv1.ChangeEvent // the rest of the last message
	messages int                       // messages received
}

type recvResult struct {
	resp *sharelogv1.StreamChangesResponse
	err  error
}

// streamReq builds a request; opts modify it.
func streamReq(topic string, start int64, opts ...func(*sharelogv1.StreamChangesRequest)) *sharelogv1.StreamChangesRequest {
	r := &sharelogv1.StreamChangesRequest{Topic: topic, StartOffset: start}
	for _, o := range opts {
		o(r)
	}
	return r
}

func withPrefix(p string) func(*sharelogv1.StreamChangesRequest) {
	return func(r *sharelogv1.StreamChangesRequest) { r.KeyPrefix = []byte(p) }
}
func withEnd(e int64) func(*sharelogv1.StreamChangesRequest) {
	return func(r *sharelogv1.StreamChangesRequest) { r.EndOffset = proto.Int64(e) }
}
func withOSO(m sharelogv1.OsoMode) func(*sharelogv1.StreamChangesRequest) {
	return func(r *sharelogv1.StreamChangesRequest) { r.OsoMode = m }
}
func withTopicID(id string) func(*sharelogv1.StreamChangesRequest) {
	return func(r *sharelogv1.StreamChangesRequest) { r.TopicId = proto.String(id) }
}

const (
	osoOn  = sharelogv1.OsoMode_OSO_MODE_ON
	osoAdv = sharelogv1.OsoMode_OSO_MODE_ON_WITH_OFFSET_ADVANCED
	osoOff = sharelogv1.OsoMode_OSO_MODE_OFF
)

// openChanges starts a call. Events are received only when asked for (next),
// so a test controls flow control: an unread stream blocks the server.
func (s *stack) openChanges(t testing.TB, req *sharelogv1.StreamChangesRequest) *changeCall {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cl := sharelogv1.NewChangeStreamServiceClient(s.conn)
	st, err := cl.StreamChanges(ctx, req)
	require.NoError(t, err)
	c := &changeCall{stream: st, cancel: cancel}
	t.Cleanup(cancel)
	// Headers come once the request is validated (or with the error): after
	// this the stream is positioned and later appends are MEMORY.
	_, err = st.Header()
	require.NoError(t, err)
	return c
}

// next returns the next event (or the call's final error), receiving the
// next message with a timeout when the last one is used up.
func (c *changeCall) next(t testing.TB) (*sharelogv1.ChangeEvent, error) {
	t.Helper()
	if len(c.pending) == 0 {
		ch := make(chan recvResult, 1)
		go func() {
			r, err := c.stream.Recv()
			ch <- recvResult{r, err}
		}()
		select {
		case r := <-ch:
			if r.err != nil {
				return nil, r.err
			}
			c.messages++
			c.pending = r.resp.GetEvents()
			require.NotEmpty(t, c.pending, "a message without events")
		case <-time.After(evTimeout):
			t.Fatal("no event within the timeout")
			return nil, nil
		}
	}
	ev := c.pending[0]
	c.pending = c.pending[1:]
	return ev, nil
}

// nextStr receives one event that must arrive, as a string.
func (c *changeCall) nextStr(t testing.TB) string {
	t.Helper()
	r, err := c.next(t)
	require.NoError(t, err)
	return evString(r)
}

// take receives n events as strings.
func (c *changeCall) take(t testing.TB, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = c.nextStr(t)
	}
	return out
}

// quiet asserts that no event arrives within d.
func (c *changeCall) quiet(t testing.TB, d time.Duration) {
	t.Helper()
	require.Empty(t, c.pending, "events left in the last message")
	ch := make(chan recvResult, 1)
	go func() {
		r, err := c.stream.Recv()
		ch <- recvResult{r, err}
	}()
	select {
	case r := <-ch:
		t.Fatalf("unexpected message %v (err %v)", r.resp, r.err)
	case <-time.After(d):
		c.cancel() // the pending Recv cannot be taken back
	}
}

// drain reads events until the call completes and returns them with the
// final status (nil after a normal completion).
func (c *changeCall) drain(t testing.TB) ([]string, error) {
	t.Helper()
	var out []string
	for {
		r, err := c.next(t)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, evString(r))
	}
}

// streamAll runs a call with an end_offset to completion.
func (s *stack) streamAll(t testing.TB, req *sharelogv1.StreamChangesRequest) []string {
	t.Helper()
	evs, err := s.openChanges(t, req).drain(t)
	require.NoError(t, err)
	return evs
}

// osoSplit splits events into the OSO snapshot's items (sorted, as OSO
// order is unspecified) and the rest, checking START/END placement.
func osoSplit(t testing.TB, evs []string) (items []string, rest []string) {
	t.Helper()
	require.NotEmpty(t, evs)
	require.Equal(t, "oso(START)", evs[0], "an OSO snapshot is the call's first event")
	end := slices.Index(evs, "oso(END)")
	require.Positive(t, end, "events: %v", evs)
	items = slices.Clone(evs[1:end])
	slices.Sort(items)
	return items, evs[end+1:]
}

// recvCall is a call's next event, for tests that must not block.
func requireRecvError(t testing.TB, c *changeCall) error {
	t.Helper()
	_, err := c.next(t)
	require.Error(t, err)
	return err
}

// pollTick is the step of Eventually loops.
const pollTick = 5 * time.Millisecond

func statusCode(err error) codes.Code { return status.Code(err) }

func jsonUnmarshalProto(b []byte, m proto.Message) error { return protojson.Unmarshal(b, m) }
