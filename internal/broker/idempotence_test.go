package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

type memBlocks struct {
	mu   sync.Mutex
	next int64
}

func (b *memBlocks) ReserveProducerIDs(_ context.Context, n int64) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == 0 {
		b.next = 1
	}
	first := b.next
	b.next += n
	return first, nil
}

func values(n int, prefix string) []logstore.Record {
	out := make([]logstore.Record, n)
	for i := range out {
		out[i] = logstore.Record{Value: fmt.Appendf(nil, "%s%d", prefix, i)}
	}
	return out
}

func idem(pid int64, epoch int16, part, seq int32) Idempotence {
	return Idempotence{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: map[int32]int32{part: seq}}
}

func hw(t *testing.T, s logstore.Store, topic string, part int32) int64 {
	t.Helper()
	_, h, err := s.Bounds(topic, part)
	require.NoError(t, err)
	return h
}

func TestIdempotentProduce(t *testing.T) {
	ctx := context.Background()
	l, store := newLog(t, Config{ProducerIDs: &memBlocks{}})
	_, err := l.CreateTopic(ctx, "t", 2, TopicSettings{})
	require.NoError(t, err)
	pid, epoch, err := l.InitProducer(ctx)
	require.NoError(t, err)
	p := int32(1)

	first, err := l.ProduceIdempotent(ctx, "t", &p, values(3, "a"), idem(pid, epoch, p, 0))
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 1, 2}, first.Offsets)
	// Someone else appends in between; the producer's next batch follows.
	_, err = l.Produce(ctx, "t", &p, values(2, "other"))
	require.NoError(t, err)
	second, err := l.ProduceIdempotent(ctx, "t", &p, values(2, "b"), idem(pid, epoch, p, 3))
	require.NoError(t, err)
	assert.Equal(t, []int64{5, 6}, second.Offsets)

	t.Run("a resend answers the original offsets and appends nothing", func(t *testing.T) {
		again, err := l.ProduceIdempotent(ctx, "t", &p, values(3, "a"), idem(pid, epoch, p, 0))
		require.NoError(t, err)
		assert.Equal(t, first.Offsets, again.Offsets)
		again, err = l.ProduceIdempotent(ctx, "t", &p, values(2, "b"), idem(pid, epoch, p, 3))
		require.NoError(t, err)
		assert.Equal(t, second.Offsets, again.Offsets)
		assert.EqualValues(t, 7, hw(t, store, "t", p))
	})
	t.Run("a gap is OUT_OF_ORDER_SEQUENCE_NUMBER", func(t *testing.T) {
		_, err := l.ProduceIdempotent(ctx, "t", &p, values(1, "c"), idem(pid, epoch, p, 9))
		assert.Equal(t, apierr.OutOfOrderSequenceNumber, reason(t, err))
		_, err = l.ProduceIdempotent(ctx, "t", &p, values(3, "c"), idem(pid, epoch, p, 4))
		assert.Equal(t, apierr.OutOfOrderSequenceNumber, reason(t, err), "overlaps a batch and goes beyond it")
		assert.EqualValues(t, 7, hw(t, store, "t", p))
	})
	t.Run("an older epoch is INVALID_PRODUCER_EPOCH; a new epoch starts at 0", func(t *testing.T) {
		_, err := l.ProduceIdempotent(ctx, "t", &p, values(1, "e"), idem(pid, epoch+1, p, 5))
		assert.Equal(t, apierr.OutOfOrderSequenceNumber, reason(t, err))
		res, err := l.ProduceIdempotent(ctx, "t", &p, values(1, "e"), idem(pid, epoch+1, p, 0))
		require.NoError(t, err)
		assert.Equal(t, []int64{7}, res.Offsets)
		_, err = l.ProduceIdempotent(ctx, "t", &p, values(1, "e"), idem(pid, epoch, p, 5))
		assert.Equal(t, apierr.InvalidProducerEpoch, reason(t, err))
	})
	t.Run("the state is rebuilt from the log by a new Log (a restart)", func(t *testing.T) {
		fresh := New(store, Config{})
		again, err := fresh.ProduceIdempotent(ctx, "t", &p, values(1, "e"), idem(pid, epoch+1, p, 0))
		require.NoError(t, err)
		assert.Equal(t, []int64{7}, again.Offsets)
		_, err = fresh.ProduceIdempotent(ctx, "t", &p, values(1, "x"), idem(pid, epoch, p, 5))
		assert.Equal(t, apierr.InvalidProducerEpoch, reason(t, err))
		next, err := fresh.ProduceIdempotent(ctx, "t", &p, values(1, "f"), idem(pid, epoch+1, p, 1))
		require.NoError(t, err)
		assert.Equal(t, []int64{8}, next.Offsets)
	})
	t.Run("sequences are per partition", func(t *testing.T) {
		q := int32(0)
		res, err := l.ProduceIdempotent(ctx, "t", &q, values(2, "q"), idem(pid, epoch, q, 0))
		require.NoError(t, err)
		assert.Equal(t, []int64{0, 1}, res.Offsets)
	})
}

