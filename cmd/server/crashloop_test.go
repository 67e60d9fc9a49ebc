package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// The crash loop: a server under --fsync always is SIGKILLed at random
// instants while producers, a purger and share consumers run against it,
// and after every restart everything the clients saw acknowledged is
// checked against what the server recovered. SHARELOG_CRASH_KILLS sets the
// number of kills (default 20; make soak runs 200) and SHARELOG_CRASH_SEED
// the seed, which is logged so that the kill instants and client choices of
// a failing run can be replayed (goroutine scheduling still varies).
//
// A SIGKILL keeps the kernel's page cache, so this test proves that nothing
// acknowledged is lost or changed by the process dying at any instant; it
// cannot tell --fsync always from --fsync never (that takes a power cut).

const (
	clTopic      = "crashloop"
	clGroup      = "crashloop-group"
	clPartitions = 2
	clCountLimit = 3 // delivery count limit of the group, so records get archived
)

// randomAck picks ACCEPT 4/7, RELEASE 2/7, REJECT 1/7 of the time: enough
// releases that records reach the delivery count limit and get archived.
func randomAck(r *rand.Rand) sharelogv1.AcknowledgeType {
	switch n := r.IntN(7); {
	case n < 4:
		return sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT
	case n < 6:
		return sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE
	default:
		return sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT
	}
}

type clKey struct {
	p   int32
	off int64
}

// clBatch is one Produce call: its values in order, all for one partition.
type clBatch struct {
	p      int32
	values []string
}

// clShare is what the consumers know about one offset of the share group.
type clShare struct {
	accepted      int   // ACCEPTs answered NONE
	rejected      bool  // a REJECT answered NONE: archived
	atLimit       bool  // a RELEASE at the delivery count limit answered NONE: archived
	maybeFinal    bool  // an ACCEPT/REJECT (or RELEASE at the limit) whose answer was lost in a kill
	durableFloor  int32 // highest delivery count a RELEASE answered NONE made durable
	lastCount     int32 // delivery count of the last delivery
	lastLifetime  int   // server lifetime of the last delivery
	everDelivered bool
}

// clState is the client side's record of every acknowledged outcome.
type clState struct {
	mu        sync.Mutex
	t         *testing.T
	lifetime  int
	sent      map[string]int // value -> batch index (acknowledged or not)
	batches   []clBatch
	acked     map[clKey]string    // acknowledged produce offset -> value
	seen      map[clKey]string    // every (offset, value) any read returned
	where     map[string]clKey    // the same, by value
	purged    [clPartitions]int64 // highest acknowledged low watermark
	asked     [clPartitions]int64 // highest offset any Purge asked for, answered or not
	shares    map[clKey]*clShare
	delivered int
	archived  int
	accepted  int
	purges    int
	idem      clIdem
}

// clIdem is the idempotent producer's side (docs/produce.md): one
// producer id for the whole loop, a sequence per partition, and the batch
// whose answer a kill took, resent first in the next round.
type clIdem struct {
	id      int64
	epoch   int32
	seq     [clPartitions]int32
	pending *clIdemBatch
	resent  int // pending batches resent after a kill
}

type clIdemBatch struct {
	p      int32
	seq    int32
	values []string
}

func (s *clState) share(k clKey) *clShare {
	sh := s.shares[k]
	if sh == nil {
		sh = &clShare{}
		s.shares[k] = sh
	}
	return sh
}

// observe checks a record returned by any read: it was sent, and its offset
// never held another value. The caller holds s.mu.
func (s *clState) observe(p int32, r *sharelogv1.Record) {
	v := string(r.GetValue())
	k := clKey{p, r.GetOffset()}
	if _, ok := s.sent[v]; !ok {
		s.t.Errorf("partition %d offset %d holds %q, which was never sent", p, k.off, v)
	}
	if old, ok := s.seen[k]; ok && old != v {
		s.t.Errorf("partition %d offset %d changed from %q to %q", p, k.off, old, v)
	}
	s.seen[k] = v
	s.where[v] = k
}

