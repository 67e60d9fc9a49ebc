package broker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
)

func TestTransactionalPartitionState(t *testing.T) {
	ctx := context.Background()
	l, store := newLog(t, Config{ProducerIDs: &memBlocks{}})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	a, _, err := l.InitProducer(ctx)
	require.NoError(t, err)
	b, _, err := l.InitProducer(ctx)
	require.NoError(t, err)

	// 0..1 plain, 2..3 a's transaction, 4 b's transaction.
	_, _, err = l.ProduceBatch(ctx, "t", 0, values(2, "p"))
	require.NoError(t, err)
	base, _, err := l.ProduceBatchTransactional(ctx, "t", 0, values(2, "a"), BatchProducer{ID: a, BaseSequence: 0})
	require.NoError(t, err)
	assert.Equal(t, int64(2), base)
	_, _, err = l.ProduceBatchTransactional(ctx, "t", 0, values(1, "b"), BatchProducer{ID: b, BaseSequence: 0})
	require.NoError(t, err)

	v, err := l.ReadCommittedView(ctx, "t", 0, 0, 100)
	require.NoError(t, err)
	assert.Equal(t, TxnView{LastStable: 2, HighWatermark: 5, LogStart: 0}, v)

	// a aborts (marker at 5): the stable offset moves to b's first record.
	require.NoError(t, l.WriteTxnMarker(ctx, "t", 0, a, 0, false, 0))
	v, err = l.ReadCommittedView(ctx, "t", 0, 0, 100)
	require.NoError(t, err)
	assert.Equal(t, int64(4), v.LastStable)
	assert.Equal(t, []AbortedTxn{{ProducerID: a, FirstOffset: 2, LastOffset: 5}}, v.Aborted)
	// A second marker for a's ended transaction writes nothing.
	require.NoError(t, l.WriteTxnMarker(ctx, "t", 0, a, 0, false, 0))
	assert.Equal(t, int64(6), hw(t, store, "t", 0))

	// b commits (marker at 6): everything is stable, nothing more aborted.
	require.NoError(t, l.WriteTxnMarker(ctx, "t", 0, b, 0, true, 0))
	v, err = l.ReadCommittedView(ctx, "t", 0, 6, 100)
	require.NoError(t, err)
	assert.Equal(t, int64(7), v.LastStable)
	assert.Empty(t, v.Aborted)

	// The state is rebuilt from the log by a new broker over the same store.
	l2 := New(store, Config{ProducerIDs: &memBlocks{}})
	v, err = l2.ReadCommittedView(ctx, "t", 0, 0, 100)
	require.NoError(t, err)
	assert.Equal(t, TxnView{LastStable: 7, HighWatermark: 7, LogStart: 0,
		Aborted: []AbortedTxn{{ProducerID: a, FirstOffset: 2, LastOffset: 5}}}, v)

	// The Kafka listener reads the markers; the log API leaves them out.
	all, err := l.ReadPartition(ctx, "t", 0, 0, 100, 1<<20)
	require.NoError(t, err)
	require.Len(t, all.Records, 7)
	assert.True(t, all.Records[5].Control)
	key, val, ok := MarkerKeyValue(all.Records[6].Value)
	require.True(t, ok)
	assert.Equal(t, []byte{0, 0, 0, 1}, key) // commit
	assert.Equal(t, []byte{0, 0, 0, 0, 0, 0}, val)
	got, err := l.Fetch(ctx, FetchRequest{Topic: "t", Partition: 0, Offset: 0, MaxRecords: 100, MaxBytes: 1 << 20})
	require.NoError(t, err)
	var offs []int64
	for _, r := range got.Records {
		offs = append(offs, r.Offset)
	}
	assert.Equal(t, []int64{0, 1, 2, 3, 4}, offs)
	// From a marker the log API reads on after it.
	_, _, err = l.ProduceBatch(ctx, "t", 0, values(1, "q"))
	require.NoError(t, err)
	got, err = l.Fetch(ctx, FetchRequest{Topic: "t", Partition: 0, Offset: 5, MaxRecords: 1, MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Len(t, got.Records, 1)
	assert.Equal(t, int64(7), got.Records[0].Offset)
}

func TestTxnMarkerFencesOlderEpoch(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{ProducerIDs: &memBlocks{}})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	pid, _, err := l.InitProducer(ctx)
	require.NoError(t, err)
	_, _, err = l.ProduceBatchTransactional(ctx, "t", 0, values(2, "a"), BatchProducer{ID: pid, BaseSequence: 0})
	require.NoError(t, err)
	// The coordinator aborts at the bumped epoch 1 (a new InitProducerID).
	require.NoError(t, l.WriteTxnMarker(ctx, "t", 0, pid, 1, false, 0))
	_, _, err = l.ProduceBatchTransactional(ctx, "t", 0, values(1, "z"), BatchProducer{ID: pid, Epoch: 0, BaseSequence: 2})
	assert.Equal(t, apierr.InvalidProducerEpoch, reason(t, err))
	// The new epoch's first batch is accepted after the marker.
	_, _, err = l.ProduceBatchTransactional(ctx, "t", 0, values(1, "n"), BatchProducer{ID: pid, Epoch: 1, BaseSequence: 0})
	require.NoError(t, err)
	// So is the next one of that epoch (its sequence follows).
	_, _, err = l.ProduceBatchTransactional(ctx, "t", 0, values(1, "m"), BatchProducer{ID: pid, Epoch: 1, BaseSequence: 1})
	require.NoError(t, err)
}
