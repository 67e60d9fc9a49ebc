package main

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// queueLateBound is how late a waiting ShareFetch may be answered after a
// record's backoff or deliver-at instant in TestQueueTimingRealServer.
// docs/queues.md promises the record when the instant passes (a timer per
// share-partition); the bound is not that promise's accuracy (bench row C6
// measures it) but what holds for a real server process and its client on
// two loaded cores under -race: a timer firing late, the wake-up, one read
// and a loopback round trip.
const queueLateBound = 250 * time.Millisecond

// A real server process: a record RELEASEd in a group with
// redelivery_backoff_initial_ms=300 reaches a ShareFetch already waiting
// no earlier than 300 ms after the release and not much later; a record
// produced with sharelog-deliver-at 500 ms ahead reaches a waiting
// ShareFetch no earlier than that time (docs/queues.md).
func TestQueueTimingRealServer(t *testing.T) {
	c := startChild(t, t.TempDir(), "--fsync", "never")
	ctx := context.Background()
	logc := sharelogv1.NewLogServiceClient(c.conn)
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	_, err := logc.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "jobs", Partitions: 1})
	require.NoError(t, err)
	const backoff = 300 * time.Millisecond
	_, err = sg.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "workers",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest"),
			RedeliveryBackoffInitialMs: proto.Int32(int32(backoff / time.Millisecond))}})
	require.NoError(t, err)
	part := int32(0)
	_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "jobs", Partition: &part,
		Records: []*sharelogv1.Record{{Value: []byte("job-0")}}})
	require.NoError(t, err)

	topics := func(batches ...*sharelogv1.AcknowledgementBatch) []*sharelogv1.ShareFetchTopic {
		return []*sharelogv1.ShareFetchTopic{{Topic: "jobs", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0, AcknowledgementBatches: batches}}}}
	}
	ack := func(off int64, typ sharelogv1.AcknowledgeType) *sharelogv1.AcknowledgementBatch {
		return &sharelogv1.AcknowledgementBatch{FirstOffset: off, LastOffset: off, AcknowledgeTypes: []sharelogv1.AcknowledgeType{typ}}
	}
	type answer struct {
		resp *sharelogv1.ShareFetchResponse
		err  error
		at   time.Time
	}
	// waitingFetch sends a ShareFetch that waits up to 10 s for a record and
	// returns once the server holds it as a long poll.
	waitingFetch := func(req *sharelogv1.ShareFetchRequest) <-chan answer {
		req.GroupId, req.MaxWaitMs, req.MinBytes = "workers", 10_000, 1
		out := make(chan answer, 1)
		go func() {
			resp, err := sg.ShareFetch(ctx, req)
			out <- answer{resp, err, time.Now()}
		}()
		testsupport.AwaitLongPolls(t, http.DefaultClient, "http://"+c.httpAddr, 1)
		return out
	}

	first, err := sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "workers", MemberId: "m1", Topics: topics()})
	require.NoError(t, err)
	require.Equal(t, []testsupport.Range{{First: 0, Last: 0, Count: 1}}, testsupport.AcquiredAll(first))

	// m2 waits on the partition while m1 holds its only record; m1 releases it.
	m2 := waitingFetch(&sharelogv1.ShareFetchRequest{MemberId: "m2", Topics: topics()})
	sent := time.Now()
	ackResp, err := sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "workers", MemberId: "m1", ShareSessionEpoch: 1,
		Topics: topics(ack(0, sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE))})
	require.NoError(t, err)
	released := time.Now() // the release happened in [sent, released]
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, ackResp.GetResponses()[0].GetPartitions()[0].GetErrorCode())

	// While it waits the record is AVAILABLE with the instant it waits for.
	state, err := sg.DescribeSharePartitionState(ctx, &sharelogv1.DescribeSharePartitionStateRequest{GroupId: "workers"})
	require.NoError(t, err)
	ranges := state.GetTopics()[0].GetPartitions()[0].GetRanges()
	if time.Since(sent) < backoff { // (a starved test process may look only after it passed)
		require.Len(t, ranges, 1)
		assert.Equal(t, sharelogv1.InFlightState_IN_FLIGHT_STATE_AVAILABLE, ranges[0].GetState())
		availableAt := time.UnixMilli(ranges[0].GetAvailableAtUnixMs())
		assert.WithinRange(t, availableAt, sent.Add(backoff).Truncate(time.Millisecond), released.Add(backoff),
			"available_at is the release instant + the backoff")
	}

	got := <-m2
	require.NoError(t, got.err)
	require.Equal(t, []testsupport.Range{{First: 0, Last: 0, Count: 2}}, testsupport.AcquiredAll(got.resp), "the released record, its second delivery")
	assert.GreaterOrEqual(t, got.at.Sub(sent), backoff, "not before the backoff passed")
	assert.LessOrEqual(t, got.at.Sub(released), backoff+queueLateBound, "the waiting fetch is answered when the backoff passes")
	t.Logf("redelivered %v after the release was answered (backoff %v)", got.at.Sub(released), backoff)

	// A record delayed by its header, 500 ms ahead: m2's next fetch
	// (accepting record 0) waits for it.
	deliverAt := time.Now().Add(500 * time.Millisecond).Truncate(time.Millisecond)
	_, err = logc.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "jobs", Partition: &part, Records: []*sharelogv1.Record{{
		Value:   []byte("job-1"),
		Headers: []*sharelogv1.RecordHeader{{Key: "sharelog-deliver-at", Value: []byte(strconv.FormatInt(deliverAt.UnixMilli(), 10))}}}}})
	require.NoError(t, err)
	m2 = waitingFetch(&sharelogv1.ShareFetchRequest{MemberId: "m2", ShareSessionEpoch: 1,
		Topics: topics(ack(0, sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT))})
	got = <-m2
	require.NoError(t, got.err)
	require.Equal(t, []testsupport.Range{{First: 1, Last: 1, Count: 1}}, testsupport.AcquiredAll(got.resp), "the delayed record")
	assert.False(t, got.at.Before(deliverAt), "delivered %v before its sharelog-deliver-at time", deliverAt.Sub(got.at))
	assert.LessOrEqual(t, got.at.Sub(deliverAt), queueLateBound, "the waiting fetch is answered when the time comes")
	t.Logf("delayed record delivered %v after its sharelog-deliver-at time", got.at.Sub(deliverAt))
}
