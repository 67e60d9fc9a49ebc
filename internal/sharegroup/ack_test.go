package sharegroup

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/storage/logstore"
)

// Dynamic rules, per partition, atomic, the code of the first
// failing offset in request order.
func TestAckDynamicRules(t *testing.T) {
	// m holds 10..19 and 25..29, o holds 20..24; the high watermark is 30.
	setup := func(t *testing.T) (*env, TopicPartition) {
		e := newEnv(t, nil)
		e.topic("t", 2)
		x := tp("t", 0)
		e.produce("t", 0, 10, 1)
		e.produce("t", 1, 1, 1)
		e.open("m", x)
		e.open("o", x)
		e.produce("t", 0, 20, 1)
		require.Equal(t, []AcquiredRange{rng(10, 19, 1)}, acquired(t, e.fetch("m", FetchRequest{MaxRecords: i32(10)}), x))
		require.Equal(t, []AcquiredRange{rng(20, 24, 1)}, acquired(t, e.fetch("o", FetchRequest{MaxRecords: i32(5)}), x))
		require.Equal(t, []AcquiredRange{rng(25, 29, 1)}, acquired(t, e.fetch("m", FetchRequest{}), x))
		return e, x
	}
	for _, tc := range []struct {
		name    string
		prepare []AckBatch // applied by m first, must succeed
		batches []AckBatch
		want    apierr.Reason
	}{
		{"own records", nil, []AckBatch{batch(10, 19, AckAccept), batch(25, 29, AckReject)}, apierr.None},
		{"beyond the high watermark", nil, []AckBatch{batch(25, 31, AckAccept)}, apierr.InvalidRequest},
		{"another session's records", nil, []AckBatch{batch(18, 21, AckAccept)}, apierr.InvalidRecordState},
		{"first failing offset decides: state", nil, []AckBatch{batch(10, 11, AckAccept), batch(20, 20, AckAccept), batch(40, 40, AckAccept)}, apierr.InvalidRecordState},
		{"first failing offset decides: high watermark", nil, []AckBatch{batch(10, 11, AckAccept), batch(40, 41, AckAccept)}, apierr.InvalidRequest},
		{"below SPSO: no effect", nil, []AckBatch{batch(0, 5, AckReject)}, apierr.None},
		{"already acknowledged", []AckBatch{batch(12, 13, AckAccept)}, []AckBatch{batch(12, 13, AckAccept)}, apierr.InvalidRecordState},
		{"acknowledged and then below SPSO", []AckBatch{batch(10, 13, AckAccept)}, []AckBatch{batch(10, 13, AckReject)}, apierr.None},
		{"released", []AckBatch{batch(14, 14, AckRelease)}, []AckBatch{batch(14, 14, AckAccept)}, apierr.InvalidRecordState},
		{"archived", []AckBatch{batch(15, 15, AckGap)}, []AckBatch{batch(15, 15, AckRelease)}, apierr.InvalidRecordState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, x := setup(t)
			if tc.prepare != nil {
				require.Equal(t, apierr.None, e.ack("m", ackEntry(x, tc.prepare...)).Partitions[0].ErrorCode)
			}
			before := e.state(x)
			r := e.ack("m", ackEntry(x, tc.batches...), ackEntry(tp("t", 1), batch(0, 0, AckAccept)), ackEntry(tp("zz", 0), batch(0, 0, AckAccept)))
			assert.Equal(t, tc.want, r.Partitions[0].ErrorCode, r.Partitions[0].ErrorMessage)
			if tc.want != apierr.None {
				assert.Equal(t, before, e.state(x), "atomic: nothing changed")
			}
			// Partitions are independent: an uninitialised one, an unknown one.
			assert.Equal(t, apierr.InvalidRecordState, r.Partitions[1].ErrorCode)
			assert.Equal(t, apierr.UnknownTopicOrPartition, r.Partitions[2].ErrorCode)
		})
	}
}

// Per-offset types: each offset takes its own transition.
func TestAckPerOffsetTypes(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	e.produce("t", 0, 8, 1)
	e.fetch("m", FetchRequest{})
	r, err := e.m.ShareAcknowledge(context.Background(), AckRequest{GroupID: testGroup, MemberID: "m", Epoch: e.next("m"), IsRenewAck: true,
		Partitions: []PartitionEntry{ackEntry(x, AckBatch{FirstOffset: 0, LastOffset: 5,
			Types: []AckType{AckAccept, AckRelease, AckReject, AckGap, AckAccept, AckRenew}})}})
	require.NoError(t, err)
	require.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
	assert.Equal(t, "spso=1 [1-1 AVAILABLE(1)] [2-3 ARCHIVED(0)] [4-4 ACKNOWLEDGED(0)] [5-5 ACQUIRED(1)] [6-7 ACQUIRED(1)]", e.state(x), "5 was renewed: another deadline")
}

