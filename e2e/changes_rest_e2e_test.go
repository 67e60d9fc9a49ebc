package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// ndjson is one NDJSON change stream over the gateway.
type ndjson struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func (s *stack) ndjson(t *testing.T, topic string, q url.Values) *ndjson {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.http.URL+"/v1/topics/"+topic+"/partitions/0/changes?"+q.Encode(), nil)
	require.NoError(t, err)
	resp, err := s.http.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return &ndjson{resp: resp, sc: sc}
}

// line reads the next line as JSON (nil at the end of the body).
func (n *ndjson) line(t *testing.T) map[string]any {
	t.Helper()
	if !n.sc.Scan() {
		require.NoError(t, n.sc.Err())
		return nil
	}
	var m map[string]any
	require.NoError(t, json.Unmarshal(n.sc.Bytes(), &m), "line %s", n.sc.Bytes())
	return m
}

// restEvString renders a {"result": ...} line like evString.
func restEvString(t *testing.T, line map[string]any) string {
	t.Helper()
	res, ok := line["result"].(map[string]any)
	require.True(t, ok, "not a result line: %v", line)
	raw, err := json.Marshal(res)
	require.NoError(t, err)
	var r sharelogv1.ChangeEvent // one event per line, however the server batched them
	require.NoError(t, jsonUnmarshalProto(raw, &r))
	return evString(&r)
}

func (n *ndjson) all(t *testing.T) []string {
	t.Helper()
	var out []string
	for {
		l := n.line(t)
		if l == nil {
			return out
		}
		out = append(out, restEvString(t, l))
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestChangesREST: the main rules through the NDJSON route.
func TestChangesREST(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{}, osoEnabled)
	s.exampleTopic(t, "rest")

	t.Run("Ex1 and Ex2 as NDJSON", func(t *testing.T) {
		n := s.ndjson(t, "rest", url.Values{"startOffset": {"0"}, "endOffset": {"6"}, "keyPrefix": {b64("u/")}})
		require.Equal(t, http.StatusOK, n.resp.StatusCode)
		first := n.line(t)
		marker := first["result"].(map[string]any)["snapshotMarker"].(map[string]any)
		assert.Equal(t, "0", marker["startOffset"], "64-bit numbers as strings")
		assert.Equal(t, "5", marker["endOffset"])
		assert.Equal(t, "SNAPSHOT_SOURCE_DISK", marker["source"])
		assert.Equal(t, []string{"mut(u/a@0)", "mut(u/b@2)", "mut(u/a@3)", "del(u/b@4)", "adv(5)", "end(OK)"}, n.all(t))
	})
	t.Run("a live tail", func(t *testing.T) {
		n := s.ndjson(t, "rest", url.Values{"startOffset": {"0"}, "keyPrefix": {b64("u/")}})
		var got []string
		for range 7 {
			got = append(got, restEvString(t, n.line(t)))
		}
		assert.Equal(t, []string{"marker(0..7, DISK)", "mut(u/a@0)", "mut(u/b@2)", "mut(u/a@3)", "del(u/b@4)", "mut(u/c@6)", "adv(7)"}, got)
		s.produceKV(t, "rest", "u/d", "4")
		assert.Equal(t, "marker(8..8, MEMORY)", restEvString(t, n.line(t)))
		assert.Equal(t, "mut(u/d@8)", restEvString(t, n.line(t)))
	})
	t.Run("OSO", func(t *testing.T) {
		id := s.exampleTopic(t, "rest-oso")
		n := s.ndjson(t, "rest-oso", url.Values{"startOffset": {"0"}, "endOffset": {"8"}, "keyPrefix": {b64("u/")},
			"osoMode": {"OSO_MODE_ON_WITH_OFFSET_ADVANCED"}, "topicId": {id}})
		items, rest := osoSplit(t, n.all(t))
		assert.Equal(t, []string{"adv(7)", "del(u/b@4)", "mut(u/a@3)", "mut(u/c@6)"}, items)
		assert.Equal(t, []string{"end(OK)"}, rest)
	})
	t.Run("keyPrefix in URL-safe base64", func(t *testing.T) {
		s.createTopic(t, "rest-b64", 1, nil)
		prefix := "\xfb\xff" // standard base64 "+/8=", URL-safe "-_8="
		s.produceKV(t, "rest-b64", prefix+"k", "1", "other", "2")
		for _, enc := range []string{"-_8=", "-_8", base64.StdEncoding.EncodeToString([]byte(prefix))} {
			n := s.ndjson(t, "rest-b64", url.Values{"startOffset": {"0"}, "endOffset": {"2"}, "keyPrefix": {enc}})
			assert.Equal(t, []string{"marker(0..1, DISK)", "mut(\xfb\xffk@0)", "adv(1)", "end(OK)"}, n.all(t), "keyPrefix=%s", enc)
		}
	})
	errCases := []struct {
		name   string
		topic  string
		q      url.Values
		status int
		reason string
	}{
		{"invalid", "rest", url.Values{"startOffset": {"5"}, "endOffset": {"2"}}, 400, "INVALID_REQUEST"},
		{"unknown topic", "nope", url.Values{}, 404, "UNKNOWN_TOPIC_OR_PARTITION"},
		{"rollback", "rest", url.Values{"startOffset": {"2"}, "topicId": {"00000000-0000-4000-8000-000000000000"}}, 400, "ROLLBACK_REQUIRED"},
		{"out of range", "rest", url.Values{"startOffset": {"100"}}, 400, "OFFSET_OUT_OF_RANGE"},
	}
	for _, tc := range errCases {
		t.Run("error before the first event: "+tc.name, func(t *testing.T) {
			n := s.ndjson(t, tc.topic, tc.q)
			assert.Equal(t, tc.status, n.resp.StatusCode)
			l := n.line(t)
			require.Len(t, l, 1, "one {\"error\": ...} line: %v", l)
			st, ok := l["error"].(map[string]any)
			require.True(t, ok, "%v", l)
			assert.NotEmpty(t, st["message"])
			details, _ := st["details"].([]any)
			require.NotEmpty(t, details)
			assert.Equal(t, tc.reason, details[0].(map[string]any)["reason"])
			assert.Nil(t, n.line(t), "nothing after the error line")
		})
	}
	t.Run("topic deleted during a tail", func(t *testing.T) {
		s.createTopic(t, "rest-del", 1, nil)
		s.produceKV(t, "rest-del", "a", "1")
		n := s.ndjson(t, "rest-del", url.Values{"startOffset": {"0"}})
		assert.Equal(t, "marker(0..0, DISK)", restEvString(t, n.line(t)))
		assert.Equal(t, "mut(a@0)", restEvString(t, n.line(t)))
		_, err := s.log.DeleteTopic(context.Background(), &sharelogv1.DeleteTopicRequest{Name: "rest-del"})
		require.NoError(t, err)
		assert.Equal(t, []string{"end(TOPIC_DELETED)"}, n.all(t))
	})
}
