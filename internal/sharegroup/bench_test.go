package sharegroup

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// synthStore is a read-only store of one topic whose partitions hold hw
// records each, generated on Read and sharing one value buffer: it
// isolates the share-group layer's cost from the log store's.
type synthStore struct {
	logstore.Store // nil: only the methods below are used
	name           string
	id             string
	parts          int32
	hw             int64
	value          []byte
	watch          chan struct{} // never closed: nothing is appended
}

func newSynthStore(parts int32, hw int64, valueSize int) *synthStore {
	return &synthStore{name: "t", id: "00000000-0000-4000-8000-000000000001", parts: parts, hw: hw, value: make([]byte, valueSize), watch: make(chan struct{})}
}

func (s *synthStore) check(topic string, part int32) error {
	if topic != s.name || part < 0 || part >= s.parts {
		return logstore.ErrUnknownTopic
	}
	return nil
}

func (s *synthStore) Topic(_ context.Context, name string) (logstore.TopicInfo, []logstore.PartitionInfo, error) {
	if err := s.check(name, 0); err != nil {
		return logstore.TopicInfo{}, nil, err
	}
	return logstore.TopicInfo{Name: s.name, ID: s.id, Partitions: s.parts}, nil, nil
}

func (s *synthStore) TopicInfo(ctx context.Context, name string) (logstore.TopicInfo, error) {
	info, _, err := s.Topic(ctx, name)
	return info, err
}

func (s *synthStore) Bounds(topic string, part int32) (int64, int64, error) {
	return 0, s.hw, s.check(topic, part)
}

func (s *synthStore) Read(_ context.Context, topic string, part int32, off int64, n, maxBytes int) ([]logstore.Record, error) {
	if err := s.check(topic, part); err != nil {
		return nil, err
	}
	if off < 0 || off > s.hw {
		return nil, logstore.ErrOffsetOutOfRange
	}
	k := int(min(int64(n), s.hw-off))
	if sz := len(s.value); sz > 0 {
		k = min(k, max(maxBytes/sz, 1))
	}
	out := make([]logstore.Record, k)
	for i := range out {
		out[i] = logstore.Record{Offset: off + int64(i), Value: s.value}
	}
	return out, nil
}

func (s *synthStore) OffsetForTimestamp(context.Context, string, int32, int64) (int64, int64, error) {
	return 0, 0, nil
}

func (s *synthStore) Watch(topic string, part int32) (<-chan struct{}, error) {
	return s.watch, s.check(topic, part)
}

// BenchmarkFetchAck is scenario C1 at the domain level: consumers, each
// with its own session, loop ShareFetch (max_records 500) then
// ShareAcknowledge of the acquired ranges as ACCEPT (one batch per
// acquired entry) on one partition of 1 KiB records, with
// partition_max_record_locks = 500 × consumers. b.N is the number of
// records consumed. store=synthetic generates records on read (the
// share-group layer alone); store=mem is the in-memory log store.
func BenchmarkFetchAck(b *testing.B) {
	for _, store := range []string{"synthetic", "mem"} {
		for _, fsync := range []logstore.FsyncMode{logstore.FsyncNever, logstore.FsyncAlways} {
			for _, consumers := range []int{1, 4, 16} {
				b.Run(fmt.Sprintf("store=%s/fsync=%s/consumers=%d", store, fsync, consumers), func(b *testing.B) {
					benchFetchAck(b, store, fsync, consumers)
				})
			}
		}
	}
}

func benchFetchAck(b *testing.B, storeKind string, fsync logstore.FsyncMode, consumers int) {
	n := int64(b.N)
	var store logstore.Store
	if storeKind == "synthetic" {
		store = newSynthStore(1, n, 1024)
	} else {
		ms := logstore.NewMem()
		defer ms.Close()
		_, err := ms.CreateTopic(context.Background(), "t", 1, logstore.TopicConfig{})
		require.NoError(b, err)
		recs := make([]logstore.Record, 1000)
		for i := range recs {
			recs[i].Value = make([]byte, 1024)
		}
		for done := int64(0); done < n; done += 1000 {
			_, err := ms.Append(context.Background(), "t", 0, recs[:min(1000, n-done)])
			require.NoError(b, err)
		}
		store = ms
	}
	m, err := openWith(store, testOpts{Options: Options{Logger: slog.New(slog.DiscardHandler)}, Dir: b.TempDir(), Fsync: fsync})
	require.NoError(b, err)
	defer m.Close()
	_, err = m.UpdateConfig(context.Background(), testGroup, GroupConfig{AutoOffsetReset: str("earliest"), PartitionMaxRecordLocks: i32(int32(500 * consumers))})
	require.NoError(b, err)
	x := tp("t", 0)
	ctx := context.Background()
	var total atomic.Int64
	perConsumer := make([]int64, consumers)
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range consumers {
		wg.Go(func() {
			member := fmt.Sprintf("c%02d", c)
			var epoch int32
			var acks []AckBatch
			for total.Load() < n {
				req := FetchRequest{GroupID: testGroup, MemberID: member, Epoch: epoch, MaxRecords: i32(500)}
				if epoch == 0 {
					req.Partitions = entries(x)
				}
				resp, err := m.ShareFetch(ctx, req)
				if err != nil {
					b.Error(err)
					return
				}
				epoch++
				acks = acks[:0]
				for _, p := range resp.Partitions {
					for _, r := range p.Acquired {
						acks = append(acks, batch(r.FirstOffset, r.LastOffset, AckAccept))
						k := r.LastOffset - r.FirstOffset + 1
						total.Add(k)
						perConsumer[c] += k
					}
				}
				if len(acks) == 0 {
					runtime.Gosched()
					continue
				}
				ar, err := m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: member, Epoch: epoch, Partitions: []PartitionEntry{ackEntry(x, acks...)}})
				if err != nil || ar.Partitions[0].ErrorCode != apierr.None {
					b.Error(err, ar)
					return
				}
				epoch++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "records/s")
	if consumers > 1 && n >= int64(500*consumers) {
		lo, hi := perConsumer[0], perConsumer[0]
		for _, v := range perConsumer {
			lo, hi = min(lo, v), max(hi, v)
		}
		b.ReportMetric(float64(lo)/float64(n)*float64(consumers), "min-share")
		b.ReportMetric(float64(hi)/float64(n)*float64(consumers), "max-share")
	}
}

// BenchmarkAckRange: the server-side cost of ACCEPTing one uniform run of
// 10 and of 10 000 records.
func BenchmarkAckRange(b *testing.B) {
	for _, size := range []int64{10, 10000} {
		b.Run(fmt.Sprintf("records=%d", size), func(b *testing.B) {
			store := newSynthStore(1, size, 1)
			m, err := openWith(store, testOpts{Options: Options{Logger: slog.New(slog.DiscardHandler)}, Dir: b.TempDir(), Fsync: logstore.FsyncNever})
			require.NoError(b, err)
			defer m.Close()
			_, err = m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "m", MaxRecords: i32(1), Partitions: entries(tp("t", 0))})
			require.NoError(b, err)
			s, _, _ := m.sessions.Lookup(keyOf("m"))
			sp := m.groupFor(testGroup, false).partition(store.id, "t", 0, false)
			bs := []AckBatch{batch(0, size-1, AckAccept)}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				sp.mu.Lock()
				sp.spso, sp.speo = 0, size-1
				sp.runs = append(sp.runs[:0], run{first: 0, last: size - 1, state: stAcquired, count: 1, owner: s.ID(), deadline: never - 1})
				sp.mu.Unlock()
				if r := sp.ack(s, bs); r.code != apierr.None {
					b.Fatal(r.msg)
				}
			}
		})
	}
}