// TestIdempotentRemembersLastFiveBatches: each of the last 5 batches is
// recognised when resent (interleaved with another producer's, as rebuilt
// from the log), an older one is OUT_OF_ORDER_SEQUENCE_NUMBER.
func TestIdempotentRemembersLastFiveBatches(t *testing.T) {
	ctx := context.Background()
	l, store := newLog(t, Config{ProducerIDs: &memBlocks{}})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	p := int32(0)
	a, _, err := l.InitProducer(ctx)
	require.NoError(t, err)
	b, _, err := l.InitProducer(ctx)
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	var bases []int64
	for i := range int32(7) {
		res, err := l.ProduceIdempotent(ctx, "t", &p, values(2, "a"), idem(a, 0, p, 2*i))
		require.NoError(t, err)
		bases = append(bases, res.Offsets[0])
		_, err = l.ProduceIdempotent(ctx, "t", &p, values(1, "b"), idem(b, 0, p, i))
		require.NoError(t, err)
	}
	for _, lg := range []*Log{l, New(store, Config{})} {
		for i := range int32(7) {
			res, err := lg.ProduceIdempotent(ctx, "t", &p, values(2, "a"), idem(a, 0, p, 2*i))
			if i < 7-ProducerBatches {
				assert.Equal(t, apierr.OutOfOrderSequenceNumber, reason(t, err), "batch %d is older than the last %d", i, ProducerBatches)
				continue
			}
			require.NoError(t, err, "batch %d", i)
			assert.Equal(t, []int64{bases[i], bases[i] + 1}, res.Offsets, "batch %d", i)
		}
	}
	assert.EqualValues(t, 21, hw(t, store, "t", p))
}

func TestIdempotentProduceRequests(t *testing.T) {
	ctx := context.Background()
	l, _ := newLog(t, Config{ProducerIDs: &memBlocks{}})
	_, err := l.CreateTopic(ctx, "t", 4, TopicSettings{})
	require.NoError(t, err)
	ka, kb := keysFor(t)
	pa, pb := Partition(ka, 4), Partition(kb, 4)
	recs := []logstore.Record{{Key: ka, Value: []byte("1")}, {Key: kb, Value: []byte("2")}, {Key: ka, Value: []byte("3")}}
	other := int32(0)
	for other == pa || other == pb {
		other++
	}
	tests := []struct {
		name string
		part *int32
		recs []logstore.Record
		idem Idempotence
	}{
		{"no producer id", nil, recs, Idempotence{BaseSequence: map[int32]int32{pa: 0, pb: 0}}},
		{"negative epoch", nil, recs, Idempotence{ProducerID: 1, ProducerEpoch: -1, BaseSequence: map[int32]int32{pa: 0, pb: 0}}},
		{"negative sequence", nil, recs, Idempotence{ProducerID: 1, BaseSequence: map[int32]int32{pa: -1, pb: 0}}},
		{"a partition without a sequence", nil, recs, Idempotence{ProducerID: 1, BaseSequence: map[int32]int32{pa: 0}}},
		{"a sequence for a partition without records", nil, recs, Idempotence{ProducerID: 1, BaseSequence: map[int32]int32{pa: 0, pb: 0, other: 0}}},
		{"keyless records without a partition", nil, values(1, "v"), Idempotence{ProducerID: 1, BaseSequence: map[int32]int32{0: 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.ProduceIdempotent(ctx, "t", tc.part, tc.recs, tc.idem)
			assert.Equal(t, apierr.InvalidRequest, reason(t, err))
		})
	}
	res, err := l.ProduceIdempotent(ctx, "t", nil, recs, Idempotence{ProducerID: 1, BaseSequence: map[int32]int32{pa: 10, pb: 20}})
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0, 1}, res.Offsets)
	again, err := l.ProduceIdempotent(ctx, "t", nil, recs, Idempotence{ProducerID: 1, BaseSequence: map[int32]int32{pa: 10, pb: 20}})
	require.NoError(t, err)
	assert.Equal(t, res.Offsets, again.Offsets, "a keyed resend over two partitions")
}

