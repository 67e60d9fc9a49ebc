package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// idemRecordBatch is a v2 record batch of values from an idempotent
// producer (pid -1 for none), as a client sends it.
func idemRecordBatch(pid int64, epoch int16, seq int32, values ...string) []byte {
	b := kmsg.NewRecordBatch()
	b.Magic, b.NumRecords, b.LastOffsetDelta = 2, int32(len(values)), int32(len(values)-1)
	b.FirstTimestamp, b.MaxTimestamp = 1, 1
	b.ProducerID, b.ProducerEpoch, b.FirstSequence = pid, epoch, seq
	for i, v := range values {
		rec := kmsg.NewRecord()
		rec.OffsetDelta, rec.Value = int32(i), []byte(v)
		rec.Length = int32(len(rec.AppendTo(nil)) - 1) // one varint byte: short values
		b.Records = rec.AppendTo(b.Records)
	}
	return finishBatch(b)
}

// kproduce sends one partition's records (raw batches) and returns its
// error code and base offset.
func (k *kafkaConn) kproduce(topic string, partition int32, raw []byte) (int16, int64) {
	k.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 9, -1, 5000
	tp := kmsg.NewProduceRequestTopic()
	tp.Topic = topic
	p := kmsg.NewProduceRequestTopicPartition()
	p.Partition, p.Records = partition, raw
	tp.Partitions = append(tp.Partitions, p)
	req.Topics = append(req.Topics, tp)
	rp := k.do(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	return rp.ErrorCode, rp.BaseOffset
}

func (k *kafkaConn) initProducerID(version int16, txnID *string, pid int64, epoch int16) *kmsg.InitProducerIDResponse {
	k.t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version, req.TransactionalID, req.TransactionTimeoutMillis = version, txnID, 60000
	req.ProducerID, req.ProducerEpoch = pid, epoch
	return k.do(req).(*kmsg.InitProducerIDResponse)
}

// fetchedBatch is a Fetch batch's header and values.
type fetchedBatch struct {
	base   int64
	pid    int64
	epoch  int16
	seq    int32
	values []string
}

// kfetchAll reads a partition from offset 0 to its high watermark with raw
// Fetch requests and returns its batches.
func (k *kafkaConn) kfetchAll(topic string, partition int32) []fetchedBatch {
	k.t.Helper()
	var out []fetchedBatch
	for off := int64(0); ; {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxBytes, req.SessionEpoch, req.ReplicaID = 12, 4<<20, -1, -1
		tp := kmsg.NewFetchRequestTopic()
		tp.Topic = topic
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition, p.FetchOffset, p.PartitionMaxBytes = partition, off, 4<<20
		tp.Partitions = append(tp.Partitions, p)
		req.Topics = append(req.Topics, tp)
		rp := k.do(req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
		require.Zero(k.t, rp.ErrorCode, "fetch %s-%d at %d: %v", topic, partition, off, kerr.ErrorForCode(rp.ErrorCode))
		if off >= rp.HighWatermark {
			return out
		}
		raw := rp.RecordBatches
		require.NotEmpty(k.t, raw, "fetch %s-%d at %d below the high watermark %d", topic, partition, off, rp.HighWatermark)
		for len(raw) > 0 {
			var b kmsg.RecordBatch
			require.NoError(k.t, b.ReadFrom(raw))
			raw = raw[12+int(b.Length):]
			fb := fetchedBatch{base: b.FirstOffset, pid: b.ProducerID, epoch: b.ProducerEpoch, seq: b.FirstSequence}
			recs := b.Records
			for range b.NumRecords {
				var r kmsg.Record
				l, n := kbinVarint(recs)
				require.Positive(k.t, n)
				require.NoError(k.t, r.ReadFrom(recs[:n+int(l)]))
				recs = recs[n+int(l):]
				fb.values = append(fb.values, string(r.Value))
			}
			out = append(out, fb)
			off = b.FirstOffset + int64(b.LastOffsetDelta) + 1
		}
	}
}

// kbinVarint is a zigzag varint and its length (0 if malformed).
func kbinVarint(b []byte) (int32, int) {
	var ux uint32
	for i := 0; i < len(b) && i < 5; i++ {
		ux |= uint32(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return int32(ux>>1) ^ -int32(ux&1), i + 1
		}
	}
	return 0, 0
}

// TestKafkaIdempotentProduceRules drives the idempotent producer's rules
// over the raw protocol: a resend of one of the last batches answers its
// original base offset (error 0) and is stored once, also after a SIGKILL
// of the server; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is
// INVALID_PRODUCER_EPOCH, a new epoch must start at sequence 0;
// InitProducerID with an id and epoch answers a new id, as Kafka's without
// a transactional id (which the transaction coordinator answers); Fetch
// answers the producer fields per batch.
func TestKafkaIdempotentProduceRules(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, "--kafka-addr", "127.0.0.1:0")
	addr := c.kafkaAddr(t)
	k := dialKafka(t, addr)

	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	av.ClientSoftwareName, av.ClientSoftwareVersion = "idem-test", "1"
	var initVersions *kmsg.ApiVersionsResponseApiKey
	for _, key := range k.do(av).(*kmsg.ApiVersionsResponse).ApiKeys {
		if key.ApiKey == 22 {
			initVersions = &key
		}
	}
	require.NotNil(t, initVersions, "ApiVersions advertises InitProducerID")
	assert.Equal(t, [2]int16{0, 5}, [2]int16{initVersions.MinVersion, initVersions.MaxVersion})

	k.createTopic("idem", 1)
	init := k.initProducerID(4, nil, -1, -1)
	require.Zero(t, init.ErrorCode)
	pid := init.ProducerID
	require.Positive(t, pid)
	require.Zero(t, init.ProducerEpoch)

	step := func(name string, raw []byte, wantCode int16, wantBase int64) {
		t.Helper()
		code, base := k.kproduce("idem", 0, raw)
		if assert.Equal(t, wantCode, code, "%s: %v", name, kerr.ErrorForCode(code)) && wantCode == 0 {
			assert.Equal(t, wantBase, base, "%s: base offset", name)
		}
	}
	step("first batch", idemRecordBatch(pid, 0, 0, "a0", "a1", "a2"), 0, 0)
	step("its resend", idemRecordBatch(pid, 0, 0, "a0", "a1", "a2"), 0, 0)
	step("the next batch", idemRecordBatch(pid, 0, 3, "a3", "a4"), 0, 3)
	step("the first batch again", idemRecordBatch(pid, 0, 0, "a0", "a1", "a2"), 0, 0)
	step("a gap", idemRecordBatch(pid, 0, 10, "x"), kerr.OutOfOrderSequenceNumber.Code, -1)
	step("past the last batch", idemRecordBatch(pid, 0, 4, "a4", "x"), kerr.OutOfOrderSequenceNumber.Code, -1)
	step("a new epoch from 0", idemRecordBatch(pid, 1, 0, "b0", "b1"), 0, 5)
	step("the old epoch", idemRecordBatch(pid, 0, 5, "x"), kerr.InvalidProducerEpoch.Code, -1)
	step("a newer epoch not from 0", idemRecordBatch(pid, 2, 7, "x"), kerr.OutOfOrderSequenceNumber.Code, -1)
	step("producer id 0", idemRecordBatch(0, 0, 0, "x"), kerr.UnknownProducerID.Code, -1)
	step("two batches of a producer", append(idemRecordBatch(pid, 1, 2, "x"), idemRecordBatch(pid, 1, 3, "y")...), kerr.InvalidRecord.Code, -1)
	step("without a producer", idemRecordBatch(-1, -1, -1, "n0"), 0, 7)

	again := k.initProducerID(4, nil, pid, 1)
	require.Zero(t, again.ErrorCode)
	assert.Greater(t, again.ProducerID, pid, "an id and epoch without a transactional id: a new id, as Kafka")
	assert.Zero(t, again.ProducerEpoch)
	pid2 := again.ProducerID
	step("the new id from any sequence", idemRecordBatch(pid2, 0, 40, "c0"), 0, 8)
	for v := int16(0); v <= 5; v++ {
		r := k.initProducerID(v, nil, -1, -1)
		require.Zero(t, r.ErrorCode, "v%d", v)
		assert.Greater(t, r.ProducerID, pid2, "v%d: ids are never answered twice", v)
		pid2 = max(pid2, r.ProducerID)
	}
	// A transactional id is the transaction coordinator's (docs/kafka.md
	// "Transactions"): its own new producer id at epoch 0, then the next
	// epoch of the same id.
	txn := "tx"
	tx := k.initProducerID(4, &txn, -1, -1)
	require.Zero(t, tx.ErrorCode, "a transactional id: %v", kerr.ErrorForCode(tx.ErrorCode))
	assert.Greater(t, tx.ProducerID, pid2, "a transactional id gets a new id")
	assert.Zero(t, tx.ProducerEpoch)
	tx2 := k.initProducerID(4, &txn, -1, -1)
	require.Zero(t, tx2.ErrorCode)
	assert.Equal(t, [2]int64{tx.ProducerID, 1}, [2]int64{tx2.ProducerID, int64(tx2.ProducerEpoch)}, "the same transactional id: its id, the next epoch")

	wantBatches := []fetchedBatch{
		{base: 0, pid: pid, epoch: 0, seq: 0, values: []string{"a0", "a1", "a2", "a3", "a4"}},
		{base: 5, pid: pid, epoch: 1, seq: 0, values: []string{"b0", "b1"}},
		{base: 7, pid: -1, epoch: -1, seq: -1, values: []string{"n0"}},
		{base: 8, pid: again.ProducerID, epoch: 0, seq: 40, values: []string{"c0"}},
	}
	assert.Equal(t, wantBatches, k.kfetchAll("idem", 0), "each record once, with its producer's fields")

	// After a SIGKILL the state is read back from the log.
	c.kill(t)
	c = startChild(t, dir, "--kafka-addr", addr)
	k = dialKafka(t, c.kafkaAddr(t))
	step("after a restart: a resend", idemRecordBatch(pid, 1, 0, "b0", "b1"), 0, 5)
	step("after a restart: the old epoch", idemRecordBatch(pid, 0, 0, "a0", "a1", "a2"), kerr.InvalidProducerEpoch.Code, -1)
	step("after a restart: the other id's resend", idemRecordBatch(again.ProducerID, 0, 40, "c0"), 0, 8)
	step("after a restart: a gap", idemRecordBatch(again.ProducerID, 0, 42, "x"), kerr.OutOfOrderSequenceNumber.Code, -1)
	step("after a restart: the next batch", idemRecordBatch(pid, 1, 2, "b2"), 0, 9)
	after := k.initProducerID(4, nil, -1, -1)
	require.Zero(t, after.ErrorCode)
	assert.Greater(t, after.ProducerID, pid2, "ids are not reused after a restart")
	assert.Equal(t, append(wantBatches, fetchedBatch{base: 9, pid: pid, epoch: 1, seq: 2, values: []string{"b2"}}), k.kfetchAll("idem", 0))
}

// kgoIdem is an idempotent franz-go producer's records per partition.
type kgoIdem struct {
	mu    sync.Mutex
	acked [][]string // per partition, in the order of their acks
	fails int
}

// TestKafkaIdempotentProducerKgo: franz-go with idempotence on (its
// default) produces to three partitions with several requests in flight;
// a consumer reads every record once, in order per partition, with the
// producer's id and epoch, and each Fetch batch's base sequence plus a
// record's offset delta is the record's sequence (here its offset: one
// producer from sequence 0 on new partitions).
func TestKafkaIdempotentProducerKgo(t *testing.T) {
	c := startChild(t, t.TempDir(), "--kafka-addr", "127.0.0.1:0")
	addr := c.kafkaAddr(t)
	k := dialKafka(t, addr)
	const parts, perPart = 3, 400
	k.createTopic("kidem", parts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("kidem"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(512)) // many small batches
	require.NoError(t, err)
	defer cl.Close()
	var mu sync.Mutex
	var pids []int64
	var epochs []int16
	for i := range perPart {
		for p := range int32(parts) {
			cl.Produce(ctx, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "p%d-%04d", p, i)}, func(r *kgo.Record, err error) {
				assert.NoError(t, err)
				mu.Lock()
				pids, epochs = append(pids, r.ProducerID), append(epochs, r.ProducerEpoch)
				mu.Unlock()
			})
		}
	}
	require.NoError(t, cl.Flush(ctx))
	pid, epoch, err := cl.ProducerID(ctx)
	require.NoError(t, err)
	require.Positive(t, pid, "kgo got an id from InitProducerID")
	require.Zero(t, epoch)
	for i := range pids {
		require.Equal(t, pid, pids[i])
		require.Zero(t, epochs[i])
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"kidem": {0: kgo.NewOffset().At(0), 1: kgo.NewOffset().At(0), 2: kgo.NewOffset().At(0)}}))
	require.NoError(t, err)
	defer cons.Close()
	got := make([][]string, parts)
	for n := 0; n < parts*perPart; {
		fs := cons.PollFetches(ctx)
		require.NoError(t, fs.Err())
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			assert.Equal(t, pid, r.ProducerID)
			assert.Zero(t, r.ProducerEpoch)
			assert.Equal(t, int64(len(got[r.Partition])-1), r.Offset)
			n++
		})
	}
	for p := range int32(parts) {
		want := make([]string, perPart)
		for i := range want {
			want[i] = fmt.Sprintf("p%d-%04d", p, i)
		}
		assert.Equal(t, want, got[p], "partition %d: each record once, in order", p)
		batches := k.kfetchAll("kidem", p)
		require.NotEmpty(t, batches)
		for _, b := range batches {
			assert.Equal(t, pid, b.pid)
			assert.Zero(t, b.epoch)
			assert.Equal(t, b.base, int64(b.seq), "partition %d batch at %d: base sequence", p, b.base)
		}
	}
}