// heapPerSharePartition builds share-partitions each holding 2000 in-flight
// records in varied runs (four owners, per-offset acknowledgements leaving
// alternating states and counts) and returns the heap bytes per
// share-partition and the runs each has.
func heapPerSharePartition(t testing.TB, parts int) (bytesPer float64, runs int) {
	store := newSynthStore(int32(parts), 1<<40, 1)
	m, err := openWith(store, testOpts{Options: Options{Logger: slog.New(slog.DiscardHandler)}, Dir: t.TempDir(), Fsync: logstore.FsyncNever})
	require.NoError(t, err)
	defer m.Close()
	_, err = m.UpdateConfig(context.Background(), testGroup, GroupConfig{AutoOffsetReset: str("earliest")})
	require.NoError(t, err)
	ctx := context.Background()
	members := []string{"a", "b", "c", "d"}
	for _, mb := range members {
		_, err := m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: mb, MaxRecords: i32(1), Partitions: entries(tp("t", 0))})
		require.NoError(t, err)
	}
	_, err = m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: "a", Epoch: 1, Partitions: []PartitionEntry{ackEntry(tp("t", 0), batch(0, 0, AckAccept))}})
	require.NoError(t, err)
	epochs := map[string]int32{"a": 2, "b": 1, "c": 1, "d": 1}
	types := make([]AckType, 200)
	for i := range types {
		types[i] = []AckType{AckAccept, AckRelease, AckRenew, AckReject}[i%4]
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for p := range int32(parts) {
		x := tp("t", p)
		for _, mb := range members {
			// Only x in the session: forget the previous partition.
			req := FetchRequest{GroupID: testGroup, MemberID: mb, Epoch: epochs[mb], MaxRecords: i32(500), Partitions: entries(x)}
			if p > 0 {
				req.Forgotten = []TopicPartition{tp("t", p-1)}
			}
			epochs[mb]++
			resp, err := m.ShareFetch(ctx, req)
			require.NoError(t, err)
			require.Len(t, resp.Partitions, 1)
			require.NotEmpty(t, resp.Partitions[0].Records)
		}
		// a: per-offset types over 200 of its records: ~200 runs.
		ar, err := m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: "a", Epoch: epochs["a"], IsRenewAck: true,
			Partitions: []PartitionEntry{ackEntry(x, AckBatch{FirstOffset: 100, LastOffset: 299, Types: types})}})
		require.NoError(t, err)
		require.Equal(t, apierr.None, ar.Partitions[0].ErrorCode)
		epochs["a"]++
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	g := m.groupFor(testGroup, false)
	g.mu.Lock()
	for _, sp := range g.parts {
		sp.mu.Lock()
		runs += len(sp.runs)
		sp.mu.Unlock()
	}
	g.mu.Unlock()
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(parts), runs / len(g.parts)
}

// TestHeapPerSharePartition reports the heap cost of a share-partition
// with 2000 in-flight records and bounds it: O(runs), not O(records).
func TestHeapPerSharePartition(t *testing.T) {
	per, runs := heapPerSharePartition(t, 200)
	t.Logf("heap per share-partition with 2000 in-flight records in %d runs: %.0f bytes", runs, per)
	require.Less(t, per, float64(64<<10))
}

func BenchmarkHeapPerSharePartition(b *testing.B) {
	for range b.N {
		per, runs := heapPerSharePartition(b, 200)
		b.ReportMetric(per, "heap-bytes/share-partition")
		b.ReportMetric(float64(runs), "runs/share-partition")
	}
}