func TestInitProducerWithoutStore(t *testing.T) {
	l, _ := newLog(t, Config{})
	_, _, err := l.InitProducer(context.Background())
	assert.Equal(t, apierr.Unavailable, reason(t, err))
}

// failingStore fails every append to one partition.
type failingStore struct {
	logstore.Store
	part int32
}

func (s failingStore) Append(ctx context.Context, topic string, part int32, recs []logstore.Record) (int64, error) {
	if part == s.part {
		return 0, fmt.Errorf("disk full: %w", logstore.ErrStorage)
	}
	return s.Store.Append(ctx, topic, part, recs)
}

// TestProducePerPartitionResults: a Produce over a failing and a healthy
// partition answers each partition's outcome; only when every partition
// fails is the call an error.
func TestProducePerPartitionResults(t *testing.T) {
	ctx := context.Background()
	mem := logstore.NewMem()
	t.Cleanup(func() { _ = mem.Close() })
	ka, kb := keysFor(t)
	pa, pb := Partition(ka, 4), Partition(kb, 4)
	l := New(failingStore{Store: mem, part: pb}, Config{})
	_, err := l.CreateTopic(ctx, "t", 4, TopicSettings{})
	require.NoError(t, err)

	res, err := l.Produce(ctx, "t", nil, []logstore.Record{{Key: ka, Value: []byte("1")}, {Key: kb, Value: []byte("2")}, {Key: ka, Value: []byte("3")}})
	require.NoError(t, err)
	assert.Equal(t, []int32{pa, pb, pa}, res.Partitions)
	assert.Equal(t, []int64{0, -1, 1}, res.Offsets)
	require.Len(t, res.Errors, 3)
	assert.Nil(t, res.Errors[0])
	assert.Nil(t, res.Errors[2])
	require.NotNil(t, res.Errors[1])
	assert.Equal(t, apierr.KafkaStorageError, res.Errors[1].Reason)
	assert.NotContains(t, res.Errors[1].Message, "disk full", "the cause stays in the server log")

	_, err = l.Produce(ctx, "t", nil, []logstore.Record{{Key: kb, Value: []byte("4")}})
	require.Error(t, err)
	assert.Equal(t, apierr.KafkaStorageError, ReasonOf(err), "nothing appended: the call fails")
	assert.EqualValues(t, 2, hw(t, mem, "t", pa))
	assert.Zero(t, hw(t, mem, "t", pb))
}