func TestCrashLoop(t *testing.T) {
	kills := 20
	if v := os.Getenv("SHARELOG_CRASH_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "SHARELOG_CRASH_KILLS")
		require.Positive(t, n, "SHARELOG_CRASH_KILLS")
		kills = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SHARELOG_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "SHARELOG_CRASH_SEED")
		seed = n
	}
	t.Logf("crash loop: %d kills, replay with SHARELOG_CRASH_SEED=%d SHARELOG_CRASH_KILLS=%d", kills, seed, kills)
	rng := rand.New(rand.NewPCG(seed, 0))

	dir := t.TempDir()
	args := []string{"--fsync", "always", "--segment-bytes", "4096",
		"--share-delivery-count-limit", strconv.Itoa(clCountLimit)}
	st := &clState{t: t, sent: map[string]int{}, acked: map[clKey]string{}, seen: map[clKey]string{}, where: map[string]clKey{}, shares: map[clKey]*clShare{}}
	ctx := context.Background()

	c := startChild(t, dir, args...)
	_, err := sharelogv1.NewLogServiceClient(c.conn).CreateTopic(ctx, &sharelogv1.CreateTopicRequest{Name: clTopic, Partitions: clPartitions})
	require.NoError(t, err)
	_, err = sharelogv1.NewShareGroupServiceClient(c.conn).UpdateShareGroupConfig(ctx, &sharelogv1.UpdateShareGroupConfigRequest{
		GroupId: clGroup, Config: &sharelogv1.ShareGroupConfig{AutoOffsetReset: proto.String("earliest")}})
	require.NoError(t, err)

	for round := range kills {
		st.mu.Lock()
		st.lifetime = round
		st.mu.Unlock()
		var killed atomic.Bool
		runCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for w := range 3 {
			r := rand.New(rand.NewPCG(seed, uint64(round*16+w+1)))
			wg.Go(func() { st.produce(runCtx, c, &killed, r, round, w) })
		}
		wg.Go(func() { st.idemProduce(runCtx, c, &killed, rand.New(rand.NewPCG(seed, uint64(round*16+4))), round) })
		wg.Go(func() { st.purge(runCtx, c, &killed, rand.New(rand.NewPCG(seed, uint64(round*16+8)))) })
		for m := range 2 {
			r := rand.New(rand.NewPCG(seed, uint64(round*16+10+m)))
			wg.Go(func() { st.consume(runCtx, c, &killed, r, fmt.Sprintf("c%d", m)) })
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond) // the random instant
		killed.Store(true)
		c.kill(t)
		cancel()
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}

		c = startChild(t, dir, args...)
		// A SIGKILL never makes the data directory manifest claim more
		// than is on disk (docs/on-disk-layout.md, "The data directory manifest"): nothing goes
		// offline falsely.
		for _, msg := range []string{"partition offline", "topic missing", "share state missing", "still offline", "manifest damaged"} {
			if c.logged("ERROR", msg) {
				t.Errorf("after kill %d: ERROR %q at start", round+1, msg)
			}
		}
		st.verifyLog(ctx, c)
		if t.Failed() {
			t.Fatalf("after kill %d (seed %d)", round+1, seed)
		}
	}
	st.drain(ctx, c)
	t.Logf("crash loop: %d kills, %d batches sent, %d acknowledged records, %d purges, %d deliveries, %d accepted, %d archived, %d idempotent batches resent after a kill",
		kills, len(st.batches), len(st.acked), st.purges, st.delivered, st.accepted, st.archived, st.idem.resent)
	require.False(t, t.Failed(), "seed %d", seed)
}

// workerFailed reports an error that came before the kill as a failure; after
// the kill every call fails and the worker stops.
func workerFailed(t *testing.T, killed *atomic.Bool, what string, err error) {
	if !killed.Load() {
		t.Errorf("%s failed before the kill: %v", what, err)
	}
}

