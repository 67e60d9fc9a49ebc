package httpgw

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// produceBodies are Produce bodies and whether the fast decoder takes them
// itself (true) or hands them to protojson (false).
var produceBodies = []struct {
	name string
	body string
	fast bool
}{
	{"plain", `{"partition":0,"records":[{"key":"azAwMDAwMQ==","value":"eHh4"}]}`, true},
	{"every field", `{"topic":"t","partition":3,"records":[{"offset":"7","timestamp":1700000000000,"key":"aw==","value":"dg==",` +
		`"headers":[{"key":"h","value":"aHY="},{"key":"","value":""}]},{"value":"dg=="}]}`, true},
	{"whitespace everywhere", " \n{ \"partition\" : 1 ,\t\"records\" : [ { \"value\" : \"dg==\" } ] }\r\n ", true},
	{"empty object", `{}`, true},
	{"empty records", `{"records":[]}`, true},
	{"empty record", `{"records":[{}]}`, true},
	{"empty key and value are present", `{"records":[{"key":"","value":""}]}`, true},
	{"key without value (tombstone)", `{"records":[{"key":"aw=="}]}`, true},
	{"negative partition", `{"partition":-1}`, true},
	{"minus zero", `{"partition":-0,"records":[{"offset":"-0"}]}`, true},
	{"int64 bounds", `{"records":[{"offset":9223372036854775807,"timestamp":"-9223372036854775808"}]}`, true},
	{"int32 bounds", `{"partition":2147483647}`, true},
	{"int32 as string", `{"partition":"2"}`, true},
	{"escaped field name", `{"p\u0061rtition":1}`, true},
	{"escaped topic", `{"topic":"t\u00e9\n\"x"}`, true},
	{"text key and value", `{"records":[{"keyText":"user-1","valueText":"h\u00e9llo \"w\"\n"},{"valueText":""}]}`, true},
	{"text fields by their proto names", `{"records":[{"key_text":"k","value_text":"v"}]}`, false},
	{"text value as a number", `{"records":[{"valueText":1}]}`, false},
	{"escaped base64", `{"records":[{"value":"eHh\u0034"}]}`, true},
	{"base64 with escaped line breaks", `{"records":[{"value":"eHh4\r\neHh4"}]}`, true},
	{"base64 url-safe", `{"records":[{"value":"-_-_"}]}`, true},
	{"base64 unpadded", `{"records":[{"value":"eHh4eA"}]}`, true},
	{"base64 url-safe unpadded", `{"records":[{"value":"-_8"}]}`, true},
	{"trailing whitespace", "{}\n\n", true},
	{"utf-8 topic", `{"topic":"тема"}`, true},

	// protojson decides these.
	{"empty body", ``, false},
	{"whitespace body", " \n", false},
	{"null body", `null`, false},
	{"array body", `[]`, false},
	{"string body", `"x"`, false},
	{"null records", `{"records":null}`, false},
	{"null partition", `{"partition":null}`, false},
	{"null topic", `{"topic":null}`, false},
	{"null key", `{"records":[{"key":null,"value":"dg=="}]}`, false},
	{"null value", `{"records":[{"value":null}]}`, false},
	{"null record", `{"records":[null]}`, false},
	{"null headers", `{"records":[{"headers":null}]}`, false},
	{"null offset", `{"records":[{"offset":null}]}`, false},
	{"unknown field", `{"partition":1,"foo":1}`, false},
	{"unknown record field", `{"records":[{"value":"dg==","val":"dg=="}]}`, false},
	{"unknown header field", `{"records":[{"headers":[{"k":"x"}]}]}`, false},
	{"field name case", `{"Records":[]}`, false},
	{"response field in a request", `{"logAppendTime":"1"}`, false},
	{"response field snake_case", `{"log_append_time":"1"}`, false},
	{"partition string", `{"partition":"x"}`, false},
	{"partition bool", `{"partition":true}`, false},
	{"partition fraction", `{"partition":1.5}`, false},
	{"partition whole fraction", `{"partition":1.0}`, false},
	{"partition exponent", `{"partition":1e2}`, false},
	{"partition exponent string", `{"partition":"1e2"}`, false},
	{"partition over int32", `{"partition":2147483648}`, false},
	{"partition string over int32", `{"partition":"-2147483649"}`, false},
	{"partition string with spaces", `{"partition":" 1"}`, false},
	{"partition string leading zero", `{"partition":"01"}`, false},
	{"partition string plus", `{"partition":"+1"}`, false},
	{"partition empty string", `{"partition":""}`, false},
	{"offset over int64", `{"records":[{"offset":9223372036854775808}]}`, false},
	{"offset string over int64", `{"records":[{"offset":"9223372036854775808"}]}`, false},
	{"offset fraction string", `{"records":[{"offset":"1.5"}]}`, false},
	{"topic number", `{"topic":1}`, false},
	{"records object", `{"records":{}}`, false},
	{"records number", `{"records":[1]}`, false},
	{"value number", `{"records":[{"value":1}]}`, false},
	{"value array", `{"records":[{"value":[1]}]}`, false},
	{"headers object", `{"records":[{"headers":{}}]}`, false},
	{"header key number", `{"records":[{"headers":[{"key":1}]}]}`, false},
	{"invalid base64", `{"records":[{"value":"!!!!"}]}`, false},
	{"base64 bad length", `{"records":[{"value":"eHh4e"}]}`, false},
	{"base64 padded, odd length with a line break", `{"records":[{"value":"eHh4\neA=="}]}`, false},
	{"base64 mixed alphabets", `{"records":[{"value":"+/-_"}]}`, false},
	{"base64 bad padding", `{"records":[{"value":"eA=x"}]}`, false},
	{"duplicate field", `{"partition":1,"partition":2}`, false},
	{"duplicate record field", `{"records":[{"value":"dg==","value":"dg=="}]}`, false},
	{"duplicate records", `{"records":[],"records":[{}]}`, false},
	{"trailing garbage", `{"partition":1} x`, false},
	{"second value", `{"partition":1}{"partition":2}`, false},
	{"unterminated", `{"records":[{"value":"dg=="}`, false},
	{"trailing comma", `{"partition":1,}`, false},
	{"array trailing comma", `{"records":[{},]}`, false},
	{"missing colon", `{"partition" 1}`, false},
	{"single quotes", `{'partition':1}`, false},
	{"invalid utf-8 topic", "{\"topic\":\"\xff\"}", false},
	{"invalid utf-8 name", "{\"\xff\":1}", false},
	{"invalid escape", `{"topic":"\x"}`, false},
	{"control character in string", "{\"topic\":\"a\tb\"}", false},
	{"leading zero number", `{"partition":01}`, false},
}