// TestKafkaIdempotentSIGKILL: franz-go idempotent producers retry through
// ten SIGKILLs and restarts of the server on the same data directory and
// port; every acknowledged record is in the log exactly once, and each
// partition holds each producer's records in the order they were produced
// (a batch in flight at a kill, resent after the restart, is not appended
// twice, and none is lost).
func TestKafkaIdempotentSIGKILL(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, "--kafka-addr", "127.0.0.1:0", "--group-initial-rebalance-delay", "0")
	addr := c.kafkaAddr(t)
	const parts, producers, kills = 3, 2, 10
	dialKafka(t, addr).createTopic("kcrash", parts)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	states, clients, stopLoad := kgoIdemLoad(ctx, t, addr, "kcrash", parts, producers)
	ackedTotal := func() int { return ackedOf(states) }
	commits := groupCommitter(ctx, t, addr, "kcrash", "kcrash-group")
	for round := range kills {
		before, commitsBefore := ackedTotal(), commits.count()
		require.Eventually(t, func() bool { return ackedTotal() >= before+90 && commits.count() > commitsBefore }, 30*time.Second, 5*time.Millisecond,
			"round %d: the producers and the group make progress (acked %d, commits %d)", round, ackedTotal(), commits.count())
		acked := commits.snapshot()
		c.kill(t) // with batches and commits in flight
		c = startChild(t, dir, "--kafka-addr", addr, "--group-initial-rebalance-delay", "0")
		commits.checkNotBehind(t, round, acked)
	}
	stopLoad()
	commits.stop()
	require.NotZero(t, commits.count(), "the group committed offsets")
	t.Logf("%d offset commits acknowledged through %d kills; none went backwards", commits.count(), kills)
	for w, cl := range clients {
		require.NoError(t, cl.Flush(ctx), "producer %d delivers everything it buffered", w)
	}

	total := checkExactlyOnce(t, dialKafka(t, c.kafkaAddr(t)), "kcrash", parts, states)
	t.Logf("%d records acknowledged through %d kills", total, kills)
}

