package e2e

import (
	"context"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/app"
)

// dlqCopies reads every record of topic's partition 0 over gRPC.
func (s *shareStack) dlqCopies(t *testing.T, topic string) []*sharelogv1.Record {
	t.Helper()
	resp, err := s.log.Fetch(context.Background(), &sharelogv1.FetchRequest{Topic: topic, Partition: 0, Offset: 0, MaxRecords: 10000})
	require.NoError(t, err)
	return resp.GetRecords()
}

func headerOf(r *sharelogv1.Record, key string) string {
	v := ""
	for _, h := range r.GetHeaders() {
		if h.GetKey() == key {
			v = string(h.GetValue())
		}
	}
	return v
}

// waitSPSO waits until the group's start offset of topic/0 reaches want:
// the dead-letter worker archived the records (after copying them).
func (s *shareStack) waitSPSO(t *testing.T, group, topic string, want int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		return s.groupOffsets(t, group)[topic+"/0"][0] >= want
	}, 10*time.Second, pollTick)
}

// The delivery-count limit, through gRPC: the record is copied to the
// dead-letter topic exactly once, with its key, value, headers and the
// dlq.* headers, and DescribeShareGroup counts it.
func TestDeadLetterLimitThroughGRPC(t *testing.T) {
	t.Parallel()
	s := newShareStack(t, func(c *app.Config) { c.ShareDeliveryCountLimit = 2 })
	s.createTopic(t, "q", 1, nil)
	s.createTopic(t, "dlq.q", 1, nil)
	s.earliestGroup(t, "g", &sharelogv1.ShareGroupConfig{DeadLetterTopic: proto.String("dlq.q")})
	p := int32(0)
	_, err := s.log.Produce(context.Background(), &sharelogv1.ProduceRequest{Topic: "q", Partition: &p, Records: []*sharelogv1.Record{
		{Key: []byte("k"), Value: []byte("poison"), Headers: []*sharelogv1.RecordHeader{{Key: "trace", Value: []byte("t1")}}},
	}})
	require.NoError(t, err)

	resp := s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 0, Topics: topicReq("q", part(0))})
	require.Equal(t, []rng{{0, 0, 1}}, acquired(partitionOf(resp, "q", 0)))
	resp = s.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1, Topics: topicReq("q", part(0, batch(0, 0, release)))})
	require.Equal(t, []rng{{0, 0, 2}}, acquired(partitionOf(resp, "q", 0)))
	ack, err := s.sg.ShareAcknowledge(context.Background(), &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 2,
		Topics: topicReq("q", part(0, batch(0, 0, release)))})
	require.NoError(t, err)
	require.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())

	s.waitSPSO(t, "g", "q", 1)
	copies := s.dlqCopies(t, "dlq.q")
	require.Len(t, copies, 1, "copied exactly once")
	c := copies[0]
	assert.Equal(t, "k", string(c.GetKey()))
	assert.Equal(t, "poison", string(c.GetValue()))
	assert.Equal(t, "t1", headerOf(c, "trace"))
	assert.Equal(t, "q", headerOf(c, "dlq.source.topic"))
	assert.Equal(t, "0", headerOf(c, "dlq.source.partition"))
	assert.Equal(t, "0", headerOf(c, "dlq.source.offset"))
	assert.Equal(t, "g", headerOf(c, "dlq.group"))
	assert.Equal(t, "2", headerOf(c, "dlq.delivery.count"))

	d := s.describeGroup(t, "g")
	assert.Equal(t, "dlq.q", d.GetConfig().GetDeadLetterTopic())
	assert.Equal(t, int64(1), d.GetDeadLetteredRecords())
	assert.Equal(t, int64(0), d.GetDeadLetterSkippedRecords())
}