// decodeBoth decodes body with the gateway's protojson decoder and with
// fastJSON's, and requires the same request or the same error.
func decodeBoth(t *testing.T, body string, r func(string) io.Reader) *sharelogv1.ProduceRequest {
	t.Helper()
	var old, fast sharelogv1.ProduceRequest
	errOld := jsonMarshaler.NewDecoder(r(body)).Decode(&old)
	errFast := fastJSON{jsonMarshaler}.NewDecoder(r(body)).Decode(&fast)
	if errOld != nil || errFast != nil {
		require.Error(t, errOld, "fast decoder failed where protojson did not: %v", errFast)
		require.Error(t, errFast, "fast decoder accepted what protojson refused: %v", errOld)
		require.Equal(t, errOld.Error(), errFast.Error())
		require.Equal(t, errors.Is(errOld, io.EOF), errors.Is(errFast, io.EOF))
	}
	require.True(t, proto.Equal(&old, &fast), "protojson %v\nfast      %v", &old, &fast)
	return &fast
}

func TestFastJSONProduceMatchesProtojson(t *testing.T) {
	reader := func(s string) io.Reader { return strings.NewReader(s) }
	for _, tc := range produceBodies {
		t.Run(tc.name, func(t *testing.T) {
			decodeBoth(t, tc.body, reader)
			var req sharelogv1.ProduceRequest
			require.Equal(t, tc.fast, decodeProduce([]byte(tc.body), &req), "fast path taken")
		})
	}
}

