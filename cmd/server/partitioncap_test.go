package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// kafkaOneShot sends req on a new connection and decodes the answer.
func kafkaOneShot(t *testing.T, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	k := dialKafka(t, addr)
	defer k.nc.Close()
	return k.do(req)
}

// --max-partitions caps the partitions of all topics together: a create
// beyond it is refused before anything is written, with INVALID_ARGUMENT
// and reason POLICY_VIOLATION over gRPC, 400 over REST, POLICY_VIOLATION
// (44) over Kafka CreateTopics (also validate-only) and for a topic Kafka
// auto-creates; up to the cap creates succeed.
func TestMaxPartitions(t *testing.T) {
	c := startChild(t, t.TempDir(), "--max-partitions", "10", "--kafka-addr", "127.0.0.1:0",
		"--kafka-auto-create-topics", "--kafka-default-partitions", "3")
	kafkaAddr := kafkaAddrOf(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := sharelogv1.NewLogServiceClient(c.conn)
	_, err := log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "a", Partitions: 8})
	require.NoError(t, err)

	// gRPC.
	_, err = log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "b", Partitions: 3})
	st := status.Convert(err)
	assert.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	require.NotNil(t, info, "an ErrorInfo: %v", err)
	assert.Equal(t, "POLICY_VIOLATION", info.GetReason())
	assert.Equal(t, "10", info.GetMetadata()["max_partitions"])
	assert.Equal(t, "8", info.GetMetadata()["partitions"])
	assert.Contains(t, st.Message(), "--max-partitions")

	// REST.
	resp, err := http.Post("http://"+c.httpAddr+"/v1/topics", "application/json", strings.NewReader(`{"name":"b","partitions":3}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", body)
	var rest struct {
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
	}
	require.NoError(t, json.Unmarshal(body, &rest), "%s", body)
	require.NotEmpty(t, rest.Details, "%s", body)
	assert.Equal(t, "POLICY_VIOLATION", rest.Details[0].Reason, "%s", body)

	// Kafka CreateTopics, and its validate-only form.
	for _, validateOnly := range []bool{false, true} {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.SetVersion(4)
		req.TimeoutMillis = 5000
		req.ValidateOnly = validateOnly
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "b", 3, 1
		req.Topics = append(req.Topics, rt)
		kresp := kafkaOneShot(t, kafkaAddr, req).(*kmsg.CreateTopicsResponse)
		require.Len(t, kresp.Topics, 1)
		assert.Equal(t, kerr.PolicyViolation.Code, kresp.Topics[0].ErrorCode, "validate only %v: %v", validateOnly, kresp.Topics[0].ErrorMessage)
	}

	// Kafka auto-creation (3 partitions by default, 2 left).
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.SetVersion(4)
	mreq.AllowAutoTopicCreation = true
	mt := kmsg.NewMetadataRequestTopic()
	name := "auto"
	mt.Topic = &name
	mreq.Topics = append(mreq.Topics, mt)
	mresp := kafkaOneShot(t, kafkaAddr, mreq).(*kmsg.MetadataResponse)
	require.Len(t, mresp.Topics, 1)
	assert.Equal(t, kerr.PolicyViolation.Code, mresp.Topics[0].ErrorCode)

	// Nothing of the refused topics exists; the cap is reachable exactly.
	list, err := log.ListTopics(ctx, &sharelogv1.ListTopicsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetTopics(), 1)
	_, err = log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "c", Partitions: 2})
	require.NoError(t, err, "8 + 2 = 10 partitions: at the cap, allowed")
	// An existing name stays TOPIC_ALREADY_EXISTS at the cap.
	_, err = log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "c", Partitions: 1})
	assert.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
	// Deleting a topic frees its partitions.
	_, err = log.DeleteTopic(ctx, &sharelogv1.DeleteTopicRequest{Name: "a"})
	require.NoError(t, err)
	_, err = log.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "b", Partitions: 3})
	require.NoError(t, err)
}

// The new flags are validated at start, with their environment variables.
func TestFDFlagsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"max-partitions 0", []string{"--max-partitions", "0"}, nil, "--max-partitions must be between 1 and 10000000"},
		{"max-partitions env", nil, map[string]string{"SHARELOG_MAX_PARTITIONS": "-5"}, "--max-partitions must be between 1 and 10000000"},
		{"max-open-segments negative", []string{"--max-open-segments", "-1"}, nil, "--max-open-segments must be between 0"},
		{"max-open-segments env", nil, map[string]string{"SHARELOG_MAX_OPEN_SEGMENTS": "x"}, "SHARELOG_MAX_OPEN_SEGMENTS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, _, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	var stderr bytes.Buffer
	cfg, _, err := parseFlags([]string{"--max-open-segments", "300", "--max-partitions", "7"}, func(string) string { return "" }, &stderr)
	require.NoError(t, err)
	assert.Equal(t, 300, cfg.MaxOpenSegments)
	assert.Equal(t, 7, cfg.MaxPartitions)
	_, _, err = parseFlags([]string{"--help"}, func(string) string { return "" }, &stderr)
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Contains(t, stderr.String(), "-max-open-segments")
	assert.Contains(t, stderr.String(), "-max-partitions")
}