// checkExactlyOnce reads topic's partitions and checks each acknowledged
// record of states is in the log exactly once, each producer's records in
// the order produced ("w<producer>-<counter>", the counter zero-padded),
// and nothing else: after the producers' Flush everything is
// acknowledged. It returns the records in the log.
func checkExactlyOnce(t *testing.T, k *kafkaConn, topic string, parts int32, states []*kgoIdem) int {
	t.Helper()
	return checkExactlyOnceAt(t, func(int32) *kafkaConn { return k }, topic, parts, states)
}

// checkExactlyOnceAt is checkExactlyOnce reading partition p through
// leader(p) (in cluster mode only a partition's leader serves a Fetch).
func checkExactlyOnceAt(t *testing.T, leader func(p int32) *kafkaConn, topic string, parts int32, states []*kgoIdem) int {
	t.Helper()
	total := 0
	for p := range parts {
		var log []string
		for _, b := range leader(p).kfetchAll(topic, p) {
			log = append(log, b.values...)
		}
		total += len(log)
		count := map[string]int{}
		last := map[byte]string{} // per producer, its last value in the log
		for _, v := range log {
			count[v]++
			if prev, ok := last[v[1]]; ok && v <= prev {
				t.Errorf("partition %d: %s after %s: out of order or twice", p, v, prev)
			}
			last[v[1]] = v
		}
		for w, st := range states {
			st.mu.Lock()
			for _, v := range st.acked[p] {
				if count[v] != 1 {
					t.Errorf("partition %d: acknowledged %s (producer %d) is in the log %d times", p, v, w, count[v])
				}
			}
			st.mu.Unlock()
		}
	}
	assert.Equal(t, ackedOf(states), total, "after the flush every record is acknowledged, and the log holds just them")
	return total
}

