package sharegroup

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
)

// Worked examples of the share-group rules, one test each.

// Example 1: epochs.
func TestExample1Epochs(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	ctx := context.Background()
	x := tp("t", 0)
	e.open("m", x) // next 1
	_, err := e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 1})
	require.NoError(t, err) // next 2
	_, err = e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: "m", Epoch: 2})
	require.NoError(t, err) // next 3
	_, err = e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 2})
	re := reqErr(err)
	require.NotNil(t, re)
	assert.Equal(t, apierr.InvalidShareSessionEpoch, re.Reason)
	assert.Equal(t, "3", re.Metadata["expected_epoch"])
	_, err = e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 3})
	require.NoError(t, err)

	require.True(t, e.m.sessions.SetNextEpoch(keyOf("m"), math.MaxInt32))
	_, err = e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: math.MaxInt32})
	require.NoError(t, err)
	_, next, ok := e.m.sessions.Lookup(keyOf("m"))
	require.True(t, ok)
	assert.Equal(t, int32(1), next)
	_, err = e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: "m", Epoch: 1})
	require.NoError(t, err)
}

// Example 2: strict budget across partitions, rotation and batch_size.
func TestExample2StrictBudget(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("orders", 2)
	o0, o1 := tp("orders", 0), tp("orders", 1)
	e.produce("orders", 0, 1000, 1024)
	e.produce("orders", 1, 40, 1024)
	e.open("m", o0, o1) // fetch k=0 initialises: SPSO 1000 and 40
	require.Equal(t, int64(1000), e.spso(o0))
	require.Equal(t, int64(40), e.spso(o1))
	e.produce("orders", 0, 300, 1024)
	e.produce("orders", 1, 300, 1024)
	resp := e.fetch("m", FetchRequest{MaxRecords: i32(400), BatchSize: 150})
	assert.Equal(t, []AcquiredRange{rng(40, 189, 1), rng(190, 339, 1)}, acquired(t, resp, o1))
	assert.Equal(t, []AcquiredRange{rng(1000, 1099, 1)}, acquired(t, resp, o0))
	total := 0
	for _, p := range resp.Partitions {
		total += len(p.Records)
		covered := 0
		for _, r := range p.Acquired {
			covered += int(r.LastOffset - r.FirstOffset + 1)
		}
		require.Equal(t, covered, len(p.Records))
		var want []int64
		for _, r := range p.Acquired {
			for o := r.FirstOffset; o <= r.LastOffset; o++ {
				want = append(want, o)
			}
		}
		var got []int64
		for _, r := range p.Records {
			got = append(got, r.Offset)
		}
		assert.Equal(t, want, got)
	}
	assert.Equal(t, 400, total)
}

// Example 3: acks complete before the acquisition of the same request.
func TestExample3AcksBeforeFetch(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.produce("t", 0, 200, 1024)
	e.open("m", x) // SPSO 200
	e.produce("t", 0, 30, 1024)
	resp := e.fetch("m", FetchRequest{})
	require.Equal(t, []AcquiredRange{rng(200, 229, 1)}, acquired(t, resp, x))
	e.produce("t", 0, 40, 1024)
	resp = e.fetch("m", FetchRequest{MaxRecords: i32(25), Partitions: []PartitionEntry{ackEntry(x, batch(200, 214, AckAccept), batch(215, 229, AckRelease))}})
	p := part(t, resp, x)
	assert.Equal(t, apierr.None, p.AckErrorCode)
	assert.Equal(t, []AcquiredRange{rng(215, 229, 2), rng(230, 239, 1)}, p.Acquired)
	assert.Equal(t, int64(215), e.spso(x))
}

// Example 4: atomic rollback of a partition's batches.
func TestExample4AtomicRollback(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.produce("t", 0, 500, 10)
	e.open("m1", x)
	e.open("m2", x)
	e.produce("t", 0, 15, 10)
	require.Equal(t, []AcquiredRange{rng(500, 509, 1)}, acquired(t, e.fetch("m1", FetchRequest{MaxRecords: i32(10)}), x))
	require.Equal(t, []AcquiredRange{rng(510, 514, 1)}, acquired(t, e.fetch("m2", FetchRequest{MaxRecords: i32(10)}), x))
	before := e.state(x)
	r := e.ack("m1", ackEntry(x, batch(500, 504, AckAccept), batch(505, 512, AckAccept)))
	assert.Equal(t, apierr.InvalidRecordState, r.Partitions[0].ErrorCode)
	assert.Equal(t, before, e.state(x))
	assert.Equal(t, int64(500), e.spso(x))
	r = e.ack("m1", ackEntry(x, batch(500, 509, AckAccept)))
	assert.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
	assert.Equal(t, int64(510), e.spso(x))
}

