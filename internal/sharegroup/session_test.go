package sharegroup

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/apierr"
)

// Static validation fails the whole request with
// INVALID_REQUEST, changes nothing and does not consume the epoch.
func TestFetchStaticValidation(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 2)
	x, y := tp("t", 0), tp("t", 1)
	e.produce("t", 0, 5, 10)
	e.update(GroupConfig{AutoOffsetReset: str("earliest")})
	e.open("m", x) // holds 0..4
	state := e.state(x)
	acks := func(bs ...AckBatch) []PartitionEntry { return []PartitionEntry{ackEntry(x, bs...)} }
	for _, tc := range []struct {
		name string
		req  FetchRequest // epoch 1 unless set
	}{
		{"empty group id", FetchRequest{GroupID: "-"}},
		{"group id too long", FetchRequest{GroupID: strings.Repeat("g", 250)}},
		{"empty member id", FetchRequest{MemberID: "-"}},
		{"member id too long", FetchRequest{MemberID: strings.Repeat("m", 37)}},
		{"epoch below -1", FetchRequest{Epoch: -2}},
		{"negative max_wait_ms", FetchRequest{MaxWaitMs: -1}},
		{"negative min_bytes", FetchRequest{MinBytes: -1}},
		{"negative max_bytes", FetchRequest{MaxBytes: i32(-1)}},
		{"negative max_records", FetchRequest{MaxRecords: i32(-1)}},
		{"negative batch_size", FetchRequest{BatchSize: -1}},
		{"duplicate partition", FetchRequest{Partitions: entries(y, y)}},
		{"duplicate forgotten", FetchRequest{Forgotten: []TopicPartition{y, y}}},
		{"first after last", FetchRequest{Partitions: acks(AckBatch{FirstOffset: 3, LastOffset: 2, Types: []AckType{AckAccept}})}},
		{"negative first offset", FetchRequest{Partitions: acks(AckBatch{FirstOffset: -1, LastOffset: 2, Types: []AckType{AckAccept}})}},
		{"no types", FetchRequest{Partitions: acks(AckBatch{FirstOffset: 0, LastOffset: 2})}},
		{"types count mismatch", FetchRequest{Partitions: acks(AckBatch{FirstOffset: 0, LastOffset: 2, Types: []AckType{AckAccept, AckAccept}})}},
		{"unspecified type", FetchRequest{Partitions: acks(batch(0, 1, AckUnspecified))}},
		{"unknown type", FetchRequest{Partitions: acks(batch(0, 1, AckType(9)))}},
		{"unspecified among per-offset types", FetchRequest{Partitions: acks(AckBatch{FirstOffset: 0, LastOffset: 1, Types: []AckType{AckAccept, AckUnspecified}})}},
		{"renew without is_renew_ack", FetchRequest{Partitions: acks(batch(0, 1, AckRenew))}},
		{"overlapping batches", FetchRequest{Partitions: acks(batch(0, 2, AckAccept), batch(2, 3, AckAccept))}},
		{"descending batches", FetchRequest{Partitions: acks(batch(3, 4, AckAccept), batch(0, 1, AckAccept))}},
		{"acks at epoch 0", FetchRequest{Epoch: 0, Partitions: acks(batch(0, 1, AckAccept))}},
		{"is_renew_ack at epoch 0", FetchRequest{Epoch: 0, IsRenewAck: true}},
		{"forget at epoch -1", FetchRequest{Epoch: -1, Forgotten: []TopicPartition{x}}},
		{"add at epoch -1", FetchRequest{Epoch: -1, Partitions: entries(y)}},
		{"is_renew_ack with max_wait_ms", FetchRequest{IsRenewAck: true, MaxWaitMs: 1}},
		{"is_renew_ack with min_bytes", FetchRequest{IsRenewAck: true, MinBytes: 1}},
		{"is_renew_ack with max_bytes", FetchRequest{IsRenewAck: true, MaxBytes: i32(1)}},
		{"is_renew_ack with max_records", FetchRequest{IsRenewAck: true, MaxRecords: i32(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			switch req.GroupID {
			case "":
				req.GroupID = testGroup
			case "-":
				req.GroupID = ""
			}
			switch req.MemberID {
			case "":
				req.MemberID = "m"
			case "-":
				req.MemberID = ""
			}
			if req.Epoch == 0 && !strings.Contains(tc.name, "epoch 0") {
				req.Epoch = 1
			}
			_, err := e.m.ShareFetch(context.Background(), req)
			re := reqErr(err)
			require.NotNil(t, re, "%v", err)
			assert.Equal(t, apierr.InvalidRequest, re.Reason)
			_, next, ok := e.m.sessions.Lookup(keyOf("m"))
			require.True(t, ok, "the session is untouched")
			assert.Equal(t, int32(1), next, "the epoch is not consumed")
			assert.Equal(t, state, e.state(x), "nothing applied")
		})
	}
	// Valid batches of ascending, per-offset types pass.
	resp := e.fetch("m", FetchRequest{Partitions: acks(AckBatch{FirstOffset: 0, LastOffset: 1, Types: []AckType{AckAccept, AckRelease}}, batch(2, 4, AckAccept))})
	assert.Equal(t, apierr.None, part(t, resp, x).AckErrorCode)
}