// kgoIdemLoad starts producers franz-go idempotent producers on addr that
// send "w<producer>-<counter>" round-robin over topic's partitions until
// stop is called, retrying every failure without end; each acknowledged
// record is kept in its producer's kgoIdem.
func kgoIdemLoad(ctx context.Context, t *testing.T, addr, topic string, parts int32, producers int) ([]*kgoIdem, []*kgo.Client, func()) {
	t.Helper()
	states := make([]*kgoIdem, producers)
	clients := make([]*kgo.Client, producers)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range producers {
		st := &kgoIdem{acked: make([][]string, parts)}
		states[w] = st
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ProducerBatchMaxBytes(512), kgo.RecordRetries(math.MaxInt32), kgo.RequestRetries(math.MaxInt32),
			kgo.RecordDeliveryTimeout(0), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
			kgo.MaxBufferedRecords(100), kgo.MetadataMinAge(100*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		clients[w] = cl
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				p := int32(i) % parts
				v := fmt.Sprintf("w%d-%06d", w, i/int(parts))
				// Blocks while MaxBufferedRecords are unacknowledged.
				cl.Produce(ctx, &kgo.Record{Partition: p, Value: []byte(v)}, func(_ *kgo.Record, err error) {
					st.mu.Lock()
					defer st.mu.Unlock()
					if err != nil {
						st.fails++
						t.Errorf("producer %d: %s failed: %v", w, v, err)
						return
					}
					st.acked[p] = append(st.acked[p], v)
				})
			}
		})
	}
	var once sync.Once
	stop := func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
	t.Cleanup(stop)
	return states, clients, stop
}