// produce sends batches of 1..8 keyed records with unique values to a
// random partition and records every acknowledged offset.
func (s *clState) produce(ctx context.Context, c *child, killed *atomic.Bool, r *rand.Rand, round, w int) {
	client := sharelogv1.NewLogServiceClient(c.conn)
	for i := 0; ctx.Err() == nil; i++ {
		p := int32(r.IntN(clPartitions))
		n := 1 + r.IntN(8)
		b := clBatch{p: p}
		recs := make([]*sharelogv1.Record, n)
		for j := range recs {
			v := fmt.Sprintf("r%d-w%d-b%d-%d", round, w, i, j)
			b.values = append(b.values, v)
			recs[j] = &sharelogv1.Record{Key: fmt.Appendf(nil, "k%d", r.IntN(50)), Value: []byte(v)}
		}
		s.mu.Lock()
		for _, v := range b.values {
			s.sent[v] = len(s.batches)
		}
		s.batches = append(s.batches, b)
		s.mu.Unlock()
		resp, err := client.Produce(ctx, &sharelogv1.ProduceRequest{Topic: clTopic, Partition: &p, Records: recs})
		if err != nil {
			workerFailed(s.t, killed, "Produce", err)
			return
		}
		s.mu.Lock()
		if len(resp.GetResults()) != n {
			s.t.Errorf("Produce of %d records answered %d results", n, len(resp.GetResults()))
		}
		for j, res := range resp.GetResults() {
			if res.GetPartition() != p || (j > 0 && res.GetOffset() != resp.GetResults()[0].GetOffset()+int64(j)) {
				s.t.Errorf("batch %v answered non-consecutive or misrouted results %v", b.values, resp.GetResults())
			}
			s.acked[clKey{p, res.GetOffset()}] = b.values[j]
		}
		s.mu.Unlock()
	}
}

// idemProduce is an idempotent producer (InitProducer once, a sequence
// per partition): a batch whose answer the kill took is resent with its
// sequence at the start of the next round, and must then be answered
// (with its original offsets if it had been appended); verifyLog finds
// every value at most once.
func (s *clState) idemProduce(ctx context.Context, c *child, killed *atomic.Bool, r *rand.Rand, round int) {
	client := sharelogv1.NewLogServiceClient(c.conn)
	s.mu.Lock()
	id := s.idem.id
	s.mu.Unlock()
	if id == 0 {
		resp, err := client.InitProducer(ctx, &sharelogv1.InitProducerRequest{})
		if err != nil {
			workerFailed(s.t, killed, "InitProducer", err)
			return
		}
		s.mu.Lock()
		s.idem.id, s.idem.epoch = resp.GetProducerId(), resp.GetProducerEpoch()
		s.mu.Unlock()
	}
	send := func(b *clIdemBatch, resend bool) bool {
		recs := make([]*sharelogv1.Record, len(b.values))
		for j, v := range b.values {
			recs[j] = &sharelogv1.Record{Key: []byte("idem"), Value: []byte(v)}
		}
		s.mu.Lock()
		req := &sharelogv1.ProduceRequest{Topic: clTopic, Partition: &b.p, Records: recs,
			ProducerId: s.idem.id, ProducerEpoch: s.idem.epoch, BaseSequence: map[int32]int32{b.p: b.seq}}
		s.mu.Unlock()
		resp, err := client.Produce(ctx, req)
		if err != nil {
			workerFailed(s.t, killed, "idempotent Produce", err)
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		res := resp.GetResults()
		if len(res) != len(b.values) {
			s.t.Errorf("idempotent Produce of %d records answered %d results", len(b.values), len(res))
			return false
		}
		for j, x := range res {
			if x.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE || x.GetPartition() != b.p || x.GetOffset() != res[0].GetOffset()+int64(j) {
				s.t.Errorf("idempotent batch %v answered %v", b.values, res)
				return false
			}
			k := clKey{b.p, x.GetOffset()}
			if was, ok := s.where[b.values[j]]; resend && ok && was != k {
				s.t.Errorf("resent idempotent record %q was appended again at %v: it was stored at %v", b.values[j], k, was)
			}
			s.acked[k] = b.values[j]
		}
		s.idem.pending = nil
		return true
	}
	s.mu.Lock()
	pending := s.idem.pending
	if pending != nil {
		s.idem.resent++
	}
	s.mu.Unlock()
	if pending != nil && !send(pending, true) {
		return
	}
	for i := 0; ctx.Err() == nil; i++ {
		p := int32(r.IntN(clPartitions))
		b := &clIdemBatch{p: p}
		for j := range 1 + r.IntN(8) {
			b.values = append(b.values, fmt.Sprintf("r%d-idem-b%d-%d", round, i, j))
		}
		s.mu.Lock()
		b.seq = s.idem.seq[p]
		s.idem.seq[p] += int32(len(b.values))
		s.idem.pending = b
		for _, v := range b.values {
			s.sent[v] = len(s.batches)
		}
		s.batches = append(s.batches, clBatch{p: p, values: b.values})
		s.mu.Unlock()
		if !send(b, false) {
			return
		}
	}
}

// purge moves a random partition's log start to a random point of the last
// few hundred offsets and records every acknowledged low watermark.
func (s *clState) purge(ctx context.Context, c *child, killed *atomic.Bool, r *rand.Rand) {
	client := sharelogv1.NewLogServiceClient(c.conn)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(10+r.IntN(40)) * time.Millisecond):
		}
		p := int32(r.IntN(clPartitions))
		hw, err := client.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: clTopic, Partition: p, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
		if err != nil {
			workerFailed(s.t, killed, "ListOffsets", err)
			return
		}
		to := hw.GetOffset() - 100 - int64(r.IntN(300))
		if to <= 0 {
			continue
		}
		s.mu.Lock()
		s.asked[p] = max(s.asked[p], to)
		s.mu.Unlock()
		resp, err := client.Purge(ctx, &sharelogv1.PurgeRequest{Topics: []*sharelogv1.PurgeTopic{
			{Topic: clTopic, Partitions: []*sharelogv1.PurgePartition{{Partition: p, Offset: to}}}}})
		if err != nil {
			workerFailed(s.t, killed, "Purge", err)
			return
		}
		res := resp.GetTopics()[0].GetPartitions()[0]
		if res.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
			s.t.Errorf("Purge of %d to %d: %v %s", p, to, res.GetErrorCode(), res.GetErrorMessage())
			return
		}
		s.mu.Lock()
		if res.GetLowWatermark() < to {
			s.t.Errorf("Purge of %d to %d answered low watermark %d", p, to, res.GetLowWatermark())
		}
		s.purged[p] = max(s.purged[p], res.GetLowWatermark())
		s.purges++
		s.mu.Unlock()
	}
}