func TestAckStaticValidation(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	x := tp("t", 0)
	e.open("m", x)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		req    AckRequest
		reason apierr.Reason
	}{
		{"bad member", AckRequest{GroupID: testGroup, Epoch: 1}, apierr.InvalidRequest},
		{"epoch below -1", AckRequest{GroupID: testGroup, MemberID: "m", Epoch: -5}, apierr.InvalidRequest},
		{"duplicate partition", AckRequest{GroupID: testGroup, MemberID: "m", Epoch: 1, Partitions: entries(x, x)}, apierr.InvalidRequest},
		{"malformed batch", AckRequest{GroupID: testGroup, MemberID: "m", Epoch: 1, Partitions: []PartitionEntry{ackEntry(x, batch(2, 1, AckAccept))}}, apierr.InvalidRequest},
		{"renew without flag", AckRequest{GroupID: testGroup, MemberID: "m", Epoch: 1, Partitions: []PartitionEntry{ackEntry(x, batch(1, 1, AckRenew))}}, apierr.InvalidRequest},
		// Epoch 0 never opens a session, and is refused before any lookup.
		{"epoch 0", AckRequest{GroupID: testGroup, MemberID: "m", Epoch: 0}, apierr.InvalidShareSessionEpoch},
		{"epoch 0 without session", AckRequest{GroupID: testGroup, MemberID: "nobody", Epoch: 0}, apierr.InvalidShareSessionEpoch},
		{"no session", AckRequest{GroupID: testGroup, MemberID: "nobody", Epoch: 1}, apierr.ShareSessionNotFound},
		{"no session to close", AckRequest{GroupID: testGroup, MemberID: "nobody", Epoch: -1}, apierr.ShareSessionNotFound},
		{"wrong epoch", AckRequest{GroupID: testGroup, MemberID: "m", Epoch: 7}, apierr.InvalidShareSessionEpoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.m.ShareAcknowledge(ctx, tc.req)
			re := reqErr(err)
			require.NotNil(t, re, "%v", err)
			assert.Equal(t, tc.reason, re.Reason)
			_, next, _ := e.m.sessions.Lookup(keyOf("m"))
			assert.Equal(t, int32(1), next)
			_, _, ok := e.m.sessions.Lookup(keyOf("nobody"))
			assert.False(t, ok)
		})
	}
}

