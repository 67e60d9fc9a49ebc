package e2e

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// REST Produce bodies, in the plain form the gateway decodes itself and in
// forms it leaves to protojson, store the records they describe; bodies
// protojson refuses are refused with its message.
func TestRESTProduceBodies(t *testing.T) {
	s := newStack(t, app.Options{})
	s.createTopic(t, "bodies", 2, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		body string
		want *sharelogv1.Record // as fetched, offset and timestamp aside
		ts   int64              // a timestamp the body sets (0: server time)
	}{
		{"plain", `{"partition":1,"records":[{"key":"aw==","value":"dg=="}]}`,
			&sharelogv1.Record{Key: []byte("k"), Value: []byte("v")}, 0},
		{"headers, timestamp as a string, url-safe base64", `{"partition":"1","records":[{"timestamp":"1700000000123","value":"-_8",` +
			`"headers":[{"key":"h","value":"aHY"}]}]}`,
			&sharelogv1.Record{Value: []byte{0xfb, 0xff}, Headers: []*sharelogv1.RecordHeader{{Key: "h", Value: []byte("hv")}}}, 1700000000123},
		{"empty key and value", `{"partition":1,"records":[{"key":"","value":""}]}`,
			&sharelogv1.Record{Key: []byte{}, Value: []byte{}}, 0},
		{"tombstone", `{"partition":1,"records":[{"key":"aw=="}]}`,
			&sharelogv1.Record{Key: []byte("k")}, 0},
		// These go to protojson.
		{"null key, whole partition as 1.0", `{"partition":1.0,"records":[{"key":null,"value":"dg=="}]}`,
			&sharelogv1.Record{Value: []byte("v")}, 0},
		{"trailing text after the object", `{"partition":1,"records":[{"value":"dg=="}]} trailing`,
			&sharelogv1.Record{Value: []byte("v")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.rest(t, http.MethodPost, "/v1/topics/bodies/records", tc.body)
			require.Equal(t, http.StatusOK, r.Status, r.Raw)
			results := r.Body["results"].([]any)
			require.Len(t, results, 1)
			res := results[0].(map[string]any)
			assert.Equal(t, float64(1), res["partition"])
			assert.IsType(t, "", res["offset"], "int64 as a string")
			assert.IsType(t, "", r.Body["logAppendTime"])

			off, err := strconv.ParseInt(res["offset"].(string), 10, 64)
			require.NoError(t, err)
			got, err := s.log.Fetch(ctx, &sharelogv1.FetchRequest{Topic: "bodies", Partition: 1, Offset: off, MaxRecords: 1})
			require.NoError(t, err)
			require.Len(t, got.GetRecords(), 1)
			rec := got.GetRecords()[0]
			if tc.ts != 0 {
				assert.Equal(t, tc.ts, rec.GetTimestamp())
			}
			want := proto.Clone(tc.want).(*sharelogv1.Record)
			want.Offset, want.Timestamp = rec.GetOffset(), rec.GetTimestamp()
			assert.True(t, proto.Equal(want, rec), "stored %v, want %v", rec, want)
		})
	}

	for _, tc := range []struct{ name, body, msg string }{
		{"unknown field", `{"records":[{"value":"dg==","valeu":"dg=="}]}`, `unknown field "valeu"`},
		{"bad base64", `{"records":[{"value":"!!!!"}]}`, `invalid value for bytes field value`},
		{"duplicate field", `{"partition":1,"partition":0,"records":[{"value":"dg=="}]}`, `duplicate field "partition"`},
		{"partition over int32", `{"partition":2147483648,"records":[{"value":"dg=="}]}`, `invalid value for int32 field partition`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.rest(t, http.MethodPost, "/v1/topics/bodies/records", tc.body)
			requireRESTError(t, r, http.StatusBadRequest, "INVALID_REQUEST")
			assert.Contains(t, r.Body["message"], tc.msg)
		})
	}
}
