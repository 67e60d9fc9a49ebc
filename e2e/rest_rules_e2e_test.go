package e2e

import (
	"bufio"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/app"
)

// A known path with a method it does not serve is 405 with Allow (the
// gateway alone answers 501); an unknown path stays 404.
func TestRESTWrongMethodIs405(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	s.createTopic(t, "t", 1, nil)
	cases := []struct{ method, path, allow string }{
		{http.MethodPut, "/v1/topics", "GET, POST"},
		{http.MethodPatch, "/v1/topics/t", "DELETE, GET"},
		{http.MethodGet, "/v1/topics/t/records", "POST"},
		{http.MethodDelete, "/v1/share-groups/g/config", "GET, PATCH"},
		{http.MethodGet, "/v1/purge", "POST"},
		{http.MethodPut, "/v1/share-groups/g/offsets:alter", "POST"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req, err := http.NewRequest(c.method, s.http.URL+c.path, nil)
			require.NoError(t, err)
			resp, err := s.http.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
			assert.Equal(t, c.allow, resp.Header.Get("Allow"))
		})
	}
	r := s.rest(t, http.MethodPut, "/v1/topics", "")
	requireRESTError(t, r, http.StatusMethodNotAllowed, "INVALID_REQUEST")
	assert.Equal(t, http.StatusNotFound, s.rest(t, http.MethodGet, "/v1/nothing-here", "").Status)
}

// A query parameter the route does not accept is 400 INVALID_REQUEST,
// never ignored; the accepted ones work under their JSON and proto names.
func TestRESTUnknownQueryParameterIs400(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	s.createTopic(t, "t", 1, nil)
	s.produce(t, "t", 0, "a", "b", "c")

	for _, path := range []string{
		"/v1/topics/t/partitions/0/records?ofset=2", // misspelt: it would read from 0
		"/v1/topics/t/partitions/0/records?offset=2&maxRecord=1",
		"/v1/topics?verbose=true",
		"/v1/topics/t?x=1",
		"/v1/share-groups?state=EMPTY",
	} {
		r := s.rest(t, http.MethodGet, path, "")
		requireRESTError(t, r, http.StatusBadRequest, "INVALID_REQUEST")
		assert.Contains(t, r.Body["message"], "unknown query parameter", path)
	}
	r := s.rest(t, http.MethodPost, "/v1/topics?partitions=3", `{"name":"u","partitions":1}`)
	requireRESTError(t, r, http.StatusBadRequest, "INVALID_REQUEST")

	for _, path := range []string{
		"/v1/topics/t/partitions/0/records?offset=2&maxRecords=1",
		"/v1/topics/t/partitions/0/records?offset=2&max_records=1",
	} {
		r := s.rest(t, http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		recs, _ := r.Body["records"].([]any)
		require.Len(t, recs, 1, path)
		assert.Equal(t, "2", recs[0].(map[string]any)["offset"], path)
	}
	assert.Equal(t, http.StatusOK, s.rest(t, http.MethodGet, "/v1/share-groups?stateFilter=SHARE_GROUP_STATE_EMPTY", "").Status)
}

// Responses carry no gRPC metadata headers, and a request with a trace
// context gets its trace id back.
func TestRESTResponseHeaders(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	s.createTopic(t, "t", 1, nil)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequest(http.MethodGet, s.http.URL+"/v1/topics/t", nil)
	require.NoError(t, err)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := s.http.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for k := range resp.Header {
		assert.False(t, strings.HasPrefix(strings.ToLower(k), "grpc-metadata-"), "leaked header %s", k)
	}
	assert.Equal(t, traceID, resp.Header.Get("X-Trace-Id"))
	assert.Contains(t, resp.Header.Get("traceparent"), traceID)

	// Without a trace context and without tracing there is no trace id.
	resp, err = s.http.Client().Get(s.http.URL + "/v1/topics/t")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Empty(t, resp.Header.Get("X-Trace-Id"))
}

// The NDJSON change stream is served as application/x-ndjson, one JSON
// document per line.
func TestRESTChangeStreamIsNDJSON(t *testing.T) {
	t.Parallel()
	s := newStack(t, app.Options{})
	s.createTopic(t, "t", 1, nil)
	s.produce(t, "t", 0, "a", "b")
	q := url.Values{"endOffset": {"2"}}
	resp, err := s.http.Client().Get(s.http.URL + "/v1/topics/t/partitions/0/changes?" + q.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	lines := 0
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			require.True(t, strings.HasPrefix(sc.Text(), "{"), sc.Text())
			lines++
		}
	}
	assert.Positive(t, lines)
}