// The session step by epoch.
func TestSessionStep(t *testing.T) {
	ctx := context.Background()
	t.Run("incremental without session", func(t *testing.T) {
		e := newEnv(t, nil)
		_, err := e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 1})
		assert.Equal(t, apierr.ShareSessionNotFound, reqErr(err).Reason)
		_, err = e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: -1})
		assert.Equal(t, apierr.ShareSessionNotFound, reqErr(err).Reason)
	})
	t.Run("epoch 0 with acks leaves the existing session untouched", func(t *testing.T) {
		e := newEnv(t, func(o *testOpts) {})
		e.topic("t", 1)
		x := tp("t", 0)
		e.open("m", x)
		e.produce("t", 0, 3, 1)
		e.fetch("m", FetchRequest{})
		_, err := e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Partitions: []PartitionEntry{ackEntry(x, batch(0, 2, AckAccept))}})
		assert.Equal(t, apierr.InvalidRequest, reqErr(err).Reason)
		assert.Equal(t, "spso=0 [0-2 ACQUIRED(1)]", e.state(x))
		_, next, _ := e.m.sessions.Lookup(keyOf("m"))
		assert.Equal(t, int32(2), next)
	})
	t.Run("epoch -1 closes after its acks and releases the rest", func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 2)
		x, y := tp("t", 0), tp("t", 1)
		e.open("m", x, y)
		e.produce("t", 0, 10, 1)
		e.produce("t", 1, 10, 1)
		resp := e.fetch("m", FetchRequest{})
		require.Len(t, resp.Partitions, 2)
		resp, err := e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: -1,
			Partitions: []PartitionEntry{ackEntry(x, batch(0, 4, AckAccept))}})
		require.NoError(t, err)
		require.Len(t, resp.Partitions, 1, "only the partitions that carried acks")
		assert.Equal(t, apierr.None, resp.Partitions[0].AckErrorCode)
		assert.Empty(t, resp.Partitions[0].Records)
		assert.Equal(t, "spso=5 [5-9 AVAILABLE(0)]", e.state(x))
		assert.Equal(t, "spso=0 [0-9 AVAILABLE(0)]", e.state(y))
		_, _, ok := e.m.sessions.Lookup(keyOf("m"))
		assert.False(t, ok)
		_, err = e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 2})
		assert.Equal(t, apierr.ShareSessionNotFound, reqErr(err).Reason)
	})
	t.Run("ShareAcknowledge epoch -1 closes", func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.open("m", x)
		e.produce("t", 0, 10, 1)
		e.fetch("m", FetchRequest{})
		r, err := e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: "m", Epoch: -1,
			Partitions: []PartitionEntry{ackEntry(x, batch(0, 1, AckReject))}})
		require.NoError(t, err)
		assert.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
		assert.Equal(t, "spso=2 [2-9 AVAILABLE(0)]", e.state(x))
		_, _, ok := e.m.sessions.Lookup(keyOf("m"))
		assert.False(t, ok)
	})
	t.Run("add then forget", func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 3)
		a, b, c := tp("t", 0), tp("t", 1), tp("t", 2)
		e.open("m", a)
		resp := e.fetch("m", FetchRequest{Partitions: entries(b, c), Forgotten: []TopicPartition{a, c}})
		// b was added (reported); c was added and forgotten: gone.
		assert.True(t, hasPart(resp, b))
		assert.False(t, hasPart(resp, c))
		s, _, _ := e.m.sessions.Lookup(keyOf("m"))
		s.Mu.Lock()
		var names []TopicPartition
		for _, p := range s.State.parts {
			names = append(names, p.tp)
		}
		s.Mu.Unlock()
		assert.Equal(t, []TopicPartition{b}, names)
	})
}

// Two requests with the same epoch: exactly one is admitted.
func TestConcurrentSameEpoch(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 1)
	e.open("m", tp("t", 0))
	var ok, stale atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 1})
			if err == nil {
				ok.Add(1)
			} else if reqErr(err).Reason == apierr.InvalidShareSessionEpoch {
				stale.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), ok.Load())
	assert.Equal(t, int32(15), stale.Load())
}

// ShareFetch and ShareAcknowledge share the sequence; the
// acknowledged partition need not be in the session.
func TestAckOutsideSession(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 2)
	x, y := tp("t", 0), tp("t", 1)
	e.open("m", x, y)
	e.produce("t", 1, 4, 1)
	resp := e.fetch("m", FetchRequest{Forgotten: []TopicPartition{y}})
	assert.False(t, hasPart(resp, y))
	e.fetch("m", FetchRequest{Partitions: entries(y)})
	e.fetch("m", FetchRequest{Forgotten: []TopicPartition{y}})
	r := e.ack("m", ackEntry(y, batch(0, 3, AckAccept)), PartitionEntry{TopicPartition: x})
	assert.Equal(t, apierr.None, r.Partitions[0].ErrorCode)
	assert.Equal(t, apierr.None, r.Partitions[1].ErrorCode, "an entry without batches")
	assert.Equal(t, "spso=4", e.state(y))
}

// A session's end releases what it holds in every share-partition
// of the group (count - 1), even partitions no longer in its set.
func TestSessionEndReleasesEverywhere(t *testing.T) {
	e := newEnv(t, nil)
	e.topic("t", 2)
	x, y := tp("t", 0), tp("t", 1)
	e.open("m", x, y)
	e.produce("t", 0, 3, 1)
	e.produce("t", 1, 3, 1)
	e.fetch("m", FetchRequest{})
	e.fetch("m", FetchRequest{Forgotten: []TopicPartition{y}})
	assert.Equal(t, "spso=0 [0-2 ACQUIRED(1)]", e.state(y))
	e.open("m", x) // replaced
	assert.Equal(t, "spso=0 [0-2 AVAILABLE(0)]", e.state(y))
	// The new session does not own the old one's records.
	e.fetch("m", FetchRequest{Forgotten: []TopicPartition{x}}) // x re-acquired by the open; forget it
	r := e.ack("m", ackEntry(y, batch(0, 2, AckAccept)))
	assert.Equal(t, apierr.InvalidRecordState, r.Partitions[0].ErrorCode)
}

