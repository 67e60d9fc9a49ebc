package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// Acknowledgements answered under --fsync always survive a SIGKILL; records
// acquired but not acknowledged come back with the delivery count of their
// last durable state (acquisitions are not persisted, acknowledgements are).
func TestShareAcksSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, "--fsync", "always")
	ctx := context.Background()
	logc := sharelogv1.NewLogServiceClient(c.conn)
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	_, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "jobs", Partitions: 1})
	require.NoError(t, err)
	p := int32(0)
	recs := make([]*sharelogv1.Record, 100)
	for i := range recs {
		recs[i] = &sharelogv1.Record{Value: []byte{byte(i)}}
	}
	_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "jobs", Partition: &p, Records: recs})
	require.NoError(t, err)
	_, err = sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "workers",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)

	topics := func(batches ...*sharelogv1.AcknowledgementBatch) []*sharelogv1.ShareFetchTopic {
		return []*sharelogv1.ShareFetchTopic{{Topic: "jobs", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0, AcknowledgementBatches: batches}}}}
	}
	acquiredOf := func(resp *sharelogv1.ShareFetchResponse) [][3]int64 {
		var out [][3]int64
		for _, r := range testsupport.AcquiredAll(resp) {
			out = append(out, [3]int64{r.First, r.Last, int64(r.Count)})
		}
		return out
	}
	resp, err := sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "workers", MemberId: "m1", Topics: topics()})
	require.NoError(t, err)
	require.Equal(t, [][3]int64{{0, 99, 1}}, acquiredOf(resp))
	// Accept 0..49, release 50..59: both durable before the response.
	resp, err = sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "workers", MemberId: "m1", ShareSessionEpoch: 1, MaxRecords: proto.Int32(10),
		Topics: topics(
			&sharelogv1.AcknowledgementBatch{FirstOffset: 0, LastOffset: 49, AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT}},
			&sharelogv1.AcknowledgementBatch{FirstOffset: 50, LastOffset: 59, AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE}},
		)})
	require.NoError(t, err)
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, resp.GetResponses()[0].GetPartitions()[0].GetAcknowledgeErrorCode())
	require.Equal(t, [][3]int64{{50, 59, 2}}, acquiredOf(resp), "released records redelivered in the same response")
	c.kill(t) // right after the acknowledging response

	c2 := startChild(t, dir, "--fsync", "always")
	sg2 := sharelogv1.NewShareGroupServiceClient(c2.conn)
	resp, err = sg2.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "workers", MemberId: "m2", Topics: topics()})
	require.NoError(t, err)
	assert.Equal(t, [][3]int64{{50, 59, 2}, {60, 99, 1}}, acquiredOf(resp),
		"0..49 are never redelivered; acquired-not-acked records come back with their durable count")
	cfg, err := sg2.GetShareGroupConfig(ctx, &sharelogv1.GetShareGroupConfigRequest{GroupId: "workers"})
	require.NoError(t, err)
	assert.Equal(t, "earliest", cfg.GetConfig().GetAutoOffsetReset(), "group config survives")
}
