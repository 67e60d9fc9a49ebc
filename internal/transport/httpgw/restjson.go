package httpgw

import (
	"bytes"
	"encoding/base64"
	"io"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// fastJSON is the gateway's JSON marshaler with a fast decoder for the body
// of its hottest request, Produce (POST /v1/topics/{topic}/records). The
// gateway's own decoder reads a body three times: encoding/json scans it to
// find the end of the value, copies it, and protojson parses it again. A
// Produce body is mostly base64 record values, so that costs more than the
// rest of the call. The fast decoder parses the body once with jsontext (the
// tokenizer of github.com/go-json-experiment/json, the upstream of Go's
// encoding/json/v2) straight into the request.
//
// It accepts only the plain form of the request: an object of the known
// fields (by their one name: none of Produce's fields has a distinct
// camelCase name), integers as plain JSON integers or decimal strings, bytes
// as base64 strings, nothing null, no duplicate field, nothing after the
// object but whitespace. Anything else — an unknown field, a wrong type, bad
// base64, invalid JSON, an empty body — is decoded again from the same bytes
// by the gateway's own decoder, so it gets exactly the answer it got before
// (the same request, or the same error). The fast path decides nothing on
// its own but success, and a success that protojson reaches too.
type fastJSON struct{ *runtime.JSONPb }

// NewDecoder implements runtime.Marshaler.
func (m fastJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		req, ok := v.(*sharelogv1.ProduceRequest)
		if !ok {
			return m.JSONPb.NewDecoder(r).Decode(v)
		}
		buf := bodyBuffers.Get().(*bytes.Buffer)
		defer putBodyBuffer(buf)
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			// The body did not arrive whole (over --max-request-bytes, a
			// timeout, a broken connection): the gateway's decoder sees
			// the same bytes and then the same error, and reports what it
			// always did.
			return m.JSONPb.NewDecoder(io.MultiReader(bytes.NewReader(buf.Bytes()), errReader{err})).Decode(v)
		}
		if decodeProduce(buf.Bytes(), req) {
			return nil
		}
		req.Reset()
		return m.JSONPb.NewDecoder(bytes.NewReader(buf.Bytes())).Decode(v)
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// bodyBuffers holds the buffers request bodies are read into (nothing
// decoded from one refers to it: strings and bytes are copied out).
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody: a buffer that grew past this is dropped, not kept.
const maxPooledBody = 4 << 20

func putBodyBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBody {
		bodyBuffers.Put(b)
	}
}

// decodeProduce decodes data, a Produce body, into req (which is empty) and
// reports whether it could: false leaves req partly filled, to be reset
// and decoded by protojson.
func decodeProduce(data []byte, req *sharelogv1.ProduceRequest) bool {
	d := jsontext.NewDecoder(bytes.NewBuffer(data))
	p := produceParser{d: d}
	if !p.object(func(name string) bool {
		switch name {
		case "topic":
			s, ok := p.str()
			req.Topic = string(s)
			return ok
		case "partition":
			n, ok := p.int(32)
			part := int32(n)
			req.Partition = &part
			return ok
		case "records":
			return p.array(func() bool {
				r := &sharelogv1.Record{}
				req.Records = append(req.Records, r)
				return p.record(r)
			})
		}
		return false
	}) {
		return false
	}
	// Whatever follows the object must be whitespace (the gateway's decoder
	// ignores anything after the first value; the fallback does the same).
	_, err := d.ReadToken()
	return err == io.EOF
}

type produceParser struct{ d *jsontext.Decoder }

// object reads an object, calling field for each member name, positioned
// before its value. A null, a non-object or a field that fails is false.
func (p produceParser) object(field func(name string) bool) bool {
	if p.d.PeekKind() != '{' {
		return false
	}
	if _, err := p.d.ReadToken(); err != nil {
		return false
	}
	for p.d.PeekKind() != '}' {
		// jsontext refuses a duplicate name: protojson does too, and the
		// fallback reports it.
		name, err := p.d.ReadToken()
		if err != nil || name.Kind() != '"' || !field(name.String()) {
			return false
		}
	}
	_, err := p.d.ReadToken()
	return err == nil
}

// array reads an array, calling elem for each element.
func (p produceParser) array(elem func() bool) bool {
	if p.d.PeekKind() != '[' {
		return false
	}
	if _, err := p.d.ReadToken(); err != nil {
		return false
	}
	for p.d.PeekKind() != ']' {
		if !elem() {
			return false
		}
	}
	_, err := p.d.ReadToken()
	return err == nil
}