// consume runs one share session: every fetch carries the acknowledgements
// of the previous one (a random ACCEPT, RELEASE or REJECT per offset), and
// now and then they go in a separate ShareAcknowledge instead. The epoch
// advances on both calls.
func (s *clState) consume(ctx context.Context, c *child, killed *atomic.Bool, r *rand.Rand, member string) {
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	var epoch int32
	var pending []clPending
	for ctx.Err() == nil {
		batches := ackBatches(pending)
		if len(pending) > 0 && r.IntN(4) == 0 {
			resp, err := sg.ShareAcknowledge(ctx, &sharelogv1.ShareAcknowledgeRequest{GroupId: clGroup, MemberId: member,
				ShareSessionEpoch: epoch, Topics: clTopics(batches)})
			if err != nil {
				s.settle(pending, nil)
				workerFailed(s.t, killed, "ShareAcknowledge", err)
				return
			}
			epoch++
			codes := map[int32]sharelogv1.ErrorCode{}
			for _, tr := range resp.GetResponses() {
				for _, pr := range tr.GetPartitions() {
					codes[pr.GetPartition()] = pr.GetErrorCode()
				}
			}
			s.settle(pending, codes)
			pending, batches = nil, nil
		}
		req := &sharelogv1.ShareFetchRequest{GroupId: clGroup, MemberId: member, ShareSessionEpoch: epoch,
			MaxWaitMs: 50, MaxRecords: proto.Int32(int32(1 + r.IntN(40))), Topics: clTopics(batches)}
		resp, err := sg.ShareFetch(ctx, req)
		if err != nil {
			s.settle(pending, nil)
			workerFailed(s.t, killed, "ShareFetch", err)
			return
		}
		epoch++
		codes := map[int32]sharelogv1.ErrorCode{}
		var got []clPending
		s.mu.Lock()
		for _, tr := range resp.GetResponses() {
			for _, pr := range tr.GetPartitions() {
				codes[pr.GetPartition()] = pr.GetAcknowledgeErrorCode()
				if pr.GetErrorCode() != sharelogv1.ErrorCode_ERROR_CODE_NONE {
					s.t.Errorf("ShareFetch partition %d: %v %s", pr.GetPartition(), pr.GetErrorCode(), pr.GetErrorMessage())
				}
				got = append(got, s.deliver(pr, r)...)
			}
		}
		s.mu.Unlock()
		s.settle(pending, codes)
		pending = got
	}
}

