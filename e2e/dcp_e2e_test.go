package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/couchbase/gocbcore/v10"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// dcpExample creates topic (partitions partitions) with the example
// partition of docs/change-streams.md in partition 0 followed by one
// keyless record (offset 8), so an OSO snapshot ends with SEQNO_ADVANCED,
// and n records key-i=v-i in each other partition.
func (s *stack) dcpExample(t testing.TB, topic string, partitions int32, n int) string {
	t.Helper()
	id := s.exampleTopicN(t, topic, partitions)
	s.produceKV(t, topic, "-", "keyless")
	for p := int32(1); p < partitions; p++ {
		req := &sharelogv1.ProduceRequest{Topic: topic, Partition: &p}
		for i := range n {
			req.Records = append(req.Records, &sharelogv1.Record{Key: fmt.Appendf(nil, "p%d-key-%d", p, i), Value: fmt.Appendf(nil, "v-%d", i)})
		}
		_, err := s.log.Produce(context.Background(), req)
		require.NoError(t, err)
	}
	return id
}

func (s *stack) exampleTopicN(t testing.TB, topic string, partitions int32) string {
	t.Helper()
	info := s.createTopic(t, topic, partitions, nil)
	var kvs []string
	for _, r := range exampleRecords {
		kvs = append(kvs, r.key, r.value)
	}
	s.produceKV(t, topic, kvs...)
	return info.GetTopicId()
}

// TestDCPBackfillGocbcore: gocbcore's DCPAgent backfills every vBucket,
// with OSO snapshots (UseOSOBackfill: true_with_seqno_advanced) and
// ordered ones, then tails live mutations.
func TestDCPBackfillGocbcore(t *testing.T) {
	s := dcpStack(t)
	const parts, n = 4, 50
	s.dcpExample(t, "dcp-backfill", parts, n)
	addr := s.srv.DCPAddr()

	t.Run("oso", func(t *testing.T) {
		a, err := newDCPAgent(t, addr, "dcp-backfill", dcpOpts{oso: true})
		require.NoError(t, err)
		o := newObserver()
		for vb := range uint16(parts) {
			fl := failoverLog(t, a, vb)
			require.Len(t, fl, 1)
			_, err := openStream(t, a, o, vb, fl[0].VbUUID, 0, math.MaxUint64)
			require.NoError(t, err)
		}
		// vb 0: every key's latest record, in some order, then
		// SEQNO_ADVANCED to the keyless record's seqno 9 (docs/change-streams.md Ex3).
		require.Equal(t, "oso(START)", o.next(t, 0).String())
		var got []string
		for range 5 {
			got = append(got, o.next(t, 0).String())
		}
		slices.Sort(got)
		require.Equal(t, []string{"del(u/b@5)", "del(x/z@8)", "mut(u/a@4)", "mut(u/c@7)", "mut(x/y@6)"}, got)
		require.Equal(t, "adv(9)", o.next(t, 0).String())
		require.Equal(t, "oso(END)", o.next(t, 0).String())
		o.quiet(t, 0, 100*time.Millisecond)
		for vb := uint16(1); vb < parts; vb++ {
			require.Equal(t, "oso(START)", o.next(t, vb).String())
			keys := map[string]bool{}
			for range n {
				e := o.next(t, vb)
				require.Equal(t, "mut", e.kind, e.String())
				keys[e.key] = true
			}
			require.Len(t, keys, n)
			require.Equal(t, "oso(END)", o.next(t, vb).String())
		}
		// Live tail: after END the position is E (offset 9), the first
		// marker is MEMORY 10..10.
		s.produceKV(t, "dcp-backfill", "u/d", "4")
		require.Equal(t, "marker(10..10, MEMORY)", o.next(t, 0).String())
		e := o.next(t, 0)
		require.Equal(t, "mut(u/d@10)", e.String())
		require.Equal(t, "4", e.value)
		require.NotZero(t, e.cas, "CAS is the record timestamp")
	})

	t.Run("ordered", func(t *testing.T) {
		a, err := newDCPAgent(t, addr, "dcp-backfill", dcpOpts{})
		require.NoError(t, err)
		o := newObserver()
		fl := failoverLog(t, a, 0)
		_, err = openStream(t, a, o, 0, fl[0].VbUUID, 0, math.MaxUint64)
		require.NoError(t, err)
		// Ordered: no deduplication, seqno order; the keyless record is
		// passed over (SEQNO_ADVANCED was not asked for); u/d (produced by
		// the oso subtest) is in the same DISK snapshot.
		want := []string{"marker(1..10, DISK)", "mut(u/a@1)", "mut(x/z@2)", "mut(u/b@3)", "mut(u/a@4)", "del(u/b@5)",
			"mut(x/y@6)", "mut(u/c@7)", "del(x/z@8)", "mut(u/d@10)"}
		for _, w := range want {
			require.Equal(t, w, o.next(t, 0).String())
		}
		o.quiet(t, 0, 100*time.Millisecond)
	})

	t.Run("seqnos", func(t *testing.T) {
		a, err := newDCPAgent(t, addr, "dcp-backfill", dcpOpts{})
		require.NoError(t, err)
		ch := make(chan []gocbcore.VbSeqNoEntry, 1)
		_, err = a.GetVbucketSeqnos(0, 1, gocbcore.GetVbucketSeqnoOptions{}, func(e []gocbcore.VbSeqNoEntry, err error) {
			require.NoError(t, err)
			ch <- e
		})
		require.NoError(t, err)
		got := <-ch
		require.Len(t, got, parts)
		require.Equal(t, gocbcore.SeqNo(10), got[0].SeqNo)
		for _, e := range got[1:] {
			require.Equal(t, gocbcore.SeqNo(n), e.SeqNo)
		}
	})
}