// Large bodies: a 1 MiB value, and 1 MiB of invalid base64.
func TestFastJSONProduceLargeValues(t *testing.T) {
	reader := func(s string) io.Reader { return strings.NewReader(s) }
	big := strings.Repeat("eHh4", 1<<18)
	req := decodeBoth(t, `{"records":[{"value":"`+big+`"},{"value":"`+big+`"}]}`, reader)
	require.Len(t, req.GetRecords(), 2)
	require.Equal(t, bytes.Repeat([]byte("xxx"), 1<<18), req.GetRecords()[1].GetValue())

	bad := strings.Repeat("!", 1<<20)
	var fast sharelogv1.ProduceRequest
	require.False(t, decodeProduce([]byte(`{"records":[{"value":"`+bad+`"}]}`), &fast))
	decodeBoth(t, `{"records":[{"value":"`+bad+`"}]}`, reader)
}

// A body that does not arrive whole fails as it did: the gateway's decoder
// sees the bytes that came and then the read error.
func TestFastJSONProduceReadError(t *testing.T) {
	broken := errors.New("connection reset")
	for _, body := range []string{``, `{"partition":1`, `{"partition":1}`, `{"partition":x`, `{"records":[{"value":"dg=="}]}  `} {
		t.Run(body, func(t *testing.T) {
			decodeBoth(t, body, func(s string) io.Reader { return io.MultiReader(strings.NewReader(s), errReader{broken}) })
		})
	}
}

// Other messages are not touched by the fast path.
func TestFastJSONOtherMessages(t *testing.T) {
	body := `{"name":"t","partitions":2,"config":{"retentionMs":"5"}}`
	var old, fast sharelogv1.CreateTopicRequest
	require.NoError(t, jsonMarshaler.NewDecoder(strings.NewReader(body)).Decode(&old))
	require.NoError(t, fastJSON{jsonMarshaler}.NewDecoder(strings.NewReader(body)).Decode(&fast))
	require.True(t, proto.Equal(&old, &fast))
	require.EqualValues(t, 2, fast.GetPartitions())
}

// FuzzFastJSONProduce: whatever the body, the fast decoder answers as
// protojson does (go test -fuzz FuzzFastJSONProduce ./internal/transport/httpgw/).
func FuzzFastJSONProduce(f *testing.F) {
	for _, tc := range produceBodies {
		f.Add(tc.body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		decodeBoth(t, body, func(s string) io.Reader { return strings.NewReader(s) })
	})
}