type clPending struct {
	k     clKey
	count int32
	ack   sharelogv1.AcknowledgeType
}

// deliver checks one partition's acquisitions and picks an acknowledgement
// for each. The caller holds s.mu.
func (s *clState) deliver(pr *sharelogv1.ShareFetchPartitionResponse, r *rand.Rand) []clPending {
	p := pr.GetPartition()
	var out []clPending
	recs := pr.GetRecords()
	i := 0
	for _, a := range pr.GetAcquiredRecords() {
		for off := a.GetFirstOffset(); off <= a.GetLastOffset(); off++ {
			if i >= len(recs) || recs[i].GetOffset() != off {
				s.t.Errorf("partition %d: acquired offset %d has no record in order", p, off)
				return out
			}
			s.observe(p, recs[i])
			i++
			k := clKey{p, off}
			sh := s.share(k)
			n := a.GetDeliveryCount()
			switch {
			case sh.accepted > 0:
				s.t.Errorf("partition %d offset %d delivered again (count %d) after an ACCEPT answered NONE", p, off, n)
			case sh.rejected || sh.atLimit:
				s.t.Errorf("partition %d offset %d delivered again (count %d) after it was archived", p, off, n)
			case n < 1 || n > clCountLimit:
				s.t.Errorf("partition %d offset %d delivery count %d outside 1..%d", p, off, n, clCountLimit)
			case n <= sh.durableFloor:
				s.t.Errorf("partition %d offset %d delivery count %d not above its durable count %d", p, off, n, sh.durableFloor)
			case sh.everDelivered && sh.lastLifetime == s.lifetime && n <= sh.lastCount:
				s.t.Errorf("partition %d offset %d delivery count went from %d to %d without a restart", p, off, sh.lastCount, n)
			}
			sh.everDelivered, sh.lastCount, sh.lastLifetime, sh.maybeFinal = true, n, s.lifetime, false
			s.delivered++
			out = append(out, clPending{k, n, randomAck(r)})
		}
	}
	if i != len(recs) {
		s.t.Errorf("partition %d: %d records for %d acquired offsets", p, len(recs), i)
	}
	return out
}

// settle records the outcome of acknowledgements: codes holds the answer
// per partition, nil when the call failed (the server was killed, so the
// outcome is unknown).
func (s *clState) settle(pending []clPending, codes map[int32]sharelogv1.ErrorCode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pd := range pending {
		sh := s.share(pd.k)
		final := pd.ack != sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_RELEASE || pd.count >= clCountLimit
		if codes == nil {
			sh.maybeFinal = sh.maybeFinal || final
			continue
		}
		code, ok := codes[pd.k.p]
		if !ok || code != sharelogv1.ErrorCode_ERROR_CODE_NONE {
			s.t.Errorf("acknowledgement of partition %d offset %d: code %v (answered: %v)", pd.k.p, pd.k.off, code, ok)
			continue
		}
		switch pd.ack {
		case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT:
			sh.accepted++
			s.accepted++
		case sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_REJECT:
			sh.rejected = true
			s.archived++
		default:
			sh.durableFloor = max(sh.durableFloor, pd.count)
			if pd.count >= clCountLimit {
				sh.atLimit = true
				s.archived++
			}
		}
	}
}