// RENEW resets the deadline; the deadline, not a timer, decides expiry.
func TestRenewAndExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{RecordLockDurationMs: i32(2000)})
		e.open("m", x)
		e.produce("t", 0, 4, 1)
		e.fetch("m", FetchRequest{})
		time.Sleep(1500 * time.Millisecond)
		r, err := e.m.ShareAcknowledge(context.Background(), AckRequest{GroupID: testGroup, MemberID: "m", Epoch: e.next("m"), IsRenewAck: true,
			Partitions: []PartitionEntry{ackEntry(x, batch(0, 1, AckRenew))}})
		require.NoError(t, err)
		require.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
		time.Sleep(time.Second) // 2.5s: 2..3 expired, 0..1 renewed until 3.5s
		assert.Equal(t, "spso=0 [0-1 ACQUIRED(1)] [2-3 AVAILABLE(1)]", e.state(x))
		assert.Equal(t, apierr.InvalidRecordState, e.ack("m", ackEntry(x, batch(2, 2, AckAccept))).Partitions[0].ErrorCode)
		assert.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(0, 1, AckAccept))).Partitions[0].ErrorCode)
		// RENEW below SPSO has no effect and succeeds.
		r, err = e.m.ShareAcknowledge(context.Background(), AckRequest{GroupID: testGroup, MemberID: "m", Epoch: e.next("m"), IsRenewAck: true,
			Partitions: []PartitionEntry{ackEntry(x, batch(0, 1, AckRenew))}})
		require.NoError(t, err)
		assert.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
	})
}

// Overtaken ACQUIRED records expire ARCHIVED and are never delivered
// again; acks of other sessions for them succeed without effect.
func TestOvertakenExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{RecordLockDurationMs: i32(1000)})
		e.open("m", x)
		e.open("o", x)
		e.produce("t", 0, 10, 1)
		e.fetch("m", FetchRequest{MaxRecords: i32(5)})
		_, err := e.store.DeleteRecordsBefore(context.Background(), "t", 0, 3)
		require.NoError(t, err)
		assert.Equal(t, "spso=3 [3-4 ACQUIRED(1)] below[0-2 ACQUIRED(1)]", e.state(x))
		assert.Equal(t, apierr.None, e.ack("o", ackEntry(x, batch(0, 2, AckAccept))).Partitions[0].ErrorCode)
		assert.Equal(t, "spso=3 [3-4 ACQUIRED(1)] below[0-2 ACQUIRED(1)]", e.state(x), "not the owner: no effect")
		time.Sleep(time.Second)
		assert.Equal(t, "spso=3 [3-4 AVAILABLE(1)]", e.state(x))
		assert.Equal(t, []AcquiredRange{rng(3, 4, 2), rng(5, 9, 1)}, acquired(t, e.fetch("o", FetchRequest{}), x))
	})
}

// Range cost: acknowledging one uniform 10 000-record run costs what a
// 10-record one does — no per-record allocation, O(runs) work.
func TestAckRangeCost(t *testing.T) {
	e := newEnv(t, func(o *testOpts) { o.Fsync = logstore.FsyncNever })
	e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	e.produce("t", 0, 10000, 1)
	s, _, _ := e.m.sessions.Lookup(keyOf("m"))
	sp := e.sp(x)
	allocs := func(n int64) float64 {
		return testing.AllocsPerRun(50, func() {
			sp.mu.Lock()
			sp.status, sp.spso, sp.speo = spLive, 0, n-1
			sp.runs = append(sp.runs[:0], run{first: 0, last: n - 1, state: stAcquired, count: 1, owner: s.ID(), deadline: never - 1})
			sp.mu.Unlock()
			r := sp.ack(s, []AckBatch{batch(0, n-1, AckAccept)})
			if r.code != apierr.None {
				panic(r.msg)
			}
		})
	}
	small, large := allocs(10), allocs(10000)
	t.Logf("allocations per ack: 10 records %.1f, 10000 records %.1f", small, large)
	assert.LessOrEqual(t, large, small+0.5)
}
