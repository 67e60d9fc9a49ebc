package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
	"github.com/sharelog/sharelog/internal/testsupport"
)

// The share group page's queue settings (docs/queues.md): the config form
// sets ordering and the redelivery backoff; the partition view shows the
// records waiting on a busy key, and when AVAILABLE records held back by a
// backoff or a sharelog-deliver-at time become acquirable.
func TestConsoleBrowserQueues(t *testing.T) {
	b := newBrowser(t)
	c := startChild(t, t.TempDir(), "--fsync", "never")
	base := "http://" + c.httpAddr
	shots := newShooter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := sharelogv1.NewLogServiceClient(c.conn)
	groups := sharelogv1.NewShareGroupServiceClient(c.conn)
	_, err := logs.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "tasks", Partitions: 1})
	require.NoError(t, err)
	_, err = groups.UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{GroupId: "jobs",
		Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)
	_, err = groups.ShareGroupHeartbeat(ctx, &sharelogv1.ShareGroupHeartbeatRequest{GroupId: "jobs", MemberId: "worker-1", SubscribedTopicNames: []string{"tasks"}})
	require.NoError(t, err)

	// The form shows the defaults, then sends only what changed.
	b.run(t, "group page", chromedp.Navigate(base+"/ui/#/groups/jobs"), chromedp.WaitVisible(css("#group-config")),
		poll(`document.querySelector("#group-config select[name=ordering]").value === "ORDERING_NONE"`),
		poll(`document.querySelector("#group-config input[name=redeliveryBackoffInitialMs]").value === "0"`),
		poll(`document.querySelector("#group-config input[name=redeliveryBackoffMaxMs]").value === "60000"`),
		poll(`document.querySelector("#group-config input[name=redeliveryBackoffMultiplier]").value === "2"`),
		poll(`document.querySelector("#group-config select[name=isolationLevel]").value === "ISOLATION_LEVEL_READ_UNCOMMITTED"`))
	b.run(t, "edit queue config", setValue("#group-config select[name=ordering]", "ORDERING_KEY"),
		setValue("#group-config input[name=redeliveryBackoffInitialMs]", "60000"),
		setValue("#group-config input[name=redeliveryBackoffMultiplier]", "1.5"),
		setValue("#group-config select[name=isolationLevel]", "ISOLATION_LEVEL_READ_COMMITTED"), chromedp.Click(css("#group-config button")),
		waitText("#status", "Configuration saved: ordering, redeliveryBackoffInitialMs, redeliveryBackoffMultiplier, isolationLevel."))
	cfg, err := groups.GetShareGroupConfig(ctx, &sharelogv1.GetShareGroupConfigRequest{GroupId: "jobs"})
	require.NoError(t, err)
	assert.Equal(t, sharelogv1.Ordering_ORDERING_KEY, cfg.GetConfig().GetOrdering())
	assert.Equal(t, int32(60000), cfg.GetConfig().GetRedeliveryBackoffInitialMs())
	assert.Equal(t, 1.5, cfg.GetConfig().GetRedeliveryBackoffMultiplier())
	assert.Equal(t, int32(60000), cfg.GetConfig().GetRedeliveryBackoffMaxMs(), "unchanged, so not sent")
	assert.Equal(t, sharelogv1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED, cfg.GetConfig().GetIsolationLevel())

	// Key a at 0..2, key b at 3, and at 4 a keyless record delayed an hour.
	deliverAt := time.Now().Add(time.Hour).UnixMilli()
	_, err = logs.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "tasks", Partition: proto.Int32(0), Records: []*sharelogv1.Record{
		{Key: []byte("a"), Value: []byte("a0")}, {Key: []byte("a"), Value: []byte("a1")}, {Key: []byte("a"), Value: []byte("a2")},
		{Key: []byte("b"), Value: []byte("b0")},
		{Value: []byte("later"), Headers: []*sharelogv1.RecordHeader{{Key: "sharelog-deliver-at", Value: []byte(strconv.FormatInt(deliverAt, 10))}}}}})
	require.NoError(t, err)
	topics := []*sharelogv1.ShareFetchTopic{{Topic: "tasks", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0}}}}
	res, err := groups.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: "jobs", MemberId: "worker-1", Topics: topics})
	require.NoError(t, err)
	require.Equal(t, []testsupport.Range{{First: 0, Last: 0, Count: 1}, {First: 3, Last: 3, Count: 1}}, testsupport.AcquiredAll(res),
		"one record per key; the delayed one waits")
	// Release 0: it waits a minute for its backoff, and 1..2 behind it.
	ack, err := groups.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: "jobs", MemberId: "worker-1", ShareSessionEpoch: 1,
		Topics: []*sharelogv1.ShareFetchTopic{{Topic: "tasks", Partitions: []*sharelogv1.ShareFetchPartition{{Partition: 0, AcknowledgementBatches: []*sharelogv1.AcknowledgementBatch{
			{FirstOffset: 0, LastOffset: 0, AcknowledgeTypes: []sharelogv1.AcknowledgeType{sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE}}}}}}}})
	require.NoError(t, err)
	require.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, ack.GetResponses()[0].GetPartitions()[0].GetErrorCode())

	// The rows (the page refreshes every 2 s): offset 0 AVAILABLE in about
	// 60 s (the last column), 3 ACQUIRED by worker-1, 4 AVAILABLE in about
	// an hour; the partition table says two records wait on a key, the
	// oldest at 1.
	row := func(offsets, state, available string) string {
		return `[...document.querySelectorAll('#inflight tbody tr')].some(r => r.cells.length === 8 && r.cells[2].innerText === '` + offsets +
			`' && r.cells[3].innerText === '` + state + `' && ` + available + `)`
	}
	b.run(t, "backoff shown", poll(row("0", "AVAILABLE", `/^in (5\d|60)\.\d s$/.test(r.cells[7].innerText)`)))
	b.run(t, "held record", poll(row("3", "ACQUIRED", `r.cells[5].innerText === 'worker-1' && r.cells[7].innerText === ''`)))
	b.run(t, "deliver-at shown", poll(row("4", "AVAILABLE", `/^in 3[56]\d\d\.\d s$/.test(r.cells[7].innerText)`)))
	b.run(t, "key waiting", waitText("main", "Waiting on a key"),
		poll(`[...document.querySelectorAll('main table tbody tr')].some(r => r.cells[0].innerText === 'tasks' && r.cells[5] && r.cells[5].innerText === '2 (oldest 1)')`))
	shots.shoot(t, b, "share-group-queues", chromedp.Steps(waitText("#inflight", "AVAILABLE"),
		void(evaluate[bool](`(document.getElementById('inflight').previousElementSibling.scrollIntoView(), true)`))))
	checkOnlyPublic(t, b, base, 5)
}