// ackBatches turns pending acknowledgements into one batch per offset run,
// with one type per offset.
func ackBatches(pending []clPending) map[int32][]*sharelogv1.AcknowledgementBatch {
	out := map[int32][]*sharelogv1.AcknowledgementBatch{}
	for _, pd := range pending {
		bs := out[pd.k.p]
		if n := len(bs); n > 0 && bs[n-1].LastOffset+1 == pd.k.off {
			bs[n-1].LastOffset++
			bs[n-1].AcknowledgeTypes = append(bs[n-1].AcknowledgeTypes, pd.ack)
			continue
		}
		out[pd.k.p] = append(bs, &sharelogv1.AcknowledgementBatch{FirstOffset: pd.k.off, LastOffset: pd.k.off,
			AcknowledgeTypes: []sharelogv1.AcknowledgeType{pd.ack}})
	}
	return out
}

// clTopics names every partition (sending them again in an incremental
// session is harmless) with its acknowledgements.
func clTopics(batches map[int32][]*sharelogv1.AcknowledgementBatch) []*sharelogv1.ShareFetchTopic {
	ft := &sharelogv1.ShareFetchTopic{Topic: clTopic}
	for p := range int32(clPartitions) {
		ft.Partitions = append(ft.Partitions, &sharelogv1.ShareFetchPartition{Partition: p, AcknowledgementBatches: batches[p]})
	}
	return []*sharelogv1.ShareFetchTopic{ft}
}

// verifyLog reads every partition from its log start to its high watermark
// after a restart and checks it against everything acknowledged or seen.
func (s *clState) verifyLog(ctx context.Context, c *child) {
	client := sharelogv1.NewLogServiceClient(c.conn)
	s.mu.Lock()
	defer s.mu.Unlock()
	at := map[string]clKey{} // value -> where this read found it
	var start, hw [clPartitions]int64
	for p := range int32(clPartitions) {
		earliest, err := client.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: clTopic, Partition: p, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST})
		require.NoError(s.t, err)
		latest, err := client.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: clTopic, Partition: p, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
		require.NoError(s.t, err)
		start[p], hw[p] = earliest.GetOffset(), latest.GetOffset()
		if start[p] < s.purged[p] {
			s.t.Errorf("partition %d log start %d is below the acknowledged purge to %d", p, start[p], s.purged[p])
		}
		// No retention here: only a purge moves the log start, so records
		// above every offset ever asked for must all be readable.
		if start[p] > s.asked[p] {
			s.t.Errorf("partition %d log start %d is above every purge ever sent (highest %d)", p, start[p], s.asked[p])
		}
		next := start[p]
		for next < hw[p] {
			resp, err := client.Fetch(ctx, &sharelogv1.FetchRequest{Topic: clTopic, Partition: p, Offset: next, MaxRecords: 10000, MaxBytes: 16 << 20})
			require.NoError(s.t, err, "Fetch partition %d at %d (log start %d, high watermark %d)", p, next, start[p], hw[p])
			require.NotEmpty(s.t, resp.GetRecords(), "Fetch partition %d at %d below the high watermark %d", p, next, hw[p])
			for _, rec := range resp.GetRecords() {
				if rec.GetOffset() != next {
					s.t.Errorf("partition %d: offset %d follows %d (not dense)", p, rec.GetOffset(), next-1)
				}
				s.observe(p, rec)
				if was, ok := at[string(rec.GetValue())]; ok {
					s.t.Errorf("record %q is stored twice: at %v and at partition %d offset %d", rec.GetValue(), was, p, rec.GetOffset())
				}
				at[string(rec.GetValue())] = clKey{p, rec.GetOffset()}
				next = rec.GetOffset() + 1
			}
		}
	}
	for k, v := range s.acked {
		if got, ok := at[v]; k.off >= start[k.p] && (!ok || got != k) {
			s.t.Errorf("acknowledged record %q at partition %d offset %d is lost or moved (found: %v at %v; log start %d, high watermark %d)",
				v, k.p, k.off, ok, got, start[k.p], hw[k.p])
		}
	}
	for k, v := range s.seen {
		if got, ok := at[v]; k.off >= start[k.p] && (!ok || got != k) {
			s.t.Errorf("record %q read at partition %d offset %d earlier is lost or moved", v, k.p, k.off)
		}
	}
	// A batch is all or nothing: the records found are consecutive, in
	// order, and any missing ones are a prefix removed by a purge.
	for _, b := range s.batches {
		first := -1
		for j, v := range b.values {
			k, ok := at[v]
			switch {
			case !ok && first >= 0:
				s.t.Errorf("batch %v is torn: %q missing after %q", b.values, v, b.values[first])
			case ok && first < 0:
				first = j
				if j > 0 && k.off != start[b.p] {
					s.t.Errorf("batch %v is torn: starts at %q (offset %d) above the log start %d", b.values, v, k.off, start[b.p])
				}
			case ok && k != (clKey{b.p, at[b.values[first]].off + int64(j-first)}):
				s.t.Errorf("batch %v is not consecutive: %q at %v", b.values, v, k)
			}
		}
	}
}