func (p produceParser) record(r *sharelogv1.Record) bool {
	return p.object(func(name string) bool {
		var ok bool
		switch name {
		case "offset":
			r.Offset, ok = p.int(64)
		case "timestamp":
			r.Timestamp, ok = p.int(64)
		case "key":
			// Present, even empty: a key "" is not a keyless record.
			r.Key, ok = p.bytes()
		case "value":
			// Present, even empty: a value "" is not a tombstone.
			r.Value, ok = p.bytes()
		case "keyText":
			var s []byte
			s, ok = p.str()
			t := string(s)
			r.KeyText = &t
		case "valueText":
			var s []byte
			s, ok = p.str()
			t := string(s)
			r.ValueText = &t
		case "headers":
			ok = p.array(func() bool {
				h := &sharelogv1.RecordHeader{}
				r.Headers = append(r.Headers, h)
				return p.object(func(name string) bool {
					var ok bool
					switch name {
					case "key":
						var s []byte
						s, ok = p.str()
						h.Key = string(s)
					case "value":
						h.Value, ok = p.bytes()
					}
					return ok
				})
			})
		}
		return ok
	})
}

// str reads a string value; the bytes are valid until the next read.
func (p produceParser) str() ([]byte, bool) {
	if p.d.PeekKind() != '"' {
		return nil, false
	}
	v, err := p.d.ReadValue()
	if err != nil {
		return nil, false
	}
	raw := v[1 : len(v)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, true
	}
	s, err := jsontext.AppendUnquote(nil, v)
	return s, err == nil
}

// int reads an integer of bitSize bits: a JSON integer, or a string holding
// one. Fractions and exponents (1.0, 1e3), which protojson accepts when the
// value is whole, are left to it.
func (p produceParser) int(bitSize int) (int64, bool) {
	var digits []byte
	switch p.d.PeekKind() {
	case '0':
		v, err := p.d.ReadValue()
		if err != nil {
			return 0, false
		}
		digits = v
	case '"':
		s, ok := p.str()
		if !ok {
			return 0, false
		}
		digits = s
	default:
		return 0, false
	}
	if !plainInteger(digits) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(digits), 10, bitSize)
	return n, err == nil
}

