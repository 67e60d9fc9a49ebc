package main

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The consumer-groups pages: a franz-go group commits; the list shows it,
// its page the member, its assignment and the lag; a reset is refused
// while the member is live; once it left, the dry run's plan is shown
// before the reset is executed, and the group is deleted with its name
// typed.
func TestConsoleBrowserConsumerGroups(t *testing.T) {
	b := newBrowser(t)
	c := startChild(t, t.TempDir(), "--fsync", "never", "--kafka-addr", "127.0.0.1:0", "--group-initial-rebalance-delay", "0")
	base := "http://" + c.httpAddr
	shots := newShooter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := sharelogv1.NewLogServiceClient(c.conn)
	cgs := sharelogv1.NewConsumerGroupServiceClient(c.conn)
	_, err := logs.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "orders", Partitions: 2})
	require.NoError(t, err)
	for p, n := range []int{5, 3} {
		var recs []*sharelogv1.Record
		for range n {
			recs = append(recs, &sharelogv1.Record{Value: []byte("order")})
		}
		_, err = logs.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "orders", Partition: proto.Int32(int32(p)), Records: recs})
		require.NoError(t, err)
	}
	cl := kgoClient(t, c.kafkaAddr(t), kgo.ConsumerGroup("billing-app"), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ClientID("billing-worker"))
	for got := 0; got < 8; {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		got += fs.NumRecords()
	}
	// Commit 3 of partition 0's 5 records: lag 2 there.
	var commitErr error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{"orders": {0: {Epoch: -1, Offset: 3}, 1: {Epoch: -1, Offset: 3}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			for _, tp := range resp.Topics {
				for _, p := range tp.Partitions {
					if commitErr == nil && p.ErrorCode != 0 {
						commitErr = kerr.ErrorForCode(p.ErrorCode)
					}
				}
			}
		})
	require.NoError(t, commitErr)

	b.run(t, "list", chromedp.Navigate(base+"/ui/#/consumer-groups"), waitText("main table", "billing-app"), waitText("main table", "Stable"))
	shots.shoot(t, b, "consumer-groups", waitText("main table", "billing-app"))
	b.run(t, "group page", chromedp.Click(css(`main table a[href="#/consumer-groups/billing-app"]`)),
		waitText("main", "billing-worker"), waitText("main", "orders: 0, 1"),
		poll(`[...document.querySelectorAll('main table')].some(t => [...t.querySelectorAll('tbody tr')].some(r => r.cells[0].innerText === 'orders' && r.cells[1].innerText === '0' && r.cells[2].innerText === '3' && r.cells[3].innerText === '5' && r.cells[4].innerText === '2'))`))
	shots.shoot(t, b, "consumer-group", waitText("main", "billing-worker"))

	// While the member is live the server refuses even the dry run.
	b.run(t, "reset refused", setValue("#cg-reset select[name=to]", "OFFSET_RESET_EARLIEST"), chromedp.Click(css("#cg-reset button")),
		waitText("#status", "NON_EMPTY_GROUP"))

	cl.Close() // leaves the group
	b.run(t, "member gone", waitText("main dl", "Empty"))

	// The dry run's plan, then cancel: nothing written.
	b.run(t, "dry run", chromedp.Click(css("#cg-reset button")), chromedp.WaitVisible(css("#confirm-cancel")),
		waitText("main", "Dry run: the planned offsets"), chromedp.Click(css("#confirm-cancel")), chromedp.WaitNotVisible(css("#confirm")))
	committed := func() map[int32]int64 {
		off, err := cgs.FetchOffsets(ctx, &sharelogv1.FetchOffsetsRequest{Group: "billing-app"})
		require.NoError(t, err)
		out := map[int32]int64{}
		for _, tp := range off.GetTopics() {
			for _, p := range tp.GetPartitions() {
				out[p.GetPartition()] = p.GetCommittedOffset()
			}
		}
		return out
	}
	assert.Equal(t, map[int32]int64{0: 3, 1: 3}, committed(), "a cancelled reset writes nothing")
	b.run(t, "execute", setValue("#cg-reset input[name=partitions]", "0"), chromedp.Click(css("#cg-reset button")),
		chromedp.WaitVisible(css("#confirm-ok")), chromedp.Click(css("#confirm-ok")), waitText("#status", "Offsets reset."),
		waitText("main", "Reset executed"))
	assert.Equal(t, map[int32]int64{0: 0, 1: 3}, committed())

	b.run(t, "delete", chromedp.Click(css("#cg-delete")), chromedp.WaitVisible(css("#confirm-input")),
		setValue("#confirm-input", "billing-app"), poll(`!document.getElementById('confirm-ok').disabled`), chromedp.Click(css("#confirm-ok")),
		waitText("#status", "Consumer group billing-app deleted."), waitNoText("main table", "billing-app"))
	_, err = cgs.DescribeConsumerGroup(ctx, &sharelogv1.DescribeConsumerGroupRequest{Group: "billing-app"})
	require.Error(t, err, "the group is gone")

	checkOnlyPublic(t, b, base, 5)
}