// drain accepts everything the group still holds, then checks that every
// offset above the log start was accepted exactly once or archived.
func (s *clState) drain(ctx context.Context, c *child) {
	sg := sharelogv1.NewShareGroupServiceClient(c.conn)
	logc := sharelogv1.NewLogServiceClient(c.conn)
	s.mu.Lock()
	s.lifetime++
	s.mu.Unlock()
	var pending []clPending
	for epoch, idle := int32(0), 0; idle < 3; epoch++ {
		resp, err := sg.ShareFetch(ctx, &sharelogv1.ShareFetchRequest{GroupId: clGroup, MemberId: "drain", ShareSessionEpoch: epoch,
			MaxWaitMs: 20, MaxRecords: proto.Int32(5000), Topics: clTopics(ackBatches(pending))})
		require.NoError(s.t, err)
		codes := map[int32]sharelogv1.ErrorCode{}
		var got []clPending
		s.mu.Lock()
		for _, tr := range resp.GetResponses() {
			for _, pr := range tr.GetPartitions() {
				codes[pr.GetPartition()] = pr.GetAcknowledgeErrorCode()
				for _, pd := range s.deliver(pr, rand.New(rand.NewPCG(0, 0))) {
					pd.ack = sharelogv1.AcknowledgeType_ACKNOWLEDGE_TYPE_ACCEPT
					got = append(got, pd)
				}
			}
		}
		s.mu.Unlock()
		s.settle(pending, codes)
		if pending = got; len(got) == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	offs, err := sg.DescribeShareGroupOffsets(ctx, &sharelogv1.DescribeShareGroupOffsetsRequest{GroupId: clGroup})
	require.NoError(s.t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range int32(clPartitions) {
		start, err := logc.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: clTopic, Partition: p, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_EARLIEST})
		require.NoError(s.t, err)
		hw, err := logc.ListOffsets(ctx, &sharelogv1.ListOffsetsRequest{Topic: clTopic, Partition: p, Spec: sharelogv1.OffsetSpec_OFFSET_SPEC_LATEST})
		require.NoError(s.t, err)
		for _, tp := range offs.GetTopics() {
			for _, sp := range tp.GetPartitions() {
				if tp.GetTopic() == clTopic && sp.GetPartition() == p && (sp.GetStartOffset() != hw.GetOffset() || sp.GetLag() != 0) {
					s.t.Errorf("partition %d after the drain: share start %d lag %d, want %d and 0", p, sp.GetStartOffset(), sp.GetLag(), hw.GetOffset())
				}
			}
		}
		for off := start.GetOffset(); off < hw.GetOffset(); off++ {
			sh := s.shares[clKey{p, off}]
			switch {
			case sh == nil:
				s.t.Errorf("partition %d offset %d was never delivered", p, off)
			case sh.accepted == 1, sh.accepted == 0 && (sh.rejected || sh.atLimit || sh.maybeFinal):
			default:
				s.t.Errorf("partition %d offset %d ends neither accepted once nor archived: %+v", p, off, *sh)
			}
		}
	}
}