// The cache holds --max-share-sessions; a full cache evicts idle
// sessions, else holds the request max_wait_ms and refuses it.
func TestSessionLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(o *testOpts) {
			o.MaxShareSessions = 2
			o.GroupMaxSize = 2
			o.SessionIdleTimeout = time.Minute
		})
		e.topic("t", 1)
		x := tp("t", 0)
		e.produce("t", 0, 10, 1)
		e.update(GroupConfig{AutoOffsetReset: str("earliest"), RecordLockDurationMs: i32(3600000)})
		e.open("a", x) // holds 0..9
		e.open("b", x)
		start := time.Now()
		_, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "c", MaxWaitMs: 250, Partitions: entries(x)})
		re := reqErr(err)
		require.NotNil(t, re)
		assert.Equal(t, apierr.ShareSessionLimitReached, re.Reason)
		assert.Equal(t, "2", re.Metadata["max_sessions"])
		assert.Equal(t, 250*time.Millisecond, time.Since(start))
		// A refused request changes nothing: no group is created.
		_, err = e.m.ShareFetch(context.Background(), FetchRequest{GroupID: "other", MemberID: "c", Partitions: entries(x)})
		assert.Equal(t, apierr.ShareSessionLimitReached, reqErr(err).Reason)
		_, err = e.m.GetConfig(context.Background(), "other")
		assert.Equal(t, apierr.GroupIDNotFound, reqErr(err).Reason)
		// Replacing needs no slot.
		e.open("b", x)
		time.Sleep(time.Minute)
		// a and b are idle past the timeout: a new session evicts them (or
		// the sweeper already did), releasing a's records.
		resp := e.open("c", x)
		assert.Equal(t, []AcquiredRange{rng(0, 9, 1)}, acquired(t, resp, x))
	})
}

// Idle eviction releases records; a session with a request in flight is
// never evicted.
func TestIdleEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(o *testOpts) { o.SessionIdleTimeout = 10 * time.Second })
		e.topic("t", 1)
		x := tp("t", 0)
		e.open("idle", x)
		e.open("busy", x)
		e.produce("t", 0, 5, 1)
		e.fetch("idle", FetchRequest{})
		done := make(chan FetchResponse)
		go func() {
			resp, err := e.m.ShareFetch(context.Background(), FetchRequest{GroupID: testGroup, MemberID: "busy", Epoch: 1, MaxWaitMs: 60000})
			assert.NoError(t, err)
			done <- resp
		}()
		time.Sleep(11 * time.Second)
		synctest.Wait()
		_, _, ok := e.m.sessions.Lookup(keyOf("idle"))
		assert.False(t, ok, "evicted")
		resp := <-done // woken by the release of idle's records
		assert.Equal(t, []AcquiredRange{rng(0, 4, 1)}, acquired(t, resp, x))
		_, _, ok = e.m.sessions.Lookup(keyOf("busy"))
		assert.True(t, ok)
		time.Sleep(11 * time.Second)
		synctest.Wait()
		_, _, ok = e.m.sessions.Lookup(keyOf("busy"))
		assert.False(t, ok, "evicted 10s after its last request completed")
		assert.Equal(t, "spso=0 [0-4 AVAILABLE(0)]", e.state(x))
	})
}

// A long-polling request keeps running while the next epoch is
// admitted; a close of the session completes it with no records.
func TestOverlappingRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		e.topic("t", 1)
		x := tp("t", 0)
		e.open("m", x)
		ctx := context.Background()
		ch := make(chan FetchResponse, 1)
		go func() {
			resp, err := e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 1, MaxWaitMs: 5000})
			assert.NoError(t, err)
			ch <- resp
		}()
		synctest.Wait()
		resp, err := e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 2})
		require.NoError(t, err)
		assert.Empty(t, resp.Partitions)
		e.produce("t", 0, 2, 1)
		assert.Equal(t, []AcquiredRange{rng(0, 1, 1)}, acquired(t, <-ch, x))

		go func() {
			resp, err := e.m.ShareFetch(ctx, FetchRequest{GroupID: testGroup, MemberID: "m", Epoch: 3, MaxWaitMs: 5000})
			assert.NoError(t, err)
			ch <- resp
		}()
		synctest.Wait()
		start := time.Now()
		_, err = e.m.ShareAcknowledge(ctx, AckRequest{GroupID: testGroup, MemberID: "m", Epoch: -1,
			Partitions: []PartitionEntry{ackEntry(x, batch(0, 0, AckAccept))}})
		require.NoError(t, err)
		assert.Empty(t, (<-ch).Partitions)
		assert.Zero(t, time.Since(start))
		assert.Equal(t, "spso=1 [1-1 AVAILABLE(0)]", e.state(x))
	})
}
