package shareconsumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

func TestPollAndAccept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("orders", 1)
	e.produce("orders", 0, 0, 5)
	e.configureGroup("g", 30*time.Second)
	acks := newAckLog()
	c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"orders"}, AckMode: AckExplicit, OnAcknowledgement: acks.hook, ClientID: "test"})
	require.Len(t, c.MemberID(), 36)

	recs := pollN(t, c, 5)
	require.Equal(t, seq(0, 4), offsets(recs))
	for i, r := range recs {
		assert.Equal(t, "orders", r.Topic)
		assert.EqualValues(t, 0, r.Partition)
		assert.EqualValues(t, i, r.Offset)
		assert.Equal(t, fmt.Sprintf("k-%d", i), string(r.Key))
		assert.Equal(t, fmt.Sprintf("v-%d", i), string(r.Value))
		assert.Equal(t, []Header{{Key: "i", Value: []byte(fmt.Sprint(i))}}, r.Headers)
		assert.WithinDuration(t, time.Now(), r.Timestamp, time.Minute)
		assert.EqualValues(t, 1, r.DeliveryCount)
	}
	assert.Equal(t, []TopicPartition{{Topic: "orders", Partition: 0}}, c.Assignment())

	acceptAll(t, c, recs)
	require.ErrorIs(t, c.Acknowledge(recs[0], Accept), ErrNotHeld, "already acknowledged")
	res, err := c.Commit(t.Context())
	require.NoError(t, err)
	// Five accepted offsets in a row travel as one range.
	require.Equal(t, []AckResult{{
		TopicPartition: TopicPartition{Topic: "orders", Partition: 0},
		Ranges:         []AckRange{{FirstOffset: 0, LastOffset: 4, Type: Accept}},
	}}, res)
	acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "orders", Partition: 0}: 5})

	res, err = c.Commit(t.Context())
	require.NoError(t, err)
	require.Nil(t, res, "nothing pending")

	other := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"orders"}})
	pollNothing(t, other, 300*time.Millisecond)

	e.produce("orders", 0, 5, 1)
	recs = pollN(t, c, 1)
	require.Equal(t, []int64{5}, offsets(recs))
}

func TestImplicitAcceptsOnNextPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 6)
	e.configureGroup("g", 30*time.Second)
	acks := newAckLog()
	c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, MaxRecords: 3, OnAcknowledgement: acks.hook})

	recs := pollN(t, c, 3)
	require.Equal(t, seq(0, 2), offsets(recs))
	require.NoError(t, c.Acknowledge(recs[1], Release)) // the others are accepted implicitly

	// The next fetch carries ACCEPT 0, RELEASE 1, ACCEPT 2; the release is
	// processed before acquiring, so offset 1 comes back in the same response.
	recs = pollN(t, c, 3)
	require.Equal(t, []int64{1, 3, 4}, offsets(recs))
	counts := map[int64]int32{}
	for _, r := range recs {
		counts[r.Offset] = r.DeliveryCount
	}
	require.Equal(t, map[int64]int32{1: 2, 3: 1, 4: 1}, counts)
	acks.mu.Lock()
	require.Len(t, acks.failed, 0)
	require.Equal(t, map[AckType]int64{Accept: 2, Release: 1}, acks.ok)
	acks.mu.Unlock()

	// Close accepts the last Poll's records.
	require.NoError(t, c.Close(t.Context()))
	acks.mu.Lock()
	require.EqualValues(t, 5, acks.ok[Accept])
	acks.mu.Unlock()

	c2 := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}})
	recs = pollN(t, c2, 1)
	require.Equal(t, []int64{5}, offsets(recs))
	pollNothing(t, c2, 200*time.Millisecond) // also accepts 5 implicitly
}

func TestExplicitModeKeepsUnacknowledgedRecordsLocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 6)
	e.configureGroup("g", 30*time.Second)
	c1 := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 3})
	c2 := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit})

	first := pollN(t, c1, 3)
	require.Equal(t, seq(0, 2), offsets(first))
	// Not acknowledged, not accepted: still locked by c1.
	require.Equal(t, seq(3, 5), offsets(pollN(t, c1, 3)))
	pollNothing(t, c2, 200*time.Millisecond)

	// Closing c1 ends its session: the server releases everything it held
	// without charging the delivery.
	require.NoError(t, c1.Close(t.Context()))
	recs := pollN(t, c2, 6)
	require.Equal(t, seq(0, 5), offsets(recs))
	for _, r := range recs {
		require.EqualValues(t, 1, r.DeliveryCount, "offset %d", r.Offset)
	}
	require.ErrorIs(t, c1.Acknowledge(first[0], Accept), ErrClosed)
}