// REJECT, through REST: one copy; the config and the count show over REST.
func TestDeadLetterRejectThroughREST(t *testing.T) {
	t.Parallel()
	s := newShareStack(t)
	s.createTopic(t, "q", 1, nil)
	s.createTopic(t, "dlq.q", 1, nil)
	s.produceN(t, "q", 0, 2)

	r := s.rest(t, http.MethodPatch, "/v1/share-groups/g/config", `{"config":{"autoOffsetReset":"earliest","deadLetterTopic":"dlq.q"}}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Equal(t, "dlq.q", r.Body["config"].(map[string]any)["deadLetterTopic"])
	requireRESTError(t, s.rest(t, http.MethodPatch, "/v1/share-groups/g/config", `{"config":{"deadLetterTopic":"__internal"}}`), http.StatusBadRequest, "INVALID_REQUEST")

	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:fetch", `{"memberId":"m","shareSessionEpoch":0,"topics":[{"topic":"q","partitions":[{"partition":0}]}]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	r = s.rest(t, http.MethodPost, "/v1/share-groups/g:acknowledge", `{"memberId":"m","shareSessionEpoch":1,"topics":[{"topic":"q","partitions":[{"partition":0,"acknowledgementBatches":[{"firstOffset":"0","lastOffset":"1","acknowledgeTypes":["ACKNOWLEDGE_TYPE_ACCEPT","ACKNOWLEDGE_TYPE_REJECT"]}]}]}]}`)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	ackP := r.Body["responses"].([]any)[0].(map[string]any)["partitions"].([]any)[0].(map[string]any)
	assert.Equal(t, "ERROR_CODE_NONE", ackP["errorCode"])

	var body map[string]any
	require.Eventually(t, func() bool {
		r := s.rest(t, http.MethodGet, "/v1/share-groups/g", "")
		body = r.Body
		return r.Status == http.StatusOK && body["deadLetteredRecords"] == "1"
	}, 10*time.Second, pollTick)
	assert.Equal(t, "dlq.q", body["config"].(map[string]any)["deadLetterTopic"])
	s.waitSPSO(t, "g", "q", 2)

	r = s.rest(t, http.MethodGet, "/v1/topics/dlq.q/partitions/0/records?offset=0", "")
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	recs := r.Body["records"].([]any)
	require.Len(t, recs, 1, "copied exactly once")
	hs := map[string]string{}
	for _, h := range recs[0].(map[string]any)["headers"].([]any) {
		hm := h.(map[string]any)
		hs[hm["key"].(string)] = hm["value"].(string) // bytes: base64
	}
	assert.Equal(t, "MQ==", hs["dlq.source.offset"], "offset 1 (base64 of \"1\")")
	assert.Equal(t, "MQ==", hs["dlq.delivery.count"])
	assert.Equal(t, "Zw==", hs["dlq.group"])
}

// A crash between the copy and the archive: the data directory as it was
// right after the copy was appended (the record still ARCHIVING) starts a
// new server, which finds the copy and does not make it again.
func TestDeadLetterCrashBetweenCopyAndArchive(t *testing.T) {
	t.Parallel()
	var (
		once    sync.Once
		crashed = t.TempDir() + "/data"
		dataDir string
		copyErr error
		copied  = make(chan struct{})
	)
	s := newStack(t, app.Options{DeadLetterAfterAppend: func() {
		once.Do(func() {
			copyErr = os.CopyFS(crashed, os.DirFS(dataDir)) // kill -9 here
			close(copied)
		})
	}}, func(c *app.Config) { dataDir = c.DataDir })
	ss := &shareStack{stack: s, sg: sharelogv1.NewShareGroupServiceClient(s.conn)}
	ss.createTopic(t, "q", 1, nil)
	ss.createTopic(t, "dlq.q", 1, nil)
	ss.produce(t, "dlq.q", 0, "unrelated")
	ss.produceN(t, "q", 0, 1)
	ss.earliestGroup(t, "g", &sharelogv1.ShareGroupConfig{DeadLetterTopic: proto.String("dlq.q")})
	ss.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 0, Topics: topicReq("q", part(0))})
	ack, err := ss.sg.ShareAcknowledge(context.Background(), &sharelogv1.ShareAcknowledgeRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 1,
		Topics: topicReq("q", part(0, batch(0, 0, reject)))})
	require.NoError(t, err)
	require.Equal(t, none, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Fatal("the dead-letter copy was not made")
	}
	require.NoError(t, copyErr)
	require.NoError(t, s.srv.Close())

	s2 := newShareStack(t, func(c *app.Config) { c.DataDir = crashed })
	s2.waitSPSO(t, "g", "q", 1)
	copies := s2.dlqCopies(t, "dlq.q")
	require.Len(t, copies, 2, "the unrelated record and one copy")
	assert.Equal(t, "0", headerOf(copies[1], "dlq.source.offset"))
	assert.Equal(t, int64(0), s2.describeGroup(t, "g").GetDeadLetteredRecords(), "the restarted server copied nothing")
	// Nothing is redelivered either.
	resp := s2.fetch(t, &sharelogv1.ShareFetchRequest{GroupId: "g", MemberId: "m", ShareSessionEpoch: 0, Topics: topicReq("q", part(0))})
	assert.Empty(t, acquired(partitionOf(resp, "q", 0)))
}
