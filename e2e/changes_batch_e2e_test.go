package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// produceSized produces n records k0000.. with values of size bytes, in
// requests of at most 4 MiB.
func (s *stack) produceSized(t testing.TB, topic string, n, size int) {
	t.Helper()
	p := int32(0)
	req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &p}
	flush := func() {
		if len(req.Records) > 0 {
			_, err := s.log.Produce(context.Background(), req)
			require.NoError(t, err)
			req.Records = nil
		}
	}
	for i := range n {
		req.Records = append(req.Records, &sharelogv1.Record{Key: fmt.Appendf(nil, "k%04d", i), Value: bytes.Repeat([]byte("v"), size)})
		if (len(req.Records)+1)*size > 4<<20 {
			flush()
		}
	}
	flush()
}

// streamMessages runs a call to its end and returns its messages as they
// came.
func (s *stack) streamMessages(t testing.TB, req *sharelogv1.StreamChangesRequest) []*sharelogv1.StreamChangesResponse {
	t.Helper()
	st, err := sharelogv1.NewChangeStreamServiceClient(s.conn).StreamChanges(context.Background(), req)
	require.NoError(t, err)
	var msgs []*sharelogv1.StreamChangesResponse
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return msgs
		}
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
}

// TestChangesBatched: the server puts several events in a message, at most
// 256 and at most 1 MiB (a larger event alone), without changing the
// events or their order.
func TestChangesBatched(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	cases := []struct {
		name        string
		records     int
		size        int
		maxMessages int // at most this many messages
	}{
		// marker, 1000 mutations, end: 1002 events in 4 full messages and
		// what the flush before the first scan and the end leave.
		{"small records", 1000, 10, 6},
		// 40 records of 300 KiB: three a message.
		{"large records", 40, 300 << 10, 16},
		// Records larger than 1 MiB come one a message.
		{"records over 1 MiB", 3, 1100 << 10, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("batch-%d", tc.size)
			s.createTopic(t, topic, 1, &sharelogv1.TopicConfig{SegmentBytes: proto.Int64(1 << 30)})
			s.produceSized(t, topic, tc.records, tc.size)
			for _, mode := range []sharelogv1.OsoMode{osoOff, osoOn} {
				msgs := s.streamMessages(t, streamReq(topic, 0, withEnd(int64(tc.records)), withOSO(mode)))
				var events []string
				for i, m := range msgs {
					n := len(m.GetEvents())
					require.Positive(t, n, "message %d has no event", i)
					assert.LessOrEqual(t, n, 256, "message %d", i)
					if n > 1 {
						assert.LessOrEqual(t, proto.Size(m), 1<<20, "message %d of %d events", i, n)
					}
					for _, ev := range m.GetEvents() {
						events = append(events, evString(ev))
					}
				}
				assert.LessOrEqual(t, len(msgs), tc.maxMessages, "%v: %d events in %d messages", mode, len(events), len(msgs))
				var want []string
				if mode == osoOn {
					want = append(want, "oso(START)")
				} else {
					want = append(want, fmt.Sprintf("marker(0..%d, DISK)", tc.records-1))
				}
				for i := range tc.records {
					want = append(want, fmt.Sprintf("mut(k%04d@%d)", i, i))
				}
				if mode == osoOn {
					want = append(want, "oso(END)")
				}
				assert.Equal(t, append(want, "end(OK)"), events, "%v", mode)
			}
		})
	}
}

// TestChangesRESTOneEventPerLine: over the gateway a message of many
// events is written as one NDJSON line per event, {"result": event}.
func TestChangesRESTOneEventPerLine(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	s.createTopic(t, "lines", 1, nil)
	s.produceSized(t, "lines", 600, 10)
	msgs := s.streamMessages(t, streamReq("lines", 0, withEnd(600)))
	var events int
	for _, m := range msgs {
		events += len(m.GetEvents())
	}
	require.Equal(t, 602, events, "marker, 600 mutations, end")
	require.Less(t, len(msgs), 10, "the gRPC stream batches")

	n := s.ndjson(t, "lines", url.Values{"startOffset": {"0"}, "endOffset": {"600"}})
	assert.Equal(t, "application/x-ndjson", n.resp.Header.Get("Content-Type"))
	var lines int
	for n.sc.Scan() {
		var line map[string]map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(n.sc.Bytes(), &line), "line %d: %s", lines, n.sc.Bytes())
		require.Len(t, line, 1, "line %d: %s", lines, n.sc.Bytes())
		require.Len(t, line["result"], 1, "line %d holds one event: %s", lines, n.sc.Bytes())
		lines++
	}
	require.NoError(t, n.sc.Err())
	assert.Equal(t, events, lines)
}