func TestReleaseRedelivers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 3)
	e.configureGroup("g", 30*time.Second)
	acks := newAckLog()
	c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, OnAcknowledgement: acks.hook})

	recs := pollN(t, c, 3)
	for _, r := range recs {
		require.NoError(t, c.Acknowledge(r, Release))
	}
	res, err := c.Commit(t.Context())
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.Equal(t, []AckRange{{FirstOffset: 0, LastOffset: 2, Type: Release}}, res[0].Ranges)

	again := pollN(t, c, 3)
	require.Equal(t, seq(0, 2), offsets(again))
	for _, r := range again {
		require.EqualValues(t, 2, r.DeliveryCount)
	}
	require.ErrorIs(t, c.Acknowledge(recs[0], Accept), ErrNotHeld, "an earlier delivery")
	acceptAll(t, c, again)
	_, err = c.Commit(t.Context())
	require.NoError(t, err)
	acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: 3})
}

func TestRejectIsNeverRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 4)
	e.configureGroup("g", 200*time.Millisecond)
	c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit})

	recs := pollN(t, c, 4)
	require.NoError(t, c.Acknowledge(recs[0], Reject))
	require.NoError(t, c.Acknowledge(recs[1], Reject))
	require.NoError(t, c.Acknowledge(recs[2], Accept))
	require.NoError(t, c.Acknowledge(recs[3], Accept))
	res, err := c.Commit(t.Context())
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.Equal(t, []AckRange{{FirstOffset: 0, LastOffset: 1, Type: Reject}, {FirstOffset: 2, LastOffset: 3, Type: Accept}}, res[0].Ranges)

	// Well past the lock duration: nothing comes back, to anyone.
	other := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}})
	pollNothing(t, c, 400*time.Millisecond)
	pollNothing(t, other, 100*time.Millisecond)
}

func TestRenewKeepsTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 2)
	lock := 300 * time.Millisecond
	e.configureGroup("g", lock)
	acks := newAckLog()
	c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, OnAcknowledgement: acks.hook})
	other := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, MaxWait: 50 * time.Millisecond})

	recs := pollN(t, c, 2)
	start := time.Now()
	for i := 0; time.Since(start) < 3*lock; i++ {
		for _, r := range recs {
			require.NoError(t, c.Acknowledge(r, Renew))
		}
		if i%2 == 0 {
			res, err := c.Commit(t.Context())
			require.NoError(t, err)
			require.Len(t, res, 1)
			require.NoError(t, res[0].Err)
			require.Equal(t, []AckRange{{FirstOffset: 0, LastOffset: 1, Type: Renew}}, res[0].Ranges)
		} else {
			// Poll renews with ShareAcknowledge first (a renewing ShareFetch
			// would fetch nothing), then fetches.
			got, err := c.Poll(t.Context())
			require.NoError(t, err)
			require.Empty(t, got)
		}
		got, err := other.Poll(t.Context())
		require.NoError(t, err)
		require.Empty(t, offsets(got), "the renewed records must stay locked")
	}
	acceptAll(t, c, recs)
	res, err := c.Commit(t.Context())
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err, "still locked by c after %v", time.Since(start))
	acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: 2})
	acks.mu.Lock()
	require.Empty(t, acks.failed)
	acks.mu.Unlock()
}

func TestAcknowledgeErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 2)
	e.configureGroup("g", 200*time.Millisecond)
	c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit})

	require.ErrorIs(t, c.Acknowledge(Record{Topic: "t"}, Accept), ErrNotHeld)
	recs := pollN(t, c, 2)
	require.Error(t, c.Acknowledge(recs[0], AckType(9)))
	require.Error(t, c.Acknowledge(recs[0], 0))
	forged := recs[0]
	forged.seq++
	require.ErrorIs(t, c.Acknowledge(forged, Accept), ErrNotHeld)

	// Wait out the consumer's own estimate of the lock deadline (the lock is
	// 200 ms): that is what Acknowledge checks.
	c.mu.Lock()
	deadline := c.held[recordKey{tp: recs[0].TopicPartition(), offset: recs[0].Offset}].deadline
	c.mu.Unlock()
	require.False(t, deadline.IsZero(), "the record is held")
	time.Sleep(time.Until(deadline) + time.Millisecond)
	require.ErrorIs(t, c.Acknowledge(recs[0], Accept), ErrLockExpired)

	require.NoError(t, c.Close(t.Context()))
	require.NoError(t, c.Close(t.Context()), "Close twice")
	require.ErrorIs(t, c.Acknowledge(recs[1], Accept), ErrClosed)
	_, err := c.Poll(t.Context())
	require.ErrorIs(t, err, ErrClosed)
	_, err = c.Commit(t.Context())
	require.ErrorIs(t, err, ErrClosed)
}

func TestPollHonoursContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.configureGroup("g", time.Second)
	c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, MaxWait: 5 * time.Second})

	// The long poll is shortened to answer before the context's deadline.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	recs, err := c.Poll(ctx)
	require.NoError(t, err)
	require.Empty(t, recs)
	require.Less(t, time.Since(start), 2*time.Second)

	// Close interrupts a Poll in progress.
	done := make(chan error, 1)
	go func() {
		_, err := c.Poll(t.Context())
		done <- err
	}()
	e.awaitLongPolls(1) // the Poll's ShareFetch waits for records
	require.NoError(t, c.Close(t.Context()))
	require.ErrorIs(t, <-done, ErrClosed)
}

func TestSessionNotFoundReopensTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 3)
	e.configureGroup("g", 30*time.Second)
	acks := newAckLog()
	c := newConsumer(t, e.conn, Config{GroupID: "g", Topics: []string{"t"}, AckMode: AckExplicit, OnAcknowledgement: acks.hook})

	recs := pollN(t, c, 3)
	require.NoError(t, c.Acknowledge(recs[0], Accept)) // pending

	// The session ends behind the consumer's back (as on idle eviction):
	// its records are released.
	_, err := e.groups.ShareAcknowledge(t.Context(), &sharelogv1.ShareAcknowledgeRequest{
		GroupId: "g", MemberId: c.MemberID(), ShareSessionEpoch: -1,
	})
	require.NoError(t, err)

	// The next fetch gets SHARE_SESSION_NOT_FOUND: the pending ACCEPT is
	// dropped (reported), the session reopened, the records delivered again.
	again := pollN(t, c, 3)
	require.Equal(t, seq(0, 2), offsets(again))
	acks.mu.Lock()
	require.Len(t, acks.failed, 1)
	require.ErrorIs(t, acks.failed[0].Err, ErrSessionEnded)
	require.Equal(t, []AckRange{{FirstOffset: 0, LastOffset: 0, Type: Accept}}, acks.failed[0].Ranges)
	acks.mu.Unlock()
	require.ErrorIs(t, c.Acknowledge(recs[1], Accept), ErrSessionEnded, "a record of the old session")

	acceptAll(t, c, again)
	res, err := c.Commit(t.Context())
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: 3})
}

func TestSessionLimitIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *serverConfig) {
		c.MaxShareSessions = 1 // server-wide
		c.ShareGroupMaxSize = 1
	})
	e.createTopic("t", 1)
	e.produce("t", 0, 0, 2)
	e.configureGroup("g1", 30*time.Second)
	e.configureGroup("g2", 30*time.Second)
	c1 := newConsumer(t, e.conn, Config{GroupID: "g1", Topics: []string{"t"}, AckMode: AckExplicit, MaxRecords: 1})
	c2 := newConsumer(t, e.conn, Config{GroupID: "g2", Topics: []string{"t"}, AckMode: AckExplicit})
	require.Equal(t, []int64{0}, offsets(pollN(t, c1, 1)))

	done := make(chan []Record, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out []Record
		for len(out) < 2 && ctx.Err() == nil {
			recs, _ := c2.Poll(ctx) // SHARE_SESSION_LIMIT_REACHED is retried inside
			out = append(out, recs...)
		}
		done <- out
	}()
	e.awaitLongPolls(1)                       // c2's epoch-0 fetch waits for a session slot
	require.NoError(t, c1.Close(t.Context())) // frees the only session slot
	require.Equal(t, seq(0, 1), offsets(<-done))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	conn := dial(t, "127.0.0.1:1")
	_, err := New(nil, Config{GroupID: "g", Topics: []string{"t"}})
	require.Error(t, err)
	for name, cfg := range map[string]Config{
		"no group":       {Topics: []string{"t"}},
		"no topics":      {GroupID: "g"},
		"long member":    {GroupID: "g", Topics: []string{"t"}, MemberID: "0123456789012345678901234567890123456789"},
		"dup topic":      {GroupID: "g", Topics: []string{"t", "t"}},
		"neg records":    {GroupID: "g", Topics: []string{"t"}, MaxRecords: -1},
		"bad ack mode":   {GroupID: "g", Topics: []string{"t"}, AckMode: 7},
		"empty topic":    {GroupID: "g", Topics: []string{""}},
		"neg rq timeout": {GroupID: "g", Topics: []string{"t"}, RequestTimeout: -1},
	} {
		_, err := New(conn, cfg)
		require.Error(t, err, name)
	}
}