// The Produce answer is the JSON protojson writes (compacted: protojson
// adds spaces at random to keep callers from depending on its bytes).
func TestFastJSONProduceResponseMatchesProtojson(t *testing.T) {
	for _, resp := range []*sharelogv1.ProduceResponse{
		{},
		{Results: []*sharelogv1.ProduceResult{}},
		{Results: []*sharelogv1.ProduceResult{{}}},
		{LogAppendTime: 1700000000123, Results: []*sharelogv1.ProduceResult{{Partition: 0, Offset: 0}, {Partition: 3, Offset: 41}}},
		{LogAppendTime: -1, Results: []*sharelogv1.ProduceResult{{Partition: -2147483648, Offset: -9223372036854775808}}},
		{LogAppendTime: 9223372036854775807, Results: []*sharelogv1.ProduceResult{{Partition: 2147483647, Offset: 9223372036854775807}}},
	} {
		want, err := jsonMarshaler.Marshal(resp)
		require.NoError(t, err)
		var compact bytes.Buffer
		require.NoError(t, stdjson.Compact(&compact, want))
		got, err := fastJSON{jsonMarshaler}.Marshal(resp)
		require.NoError(t, err)
		require.Equal(t, compact.String(), string(got))
		// And through the gateway's marshaler stack.
		got, err = ndjsonStreams{&runtime.HTTPBodyMarshaler{Marshaler: fastJSON{jsonMarshaler}}}.Marshal(resp)
		require.NoError(t, err)
		require.Equal(t, compact.String(), string(got))
	}
	// A nil answer, an answer with per-partition errors and other messages
	// are protojson's.
	withError := &sharelogv1.ProduceResponse{LogAppendTime: 5, Results: []*sharelogv1.ProduceResult{{Partition: 0, Offset: 7},
		{Partition: 1, Offset: -1, ErrorCode: sharelogv1.ErrorCode_ERROR_CODE_KAFKA_STORAGE_ERROR, ErrorMessage: "a \"quoted\" cause"}}}
	for _, v := range []any{(*sharelogv1.ProduceResponse)(nil), withError, &sharelogv1.ProduceResult{Offset: 5}} {
		want, err := jsonMarshaler.Marshal(v)
		require.NoError(t, err)
		got, err := fastJSON{jsonMarshaler}.Marshal(v)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}

// The Fetch answer is the JSON protojson writes, exactly sized; a header
// key that needs escaping is protojson's own answer.
func TestFastJSONFetchResponseMatchesProtojson(t *testing.T) {
	big := bytes.Repeat([]byte{0xfb, 0xff, 0x00, 'a'}, 1000)
	for _, resp := range []*sharelogv1.FetchResponse{
		{},
		{Records: []*sharelogv1.Record{}},
		{Records: []*sharelogv1.Record{{}}, HighWatermark: 1},
		{Records: []*sharelogv1.Record{{Key: []byte{}, Value: []byte{}}}},
		{Records: []*sharelogv1.Record{{Value: []byte("c")}}, HighWatermark: 12, LastStableOffset: proto.Int64(7)},
		{HighWatermark: 3, LastStableOffset: proto.Int64(0)},
		{HighWatermark: 9223372036854775807, LogStartOffset: -1, Records: []*sharelogv1.Record{
			{Offset: 5, Timestamp: -9223372036854775808, Key: []byte("k"), Value: big},
			{Offset: 6, Value: []byte("v"), Headers: []*sharelogv1.RecordHeader{{Key: "h", Value: []byte("x")}, {}}},
		}},
		{Records: []*sharelogv1.Record{{Headers: []*sharelogv1.RecordHeader{{Key: "quote\"d\n", Value: []byte("x")}}}}},
		// encoding=text (docs/README.md "Text instead of base64"): key_text and value_text after the headers,
		// escaped exactly as protojson escapes strings.
		{Records: []*sharelogv1.Record{
			{Offset: 1, KeyText: proto.String("user-1"), ValueText: proto.String("hello"), Headers: []*sharelogv1.RecordHeader{{Key: "h", Value: []byte("x")}}},
			{Offset: 2, KeyText: proto.String(""), ValueText: proto.String("")},
			{Offset: 3, Key: []byte{0xff}, ValueText: proto.String("q\"b\\s/\b\f\n\r\t\x00\x01\x1f\x7f <>& \u2028\u2029 é 日本 🦀 \ufffd")},
			{Offset: 4, KeyText: proto.String("k"), Value: big},
		}},
	} {
		want, err := jsonMarshaler.Marshal(resp)
		require.NoError(t, err)
		var compact bytes.Buffer
		require.NoError(t, stdjson.Compact(&compact, want))
		got, err := fastJSON{jsonMarshaler}.Marshal(resp)
		require.NoError(t, err)
		var gotCompact bytes.Buffer
		require.NoError(t, stdjson.Compact(&gotCompact, got))
		require.Equal(t, compact.String(), gotCompact.String())
		if n, ok := fetchResponseSize(resp); ok {
			require.Equal(t, compact.String(), string(got), "written compact")
			require.GreaterOrEqual(t, n, len(got), "the buffer was sized for it")
			require.Less(t, n, len(got)+100+44*len(resp.GetRecords()), "and not much more")
		}
	}
}