// TestIdempotentAtTheOwner: a partition served elsewhere gets the batch
// with its producer fields, and its owner recognises a resend.
func TestIdempotentAtTheOwner(t *testing.T) {
	ctx := context.Background()
	ka, kb := keysFor(t)
	pa, pb := Partition(ka, 4), Partition(kb, 4)
	here, b, _, _ := cluster(t, map[tp]string{{"t", pa}: "", {"t", pb}: "B"})
	recs := []logstore.Record{{Key: ka, Value: []byte("1")}, {Key: kb, Value: []byte("2")}, {Key: kb, Value: []byte("3")}}
	id := Idempotence{ProducerID: 7, BaseSequence: map[int32]int32{pa: 0, pb: 4}}
	res, err := here.ProduceIdempotent(ctx, "t", nil, recs, id)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 0, 1}, res.Offsets)
	again, err := here.ProduceIdempotent(ctx, "t", nil, recs, id)
	require.NoError(t, err)
	assert.Equal(t, res.Offsets, again.Offsets)
	assert.EqualValues(t, 2, hw(t, b.store, "t", pb), "the owner appended the batch once")
	stored, err := b.store.Read(ctx, "t", pb, 0, 10, 1<<20)
	require.NoError(t, err)
	require.Len(t, stored, 2)
	assert.Equal(t, [2]int32{4, 5}, [2]int32{stored[0].Sequence, stored[1].Sequence})
	assert.EqualValues(t, 7, stored[1].ProducerID)
}

// A Kafka batch of an idempotent producer is one idempotent append checked
// against the same state as ProduceIdempotent: a gRPC batch and a Kafka one
// of one producer continue each other, a resend of either answers its
// original base offset, and ProduceBatch without a producer never stores
// producer fields it was given.
func TestProduceBatchIdempotent(t *testing.T) {
	ctx := context.Background()
	l, store := newLog(t, Config{ProducerIDs: &memBlocks{}})
	_, err := l.CreateTopic(ctx, "t", 1, TopicSettings{})
	require.NoError(t, err)
	pid, epoch, err := l.InitProducer(ctx)
	require.NoError(t, err)
	p := int32(0)

	base, _, err := l.ProduceBatchIdempotent(ctx, "t", 0, values(3, "k"), BatchProducer{pid, epoch, 0})
	require.NoError(t, err)
	assert.Zero(t, base)
	res, err := l.ProduceIdempotent(ctx, "t", &p, values(2, "g"), idem(pid, epoch, p, 3))
	require.NoError(t, err, "the gRPC batch continues the Kafka one")
	assert.Equal(t, []int64{3, 4}, res.Offsets)
	base, logStart, err := l.ProduceBatchIdempotent(ctx, "t", 0, values(3, "k"), BatchProducer{pid, epoch, 0})
	require.NoError(t, err)
	assert.Zero(t, base, "a resend answers the original base offset")
	assert.Zero(t, logStart)
	_, _, err = l.ProduceBatchIdempotent(ctx, "t", 0, values(1, "x"), BatchProducer{pid, epoch, 9})
	assert.Equal(t, apierr.OutOfOrderSequenceNumber, apierr.ReasonOf(err))
	_, _, err = l.ProduceBatchIdempotent(ctx, "t", 0, values(1, "x"), BatchProducer{pid, epoch + 1, 0})
	require.NoError(t, err, "a new epoch from 0")
	_, _, err = l.ProduceBatchIdempotent(ctx, "t", 0, values(1, "x"), BatchProducer{pid, epoch, 5})
	assert.Equal(t, apierr.InvalidProducerEpoch, apierr.ReasonOf(err))
	assert.EqualValues(t, 6, hw(t, store, "t", 0), "each batch stored once")

	for name, bp := range map[string]BatchProducer{"id 0": {0, 0, 0}, "negative epoch": {pid, -1, 0}, "negative sequence": {pid, 0, -1}} {
		_, _, err := l.ProduceBatchIdempotent(ctx, "t", 0, values(1, "x"), bp)
		assert.Equal(t, apierr.InvalidRequest, apierr.ReasonOf(err), name)
	}
	plain := values(1, "plain")
	plain[0].ProducerID, plain[0].ProducerEpoch, plain[0].Sequence = pid, epoch, 6
	base, _, err = l.ProduceBatch(ctx, "t", 0, plain)
	require.NoError(t, err)
	recs, err := store.Read(ctx, "t", 0, base, 1, 1<<20)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	assert.Zero(t, recs[0].ProducerID, "a plain batch has no producer")
}
