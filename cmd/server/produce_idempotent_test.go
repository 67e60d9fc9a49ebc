package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/client/backoff"
	"github.com/sharelog/sharelog/client/router"
	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// readPartition reads every record of one partition through client.
func readPartition(t *testing.T, client sharelogv1.LogServiceClient, topic string, p int32) []*sharelogv1.Record {
	t.Helper()
	var out []*sharelogv1.Record
	for off := int64(0); ; {
		var resp *sharelogv1.FetchResponse
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			resp, err = client.Fetch(ctx, &sharelogv1.FetchRequest{Topic: topic, Partition: p, Offset: off, MaxRecords: 5000})
			return err == nil
		}, 15*time.Second, 100*time.Millisecond, "fetch %s-%d from %d", topic, p, off)
		if len(resp.GetRecords()) == 0 {
			return out
		}
		out = append(out, resp.GetRecords()...)
		off = resp.GetRecords()[len(resp.GetRecords())-1].GetOffset() + 1
	}
}

// idemBatch is one partition's batch of the single-server test.
type idemBatch struct {
	seq    int32
	values []string
	base   int64 // -1 while its answer is unknown
}

// A batch of an idempotent producer whose answer was lost to a SIGKILL of
// the server (between the append and the answer, for the batches in
// flight) is resent after the restart: it gets its original offsets and is
// stored once; each of the last 5 answered batches of a partition, resent,
// answers the offsets it was first answered; an older one is never
// appended again (the partition's batches here follow each other, so the
// server remembers them as one run and answers their offsets too); a
// batch after a gap is OUT_OF_ORDER_SEQUENCE_NUMBER. Every record is in
// the log exactly once.
func TestIdempotentResendAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, dir, "--fsync", "always")
	ctx := context.Background()
	client := sharelogv1.NewLogServiceClient(c.conn)
	const parts = 2
	_, err := client.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "idem", Partitions: parts})
	require.NoError(t, err)
	init, err := client.InitProducer(ctx, &sharelogv1.InitProducerRequest{})
	require.NoError(t, err)
	pid, epoch := init.GetProducerId(), init.GetProducerEpoch()
	require.Positive(t, pid)

	send := func(cl sharelogv1.LogServiceClient, p int32, b *idemBatch) (*sharelogv1.ProduceResponse, error) {
		recs := make([]*sharelogv1.Record, len(b.values))
		for i, v := range b.values {
			recs[i] = &sharelogv1.Record{Value: []byte(v)}
		}
		return cl.Produce(ctx, &sharelogv1.ProduceRequest{Topic: "idem", Partition: &p, Records: recs,
			ProducerId: pid, ProducerEpoch: epoch, BaseSequence: map[int32]int32{p: b.seq}})
	}
	batches := make([][]*idemBatch, parts) // per partition, in sequence order
	var mu sync.Mutex
	var wg sync.WaitGroup
	answered := 0
	enough := make(chan struct{})
	var once sync.Once
	for p := range int32(parts) {
		wg.Go(func() {
			for seq := int32(0); ; seq += 3 {
				b := &idemBatch{seq: seq, base: -1}
				for i := range 3 {
					b.values = append(b.values, fmt.Sprintf("p%d-s%d", p, seq+int32(i)))
				}
				mu.Lock()
				batches[p] = append(batches[p], b)
				mu.Unlock()
				resp, err := send(client, p, b)
				if err != nil {
					return // killed: this batch's outcome is unknown
				}
				mu.Lock()
				b.base = resp.GetResults()[0].GetOffset()
				answered++
				if answered >= 300 {
					once.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		})
	}
	<-enough
	c.kill(t) // batches are in flight: some appended, unanswered
	wg.Wait()

	c2 := startChild(t, dir, "--fsync", "always")
	client2 := sharelogv1.NewLogServiceClient(c2.conn)
	unknownAppended := 0
	for p := range int32(parts) {
		bs := batches[p]
		last := bs[len(bs)-1]
		require.EqualValues(t, -1, last.base, "the last batch of each partition was in flight")
		hwBefore := int64(len(readPartition(t, client2, "idem", p)))
		resp, err := send(client2, p, last)
		require.NoError(t, err, "the resend of the unanswered batch")
		last.base = resp.GetResults()[0].GetOffset()
		if last.base < hwBefore {
			unknownAppended++ // it had been appended before the kill: original offsets
		}
		// The last 5 answered batches (the unanswered one included) answer
		// their offsets again; the one before them is out of order.
		for i := len(bs) - 5; i < len(bs); i++ {
			resp, err := send(client2, p, bs[i])
			require.NoError(t, err, "resend of batch seq %d", bs[i].seq)
			for k, r := range resp.GetResults() {
				assert.Equal(t, bs[i].base+int64(k), r.GetOffset(), "batch seq %d record %d: its original offset", bs[i].seq, k)
				assert.Equal(t, sharelogv1.ErrorCode_ERROR_CODE_NONE, r.GetErrorCode())
			}
		}
		for _, old := range []*idemBatch{bs[0], bs[len(bs)-6]} {
			resp, err := send(client2, p, old)
			if err != nil {
				assert.Equal(t, apierr.OutOfOrderSequenceNumber, apierr.Reason(reasonOf(err)), "an old batch: %v", err)
				continue
			}
			assert.Equal(t, old.base, resp.GetResults()[0].GetOffset(), "an old batch answered with its original offset")
		}
		gap := &idemBatch{seq: last.seq + 4, values: []string{"gap"}}
		_, err = send(client2, p, gap)
		require.Error(t, err)
		assert.Equal(t, codes.FailedPrecondition, status.Code(err))
		assert.Equal(t, apierr.OutOfOrderSequenceNumber, apierr.Reason(reasonOf(err)))

		stored := readPartition(t, client2, "idem", p)
		count := map[string]int{}
		at := map[int64]string{}
		for _, r := range stored {
			count[string(r.GetValue())]++
			at[r.GetOffset()] = string(r.GetValue())
		}
		for _, b := range bs {
			for k, v := range b.values {
				require.Equal(t, 1, count[v], "%s stored once", v)
				require.Equal(t, v, at[b.base+int64(k)], "%s at the offset it was answered", v)
			}
		}
		require.Len(t, stored, 3*len(bs), "nothing else in partition %d", p)
	}
	t.Logf("unanswered batches that had been appended before the SIGKILL: %d of %d", unknownAppended, parts)
}

// reasonOf is the ErrorInfo reason of a status error.
func reasonOf(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(interface{ GetReason() string }); ok {
			return info.GetReason()
		}
	}
	return ""
}

