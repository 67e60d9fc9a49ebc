package kafkawire

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetForLeaderEpoch on a single node (epoch 0): epoch 0 ends at the
// high watermark (no log is truncated), an epoch above the current one and
// none are UNDEFINED, a current_leader_epoch other than 0 is fenced or
// unknown, an unknown partition UNKNOWN_TOPIC_OR_PARTITION; and kgo, now
// that the listener serves it, consumes with leader epochs.
func TestOffsetForLeaderEpochSingleNode(t *testing.T) {
	f := newFixture(t)
	f.createTopic("e", 1)
	ctx := testCtx(t)
	cl := f.client(kgo.DefaultProduceTopic("e"), kgo.ConsumeTopics("e"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for range 5 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr())
	}
	got := 0
	for got < 5 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) {
			require.Equal(t, int32(0), r.LeaderEpoch)
			got++
		})
	}
	ask := func(part, current, epoch int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.Version, req.ReplicaID = 4, -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "e"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = part, current, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := cl.Broker(0).Request(ctx, req) // to the node itself: kgo would answer an unknown partition itself
		require.NoError(t, err)
		return kresp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	}
	r := ask(0, 0, 0)
	require.Zero(t, r.ErrorCode)
	require.Equal(t, int32(0), r.LeaderEpoch)
	require.Equal(t, int64(5), r.EndOffset)
	r = ask(0, -1, 0)
	require.Zero(t, r.ErrorCode, "no current epoch: not checked")
	require.Equal(t, int64(5), r.EndOffset)
	r = ask(0, 0, 1)
	require.Zero(t, r.ErrorCode)
	require.Equal(t, int32(-1), r.LeaderEpoch, "an epoch above the current one is UNDEFINED")
	require.Equal(t, int64(-1), r.EndOffset)
	require.Equal(t, kerr.UnknownLeaderEpoch.Code, ask(0, 1, 0).ErrorCode)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, ask(3, 0, 0).ErrorCode)
}