// ackedOf counts the acknowledged records of states.
func ackedOf(states []*kgoIdem) int {
	n := 0
	for _, st := range states {
		st.mu.Lock()
		for _, a := range st.acked {
			n += len(a)
		}
		st.mu.Unlock()
	}
	return n
}

// TestPartitionedKafkaIdempotentFailover: in --cluster-mode partitioned,
// franz-go idempotent producers on one instance's Kafka listener keep
// producing while another instance, owner of some partitions, is
// SIGKILLed and its partitions move; a batch in flight at the killed
// leader is resent to the new one (franz-go follows NOT_LEADER_OR_FOLLOWER
// and the new Metadata), which reads the old one's records and producer
// state from JetStream: every acknowledged record is stored exactly once,
// in order per producer.
func TestPartitionedKafkaIdempotentFailover(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix() // one cluster: Prefix answers a new one per call
	members := map[string]*child{}
	for _, id := range []string{"a", "b", "c"} {
		members[id] = startMember(t, js.URL(), prefix, id, "--cluster-mode", "partitioned", "--kafka-addr", "127.0.0.1:0")
		members[id].waitReadyz(t, "cluster: partitioned", 15*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const parts, victim, via = 6, "b", "a"
	admin := sharelogv1.NewLogServiceClient(members[via].conn)
	require.Eventually(t, func() bool {
		_, err := admin.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "kfail", Partitions: parts})
		return err == nil || status.Code(err) == codes.AlreadyExists
	}, 10*time.Second, 100*time.Millisecond)
	t.Cleanup(func() {
		if t.Failed() {
			for id, m := range members {
				t.Logf("last log lines of %s:\n%s", id, strings.Join(m.logs.Tail(30), "\n"))
			}
		}
	})
	before := waitSpread(t, members[via], parts, []string{"a", "b", "c"}, 15*time.Second)
	victimParts := map[int32]bool{}
	for p := range int32(parts) {
		if before[fmt.Sprintf("kfail/%d", p)].GetOwnerId() == victim {
			victimParts[p] = true
		}
	}
	require.NotEmpty(t, victimParts, "the victim owns a partition")

	addr := members[via].kafkaAddr(t)
	states, clients, stopLoad := kgoIdemLoad(ctx, t, addr, "kfail", parts, 2)
	perPartition := func() map[int32]int {
		n := map[int32]int{}
		for _, st := range states {
			st.mu.Lock()
			for p, a := range st.acked {
				n[int32(p)] += len(a)
			}
			st.mu.Unlock()
		}
		return n
	}
	require.Eventually(t, func() bool {
		n := perPartition()
		for p := range victimParts {
			if n[p] < 20 {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "the load runs on the victim's partitions before the kill")
	members[victim].kill(t) // with forwarded batches in flight
	atKill := perPartition()

	after := waitSpread(t, members[via], parts, []string{"a", "c"}, leaseTTL+20*time.Second)
	require.Eventually(t, func() bool {
		n := perPartition()
		for p := range victimParts {
			if n[p] < atKill[p]+20 {
				return false
			}
		}
		return true
	}, 60*time.Second, 10*time.Millisecond, "the victim's partitions take records at their new owners")
	stopLoad()
	for w, cl := range clients {
		require.NoError(t, cl.Flush(ctx), "producer %d delivers everything it buffered", w)
	}
	total := checkExactlyOnceAt(t, func(p int32) *kafkaConn {
		owner := after[fmt.Sprintf("kfail/%d", p)].GetOwnerId()
		return dialKafka(t, members[owner].kafkaAddr(t))
	}, "kfail", parts, states)
	t.Logf("%d records acknowledged across the failover of %s", total, victim)
}

// committer is a kgo consumer-group member that consumes a topic and
// commits what it consumed after every poll, keeping, per partition, the
// highest offset a commit of it was acknowledged for.
type committer struct {
	cl     *kgo.Client
	adm    *kadm.Client
	group  string
	mu     sync.Mutex
	acked  map[int32]int64
	n      int
	cancel context.CancelFunc
	done   chan struct{}
}

func groupCommitter(ctx context.Context, t *testing.T, addr, topic, group string) *committer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequestRetries(math.MaxInt32), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	admCl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(math.MaxInt32),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }))
	require.NoError(t, err)
	t.Cleanup(admCl.Close)
	cctx, cancel := context.WithCancel(ctx)
	cm := &committer{cl: cl, adm: kadm.NewClient(admCl), group: group, acked: map[int32]int64{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(cm.done)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			offs := map[string]map[int32]kgo.EpochOffset{}
			fs.EachRecord(func(r *kgo.Record) {
				if offs[r.Topic] == nil {
					offs[r.Topic] = map[int32]kgo.EpochOffset{}
				}
				offs[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
			})
			if len(offs) == 0 {
				continue
			}
			cl.CommitOffsetsSync(cctx, offs, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				if err != nil {
					return
				}
				sent := map[int32]int64{}
				for _, rt := range req.Topics {
					for _, rp := range rt.Partitions {
						sent[rp.Partition] = rp.Offset
					}
				}
				cm.mu.Lock()
				defer cm.mu.Unlock()
				for _, rt := range resp.Topics {
					for _, rp := range rt.Partitions {
						if rp.ErrorCode == 0 {
							cm.n++
							cm.acked[rp.Partition] = max(cm.acked[rp.Partition], sent[rp.Partition])
						}
					}
				}
			})
		}
	}()
	return cm
}

func (cm *committer) snapshot() map[int32]int64 {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return maps.Clone(cm.acked)
}

func (cm *committer) count() int {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return cm.n
}

func (cm *committer) stop() {
	cm.cancel()
	<-cm.done
}

// checkNotBehind fetches the group's committed offsets from the restarted
// server: each is at least what a commit acknowledged before the kill.
func (cm *committer) checkNotBehind(t *testing.T, round int, acked map[int32]int64) {
	t.Helper()
	var got kadm.OffsetResponses
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := cm.adm.FetchOffsets(ctx, cm.group)
		if err != nil {
			return false
		}
		got = r
		return true
	}, 30*time.Second, 50*time.Millisecond, "round %d: fetch the committed offsets after the restart", round)
	for p, off := range acked {
		o, ok := got.Lookup("kcrash", p)
		require.True(t, ok, "round %d: partition %d has a committed offset after the restart", round, p)
		assert.GreaterOrEqual(t, o.At, off, "round %d: partition %d's committed offset went backwards", round, p)
	}
}
