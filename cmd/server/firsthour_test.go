package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// TestRootAndStartupLine: GET / sends a browser to the console, and the startup line names
// the console's URL and the trace exporter (issue 34, friction 6: GET / was a JSON 404 and
// the line named neither).
func TestRootAndStartupLine(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	c := startChild(t, t.TempDir(), "--fsync", "never")

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get("http://" + c.httpAddr + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusFound, resp.StatusCode)
	assert.Equal(t, "/ui/", resp.Header.Get("Location"))

	code, body := c.restJSON(t, http.MethodGet, "/nope", "")
	assert.Equal(t, http.StatusNotFound, code, "only / redirects: %s", body)

	var serving map[string]any
	for _, l := range c.startup {
		if l["msg"] == "sharelog serving" {
			serving = l
		}
	}
	require.NotNil(t, serving)
	assert.Equal(t, "http://"+c.httpAddr+"/ui/", serving["console"])
	assert.Equal(t, "otlp grpc http://127.0.0.1:1", serving["trace_exporter"])
}

// TestTextRecordsThroughTheGateway: key_text and value_text on Produce and ?encoding=text on
// Fetch through the real gateway (docs/README.md "Text instead of base64"; issue 34, friction 3: REST bytes were
// base64 only, so {"value":"test"} stored b5 eb 2d and "hello" was a proto error).
func TestTextRecordsThroughTheGateway(t *testing.T) {
	c := startChild(t, t.TempDir(), "--fsync", "never")
	code, body := c.restJSON(t, http.MethodPost, "/v1/topics", `{"name":"txt","partitions":1}`)
	require.Equal(t, http.StatusOK, code, body)

	code, body = c.restJSON(t, http.MethodPost, "/v1/topics/txt/records",
		`{"partition":0,"records":[{"keyText":"user-1","valueText":"h\u00e9llo \"w\"\n"},{"value":"test"},{"key":"/w==","valueText":"v"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	// The same through protojson's path (snake_case names are not the fast decoder's).
	code, body = c.restJSON(t, http.MethodPost, "/v1/topics/txt/records", `{"partition":0,"records":[{"key_text":"k","value_text":"snake"}]}`)
	require.Equal(t, http.StatusOK, code, body)

	records := func(query string) []map[string]any {
		t.Helper()
		code, body := c.restJSON(t, http.MethodGet, "/v1/topics/txt/partitions/0/records?offset=0"+query, "")
		require.Equal(t, http.StatusOK, code, body)
		var resp struct{ Records []map[string]any }
		require.NoError(t, json.Unmarshal([]byte(body), &resp), body)
		for _, r := range resp.Records {
			delete(r, "timestamp")
		}
		return resp.Records
	}
	noHeaders := []any{}
	// The default: bytes, base64 in JSON, however the record was sent.
	assert.Equal(t, []map[string]any{
		{"offset": "0", "key": "dXNlci0x", "value": "aMOpbGxvICJ3Igo=", "headers": noHeaders},
		{"offset": "1", "value": "test", "headers": noHeaders}, // {"value":"test"} is base64: the bytes b5 eb 2d
		{"offset": "2", "key": "/w==", "value": "dg==", "headers": noHeaders},
		{"offset": "3", "key": "aw==", "value": "c25ha2U=", "headers": noHeaders},
	}, records(""))
	// encoding=text: UTF-8 as text, other bytes still base64 in the bytes field.
	assert.Equal(t, []map[string]any{
		{"offset": "0", "keyText": "user-1", "valueText": "h\u00e9llo \"w\"\n", "headers": noHeaders},
		{"offset": "1", "value": "test", "headers": noHeaders},
		{"offset": "2", "key": "/w==", "valueText": "v", "headers": noHeaders},
		{"offset": "3", "keyText": "k", "valueText": "snake", "headers": noHeaders},
	}, records("&encoding=text"))
	assert.Equal(t, records(""), records("&encoding=bytes"))

	t.Run("change stream", func(t *testing.T) {
		stream := func(query string) string {
			t.Helper()
			code, body := c.restJSON(t, http.MethodGet, "/v1/topics/txt/partitions/0/changes?startOffset=0&endOffset=4"+query, "")
			require.Equal(t, http.StatusOK, code, body)
			return body
		}
		text := stream("&encoding=text")
		assert.Regexp(t, `"mutation":\{"offset":"0","timestamp":"[0-9]+","headers":\[\],"keyText":"user-1","valueText":"h\x{e9}llo \\"w\\"\\n"\}`, text)
		assert.Regexp(t, `"mutation":\{"offset":"2","timestamp":"[0-9]+","key":"/w==","headers":\[\],"valueText":"v"\}`, text, "a key that is not UTF-8 stays base64")
		assert.Contains(t, text, `"streamEnd":{"reason":"STREAM_END_REASON_OK"}`)
		assert.Regexp(t, `"mutation":\{"offset":"0","timestamp":"[0-9]+","key":"dXNlci0x","value":"aMOpbGxvICJ3Igo=","headers":\[\]\}`, stream(""), "bytes by default")
		code, body := c.restJSON(t, http.MethodGet, "/v1/topics/txt/partitions/0/changes?startOffset=0&encoding=base64", "")
		assert.Equal(t, http.StatusBadRequest, code, body)
		assert.Contains(t, body, `"reason":"INVALID_REQUEST"`, "one {\"error\": ...} line")
	})

	t.Run("errors", func(t *testing.T) {
		code, _, a := c.rest(t, http.MethodGet, "/v1/topics/txt/partitions/0/records?offset=0&encoding=utf8", "")
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Equal(t, "INVALID_REQUEST", a.reason(), "%+v", a)
		code, _, a = c.rest(t, http.MethodPost, "/v1/topics/txt/records", `{"records":[{"value":"dg==","valueText":"v"}]}`)
		assert.Equal(t, http.StatusBadRequest, code)
		assert.Equal(t, "INVALID_REQUEST", a.reason(), "%+v", a)
		assert.Contains(t, a.Message, "value and value_text are both set")
	})

	t.Run("grpc", func(t *testing.T) {
		client := sharelogv1.NewLogServiceClient(c.conn)
		_, err := client.Produce(t.Context(), &sharelogv1.ProduceRequest{Topic: "txt", Partition: proto.Int32(0),
			Records: []*sharelogv1.Record{{KeyText: proto.String("g"), ValueText: proto.String("rpc")}}})
		require.NoError(t, err)
		resp, err := client.Fetch(t.Context(), &sharelogv1.FetchRequest{Topic: "txt", Offset: 4, Encoding: "text"})
		require.NoError(t, err)
		require.Len(t, resp.GetRecords(), 1)
		assert.Equal(t, "g", resp.GetRecords()[0].GetKeyText())
		assert.Equal(t, "rpc", resp.GetRecords()[0].GetValueText())
		assert.Nil(t, resp.GetRecords()[0].Value)
		resp, err = client.Fetch(t.Context(), &sharelogv1.FetchRequest{Topic: "txt", Offset: 4})
		require.NoError(t, err)
		assert.Equal(t, []byte("rpc"), resp.GetRecords()[0].GetValue())
		assert.Nil(t, resp.GetRecords()[0].ValueText)
	})
}