// lossyConn loses every 7th successful Produce answer: the call appended,
// the caller hears UNAVAILABLE (as when a connection drops after the
// server answered).
type lossyConn struct {
	grpc.ClientConnInterface
	calls, lost atomic.Int64
}

func (c *lossyConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	err := c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	if err == nil && method == sharelogv1.LogService_Produce_FullMethodName && c.calls.Add(1)%7 == 0 {
		c.lost.Add(1)
		return status.Error(codes.Unavailable, "the answer was lost (test)")
	}
	return err
}

// restProduce posts a Produce body and decodes the answer.
func restProduce(t *testing.T, httpAddr, topic string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+"/v1/topics/"+topic+"/records", bytes.NewReader(b))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(data, &out), "%s", data)
	return resp.StatusCode, out
}

// In partitioned mode, with a 6-partition topic spread over three
// instances:
//   - a REST Produce of keyed records spanning the partitions of a dead
//     owner and of live ones answers 200 with each partition's outcome
//     (before: 503 for the whole request after the live partitions had
//     appended, so every retry duplicated them); the appended records are
//     stored once and the failed ones not at all;
//   - keyed records produced continuously through client/router's
//     Producer while an owner is SIGKILLed and its partitions move are
//     each stored exactly once: zero duplicates, zero losses.
func TestPartitionedIdempotentProduceExactlyOnce(t *testing.T) {
	js := startJS(t)
	prefix := js.Prefix()
	members := map[string]*child{}
	for _, id := range []string{"a", "b", "c"} {
		members[id] = startPartitioned(t, js.URL(), prefix, id)
	}
	ctx := context.Background()
	admin := sharelogv1.NewLogServiceClient(members["a"].conn)
	const parts = 6
	require.Eventually(t, func() bool {
		_, err := admin.CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: "exact", Partitions: parts})
		return err == nil || status.Code(err) == codes.AlreadyExists
	}, 10*time.Second, 100*time.Millisecond)
	before := waitSpread(t, members["a"], parts, []string{"a", "b", "c"}, 15*time.Second)
	const victim, via = "b", "a" // the seed of the router lives

	// Keys for every partition: key i goes to partition keyPart[i].
	keyOf := map[int32]string{}
	for i := 0; len(keyOf) < parts; i++ {
		k := fmt.Sprintf("key-%d", i)
		if _, ok := keyOf[router.Partition([]byte(k), parts)]; !ok {
			keyOf[router.Partition([]byte(k), parts)] = k
		}
	}

	rc := routed(t, members[via].conn)
	// Besides the answers the SIGKILL loses, every 7th Produce answer is
	// lost on the way back (the append stands): the Producer must resend.
	lossy := &lossyConn{ClientConnInterface: rc}
	prod, err := router.NewProducer(ctx, lossy, router.ProducerOptions{RetryTimeout: leaseTTL + 30*time.Second,
		AttemptTimeout: 3 * time.Second, Backoff: backoff.Backoff{Initial: 20 * time.Millisecond, Max: 300 * time.Millisecond}})
	require.NoError(t, err)

	type sent struct {
		value     string
		partition int32
		offset    int64
	}
	var (
		mu     sync.Mutex
		acked  []sent
		failed []error
		wg     sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				recs := make([]*sharelogv1.Record, 0, 2*parts)
				for j := range 2 * parts {
					// Two records per partition, keyed by the partition's key
					// plus a suffix that keeps the partition (murmur2 differs, so
					// use the partition's own key and tell records by value).
					recs = append(recs, &sharelogv1.Record{Key: []byte(keyOf[int32(j%parts)]), Value: fmt.Appendf(nil, "w%d-%d-%d", w, i, j)})
				}
				results, err := prod.Produce(ctx, "exact", nil, recs)
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				}
				for j, r := range results {
					if r.GetErrorCode() == sharelogv1.ErrorCode_ERROR_CODE_NONE {
						acked = append(acked, sent{string(recs[j].GetValue()), r.GetPartition(), r.GetOffset()})
					}
				}
				mu.Unlock()
			}
		})
	}
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})
	// The load must be running before the kill: some records are
	// acknowledged by the three owners.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 4*parts
	}, 20*time.Second, 20*time.Millisecond, "the load ran before the kill")
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	ackedBeforeKill := len(acked)
	mu.Unlock()
	members[victim].kill(t)

	// The finding: a plain (not idempotent) REST produce over every
	// partition while the victim's partitions have no live owner.
	deadPart := int32(-1)
	for p := range int32(parts) {
		if before[fmt.Sprintf("exact/%d", p)].GetOwnerId() == victim {
			deadPart = p
			break
		}
	}
	require.NotEqual(t, int32(-1), deadPart, "the victim owns a partition")
	var body map[string]any
	var plainValues []string
	var code int
	mixed := false
	for attempt := 0; !mixed && attempt < 50; attempt++ {
		var recs []map[string]any
		plainValues = nil
		for p := range int32(parts) {
			v := fmt.Sprintf("plain-%d-%d", attempt, p)
			plainValues = append(plainValues, v)
			recs = append(recs, map[string]any{"key": []byte(keyOf[p]), "value": []byte(v)})
		}
		code, body = restProduce(t, members[via].httpAddr, "exact", map[string]any{"records": recs})
		if code != http.StatusOK {
			continue
		}
		ok, bad := 0, 0
		for _, r := range body["results"].([]any) {
			if r.(map[string]any)["errorCode"] == "ERROR_CODE_NONE" {
				ok++
			} else {
				bad++
			}
		}
		mixed = ok > 0 && bad > 0
		if !mixed {
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.True(t, mixed, "a REST produce spanning a dead owner's partition answered 200 with per-partition errors: last %d %v", code, body)
	t.Logf("REST answer while %s was dead: %v", victim, body)
	plainOK := map[string]int64{}
	plainFailed := map[string]bool{}
	for i, r := range body["results"].([]any) {
		m := r.(map[string]any)
		if m["errorCode"] == "ERROR_CODE_NONE" {
			off, err := strconv.ParseInt(m["offset"].(string), 10, 64)
			require.NoError(t, err)
			plainOK[plainValues[i]] = off
		} else {
			assert.Equal(t, "-1", m["offset"], "a failed record has offset -1")
			assert.NotEmpty(t, m["errorMessage"])
			assert.Contains(t, []any{"ERROR_CODE_NOT_LEADER_OR_FOLLOWER", "ERROR_CODE_REQUEST_TIMED_OUT"}, m["errorCode"],
				"a dead owner's partition answers a retriable code (NOT_OWNER, OWNER_UNREACHABLE)")
			plainFailed[plainValues[i]] = true
		}
	}

	live := []string{"a", "c"}
	waitSpread(t, members[via], parts, live, leaseTTL+10*time.Second)
	mu.Lock()
	ackedAtSpread := len(acked)
	mu.Unlock()
	// The load goes on at the new owners: every partition the victim owned
	// acknowledges records there (judged by count, not by time, so a slow
	// machine waits longer instead of failing).
	victimParts := map[int32]bool{}
	for p := range int32(parts) {
		if before[fmt.Sprintf("exact/%d", p)].GetOwnerId() == victim {
			victimParts[p] = true
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := map[int32]int{}
		for _, a := range acked[ackedAtSpread:] {
			if victimParts[a.partition] {
				n[a.partition]++
			}
		}
		for p := range victimParts {
			if n[p] < 4 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "the victim's partitions take records at their new owners")
	close(stop)
	wg.Wait()
	require.Empty(t, failed, "every Produce through the idempotent producer succeeded in the end")

	reader := sharelogv1.NewLogServiceClient(rc)
	count := map[string]int{}
	where := map[string][2]int64{}
	total := 0
	for p := range int32(parts) {
		for _, r := range readPartition(t, reader, "exact", p) {
			v := string(r.GetValue())
			count[v]++
			where[v] = [2]int64{int64(p), r.GetOffset()}
			total++
		}
	}
	duplicates, losses := 0, 0
	for v, n := range count {
		if n > 1 {
			duplicates += n - 1
			t.Logf("duplicate: %s stored %d times", v, n)
		}
	}
	for _, a := range acked {
		if count[a.value] == 0 {
			losses++
			continue
		}
		assert.Equal(t, [2]int64{int64(a.partition), a.offset}, where[a.value], "%s at its answered offset", a.value)
	}
	for v, off := range plainOK {
		assert.Equal(t, 1, count[v], "plain record %s appended once", v)
		assert.Equal(t, off, where[v][1])
	}
	for v := range plainFailed {
		assert.Zero(t, count[v], "plain record %s answered failed is not stored", v)
	}
	t.Logf("%d records acknowledged through the idempotent producer (%d before the kill, %d by the failover), %d stored in all (%d answers lost on purpose); duplicates %d, losses %d",
		len(acked), ackedBeforeKill, ackedAtSpread, total, lossy.lost.Load(), duplicates, losses)
	require.Positive(t, lossy.lost.Load())
	assert.Zero(t, duplicates, "duplicates")
	assert.Zero(t, losses, "losses")
	assert.Equal(t, len(acked)+len(plainOK), total, "nothing stored but the acknowledged records")
}