// plainInteger: -?(0|[1-9][0-9]*), the JSON grammar of an integer.
func plainInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || (b[0] == '0' && len(b) > 1) {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// bytes reads a bytes value as protojson does: standard base64, or URL-safe
// base64 if the text has '-' or '_', padded or not. The result is never nil
// (a present field, even if empty).
func (p produceParser) bytes() ([]byte, bool) {
	s, ok := p.str()
	if !ok {
		return nil, false
	}
	enc := base64.StdEncoding
	if bytes.IndexByte(s, '-') >= 0 || bytes.IndexByte(s, '_') >= 0 {
		enc = base64.URLEncoding
	}
	if len(s)%4 != 0 {
		enc = enc.WithPadding(base64.NoPadding)
	}
	out := make([]byte, enc.DecodedLen(len(s)))
	n, err := enc.Decode(out, s)
	if err != nil {
		return nil, false
	}
	return out[:n:n], true
}

// Marshal implements runtime.Marshaler. A Produce answer, one small object
// per record, is written directly in the form protojson gives it with the
// gateway's options (every field, in field-number order, 64-bit integers as
// strings, camelCase names) when every record succeeded; an answer with
// per-partition errors (rare, and with messages to escape) and every other
// message go to protojson.
//
// A Fetch answer is written the same way, straight into one buffer of its
// exact size: most of it is base64 record data, and protojson would build
// it through intermediate buffers several times its size (docs/operations.md
// "Budgets"). A header key that would need escaping sends the answer to
// protojson.
func (m fastJSON) Marshal(v any) ([]byte, error) {
	switch resp := v.(type) {
	case *sharelogv1.ProduceResponse:
		if resp != nil && producedAll(resp) {
			return appendProduceResponse(make([]byte, 0, 48+80*len(resp.GetResults())), resp), nil
		}
	case *sharelogv1.FetchResponse:
		if n, ok := fetchResponseSize(resp); ok {
			return appendFetchResponse(make([]byte, 0, n), resp), nil
		}
	}
	return m.JSONPb.Marshal(v)
}

// fetchResponseSize is the length of appendFetchResponse's output, or
// false when a header key needs escaping (left to protojson).
func fetchResponseSize(resp *sharelogv1.FetchResponse) (int, bool) {
	if resp == nil {
		return 0, false
	}
	const intMax = 22 // a quoted int64
	n := len(`{"records":[],"highWatermark":,"logStartOffset":,"lastStableOffset":}`) + 3*intMax
	for _, r := range resp.GetRecords() {
		n += len(`{"offset":,"timestamp":,"headers":[]},`) + 2*intMax
		if r.Key != nil {
			n += len(`"key":"",`) + base64.StdEncoding.EncodedLen(len(r.Key))
		}
		if r.Value != nil {
			n += len(`"value":"",`) + base64.StdEncoding.EncodedLen(len(r.Value))
		}
		if r.KeyText != nil {
			n += len(`,"keyText":`) + jsonStringLen(*r.KeyText)
		}
		if r.ValueText != nil {
			n += len(`,"valueText":`) + jsonStringLen(*r.ValueText)
		}
		for _, h := range r.GetHeaders() {
			if !plainString(h.GetKey()) {
				return 0, false
			}
			n += len(`{"key":"","value":""},`) + len(h.GetKey()) + base64.StdEncoding.EncodedLen(len(h.GetValue()))
		}
	}
	return n, true
}

// plainString: printable ASCII without '"' or '\', written as is by
// protojson.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// appendFetchResponse appends resp as protojson marshals it with
// EmitDefaultValues (an unset key or value is left out, a set one is
// shown even if empty; without protojson's random spaces).
func appendFetchResponse(b []byte, resp *sharelogv1.FetchResponse) []byte {
	b = append(b, `{"records":[`...)
	for i, r := range resp.GetRecords() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"offset":"`...)
		b = strconv.AppendInt(b, r.GetOffset(), 10)
		b = append(b, `","timestamp":"`...)
		b = strconv.AppendInt(b, r.GetTimestamp(), 10)
		b = append(b, '"')
		if r.Key != nil {
			b = append(b, `,"key":"`...)
			b = base64.StdEncoding.AppendEncode(b, r.Key)
			b = append(b, '"')
		}
		if r.Value != nil {
			b = append(b, `,"value":"`...)
			b = base64.StdEncoding.AppendEncode(b, r.Value)
			b = append(b, '"')
		}
		b = append(b, `,"headers":[`...)
		for j, h := range r.GetHeaders() {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"key":"`...)
			b = append(b, h.GetKey()...)
			b = append(b, `","value":"`...)
			b = base64.StdEncoding.AppendEncode(b, h.GetValue())
			b = append(b, `"}`...)
		}
		b = append(b, ']')
		// key_text and value_text (fields 6 and 7) follow headers (5) in
		// protojson's field-number order.
		if r.KeyText != nil {
			b = append(b, `,"keyText":`...)
			b = appendJSONString(b, *r.KeyText)
		}
		if r.ValueText != nil {
			b = append(b, `,"valueText":`...)
			b = appendJSONString(b, *r.ValueText)
		}
		b = append(b, '}')
	}
	b = append(b, `],"highWatermark":"`...)
	b = strconv.AppendInt(b, resp.GetHighWatermark(), 10)
	b = append(b, `","logStartOffset":"`...)
	b = strconv.AppendInt(b, resp.GetLogStartOffset(), 10)
	if resp.LastStableOffset != nil {
		b = append(b, `","lastStableOffset":"`...)
		b = strconv.AppendInt(b, resp.GetLastStableOffset(), 10)
	}
	return append(b, `"}`...)
}

// appendJSONString appends s (valid UTF-8: a proto string) quoted as
// protojson writes it: '"', '\\' and the control characters below U+0020
// escaped (\b \f \n \r \t by name, the others as \u00XX), every other
// character as is (no HTML escaping, no \u2028).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		start = i + 1
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// jsonStringLen is the length of appendJSONString's output for s.
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20:
			n += 6
		default:
			n++
		}
	}
	return n
}

// producedAll: every result of resp succeeded.
func producedAll(resp *sharelogv1.ProduceResponse) bool {
	for _, r := range resp.GetResults() {
		if r.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE || r.GetErrorMessage() != "" {
			return false
		}
	}
	return true
}

// appendProduceResponse appends resp, whose results all succeeded, as
// protojson marshals it with EmitDefaultValues (without its random spaces).
func appendProduceResponse(b []byte, resp *sharelogv1.ProduceResponse) []byte {
	b = append(b, `{"results":[`...)
	for i, r := range resp.GetResults() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"partition":`...)
		b = strconv.AppendInt(b, int64(r.GetPartition()), 10)
		b = append(b, `,"offset":"`...)
		b = strconv.AppendInt(b, r.GetOffset(), 10)
		b = append(b, `","errorCode":"ERROR_CODE_NONE","errorMessage":""}`...)
	}
	b = append(b, `],"logAppendTime":"`...)
	b = strconv.AppendInt(b, resp.GetLogAppendTime(), 10)
	return append(b, `"}`...)
}