// Example 5: replacement releases the old session's records (count - 1).
func TestExample5Replacement(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.produce("t", 0, 60, 10)
	e.open("m", x)
	e.produce("t", 0, 5, 10)
	for want := int32(1); want <= 3; want++ {
		require.Equal(t, []AcquiredRange{rng(60, 64, want)}, acquired(t, e.fetch("m", FetchRequest{}), x))
		if want < 3 {
			require.Equal(t, apierr.None, e.ack("m", ackEntry(x, batch(60, 64, AckRelease))).Partitions[0].ErrorCode)
		}
	}
	assert.Equal(t, "spso=60 [60-64 ACQUIRED(3)]", e.state(x))
	resp := e.open("m", x) // the client restarts
	assert.Equal(t, []AcquiredRange{rng(60, 64, 3)}, acquired(t, resp, x))
	_, next, _ := e.m.sessions.Lookup(keyOf("m"))
	assert.Equal(t, int32(1), next)
}

// Example 6: lock expiry and the delivery-count limit.
func TestExample6ExpiryAndLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.update(GroupConfig{DeliveryCountLimit: i32(3), RecordLockDurationMs: i32(2000)})
		e.produce("t", 0, 80, 10)
		e.open("m1", x)
		e.open("m2", x)
		e.produce("t", 0, 2, 10)
		require.Equal(t, []AcquiredRange{rng(80, 81, 1)}, acquired(t, e.fetch("m1", FetchRequest{}), x))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, "spso=80 [80-81 AVAILABLE(1)]", e.state(x))
		require.Equal(t, []AcquiredRange{rng(80, 81, 2)}, acquired(t, e.fetch("m2", FetchRequest{}), x))
		r := e.ack("m2", ackEntry(x, batch(80, 80, AckAccept), batch(81, 81, AckRelease)))
		require.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
		assert.Equal(t, "spso=81 [81-81 AVAILABLE(2)]", e.state(x))
		require.Equal(t, []AcquiredRange{rng(81, 81, 3)}, acquired(t, e.fetch("m1", FetchRequest{}), x))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, "spso=82", e.state(x))
		e.produce("t", 0, 1, 10)
		// 81 is never sent again: the next fetch gets only the new record.
		assert.Equal(t, []AcquiredRange{rng(82, 82, 1)}, acquired(t, e.fetch("m2", FetchRequest{}), x))
	})
}

// Example 7: a purge moves SPSO; overtaken ACQUIRED records stay with their
// owner and end ARCHIVED.
func TestExample7Purge(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	ctx := context.Background()
	e.produce("t", 0, 300, 10)
	for _, m := range []string{"m1", "m2", "mx", "my", "mz"} {
		e.open(m, x)
	}
	e.produce("t", 0, 60, 10) // 300..359
	req := FetchRequest{MaxRecords: i32(10)}
	require.Equal(t, []AcquiredRange{rng(300, 309, 1)}, acquired(t, e.fetch("m1", req), x))
	require.Equal(t, []AcquiredRange{rng(310, 319, 1)}, acquired(t, e.fetch("mx", req), x))
	require.Equal(t, []AcquiredRange{rng(320, 329, 1)}, acquired(t, e.fetch("my", req), x))
	require.Equal(t, apierr.None, e.ack("my", ackEntry(x, batch(320, 329, AckAccept))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(330, 339, 1)}, acquired(t, e.fetch("m2", req), x))
	require.Equal(t, apierr.None, e.ack("mx", ackEntry(x, batch(310, 319, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, []AcquiredRange{rng(310, 319, 2)}, acquired(t, e.fetch("mx", req), x))
	require.Equal(t, apierr.None, e.ack("mx", ackEntry(x, batch(310, 319, AckRelease))).Partitions[0].ErrorCode)
	require.Equal(t, "spso=300 [300-309 ACQUIRED(1)] [310-319 AVAILABLE(2)] [320-329 ACKNOWLEDGED(0)] [330-339 ACQUIRED(1)]", e.state(x))

	_, err := e.store.DeleteRecordsBefore(ctx, "t", 0, 315)
	require.NoError(t, err)
	assert.Equal(t, "spso=315 [315-319 AVAILABLE(2)] [320-329 ACKNOWLEDGED(0)] [330-339 ACQUIRED(1)] below[300-309 ACQUIRED(1)]", e.state(x))
	require.Equal(t, apierr.None, e.ack("m1", ackEntry(x, batch(300, 309, AckAccept))).Partitions[0].ErrorCode)
	assert.Equal(t, "spso=315 [315-319 AVAILABLE(2)] [320-329 ACKNOWLEDGED(0)] [330-339 ACQUIRED(1)]", e.state(x))
	resp := e.fetch("mz", FetchRequest{})
	assert.Equal(t, []AcquiredRange{rng(315, 319, 3), rng(340, 359, 1)}, acquired(t, resp, x))
}
