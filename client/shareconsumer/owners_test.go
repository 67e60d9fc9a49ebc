package shareconsumer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/sharelog/sharelog/client/router"
)

func TestShareOut(t *testing.T) {
	t.Parallel()
	require.Equal(t, []int{167, 167, 166}, shareOut(500, 3, 0))
	require.Equal(t, []int{166, 167, 167}, shareOut(500, 3, 1))
	require.Equal(t, []int{0, 1, 0}, shareOut(1, 3, 4))
	require.Empty(t, shareOut(10, 0, 0))
}

// wantAll is every record of fc by partition, for ackLog.requireAllAcceptedOnce.
func (fc *fakeCluster) wantAll() map[TopicPartition]int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	out := map[TopicPartition]int{}
	for p, rs := range fc.recs {
		out[TopicPartition{Topic: fc.topic, Partition: p}] = len(rs)
	}
	return out
}

// pollAll polls (accepting implicitly) until n records were returned,
// none twice and no Poll more than maxRecords.
func pollAll(t *testing.T, c *Consumer, n, maxRecords int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	seen := map[recordKey]bool{}
	for len(seen) < n {
		recs, err := c.Poll(ctx)
		require.NoError(t, err, "after %d of %d records", len(seen), n)
		require.LessOrEqual(t, len(recs), maxRecords)
		for _, r := range recs {
			k := recordKey{tp: r.TopicPartition(), offset: r.Offset}
			require.False(t, seen[k], "%v delivered twice", k)
			seen[k] = true
		}
	}
	_, err := c.Commit(ctx)
	require.NoError(t, err)
}

// A consumer given one instance's connection and a way to dial the
// others fetches every partition from its owner, one session per owner,
// and never asks an instance for a partition it does not own.
func TestOneSessionPerOwner(t *testing.T) {
	t.Parallel()
	for _, byRouter := range []bool{false, true} {
		name := "Config.Dial"
		if byRouter {
			name = "router.Conn"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fc := startFakeCluster(t, "t", 6, "a", "b", "c")
			fc.produce(20)
			acks := newAckLog()
			cfg := Config{GroupID: "g", Topics: []string{"t"}, MaxRecords: 30, OnAcknowledgement: acks.hook}
			var cc grpc.ClientConnInterface = dial(t, fc.inst("a").addr)
			if byRouter {
				rc := router.New(cc, fc.dial(t), router.Options{})
				t.Cleanup(func() { _ = rc.Close() })
				cc = rc
			} else {
				cfg.Dial = fc.dial(t)
			}
			c := newConsumer(t, cc, cfg)
			pollAll(t, c, fc.total(), 30)
			fc.requireAcceptedOnce(t)
			acks.requireAllAcceptedOnce(t, fc.wantAll())
			require.Empty(t, acks.failed)

			fc.mu.Lock()
			defer fc.mu.Unlock()
			require.Zero(t, fc.notOwned, "an instance was asked for a partition it does not own")
			for _, in := range fc.insts {
				require.Contains(t, in.sessions, c.MemberID(), "no session on %s", in.id)
			}
			require.Len(t, c.sessions, 3)
		})
	}
}

// A Poll over several owners waits for all of them at once (their long
// polls overlap), not once per owner.
func TestPollWaitsOnceForAllOwners(t *testing.T) {
	t.Parallel()
	fc := startFakeCluster(t, "t", 3, "a", "b", "c")
	c := newConsumer(t, dial(t, fc.inst("a").addr), Config{GroupID: "g", Topics: []string{"t"}, Dial: fc.dial(t), MaxWait: 300 * time.Millisecond})
	_, err := c.Poll(t.Context()) // joins, opens the sessions
	require.NoError(t, err)
	for range 3 {
		fc.mu.Lock()
		fc.waits = nil
		fc.mu.Unlock()
		recs, err := c.Poll(t.Context())
		require.NoError(t, err)
		require.Empty(t, recs)
		fc.mu.Lock()
		waits := fc.waits
		fc.mu.Unlock()
		require.Len(t, waits, 3, "one long poll per owner")
		insts := map[string]bool{}
		for _, w := range waits {
			insts[w.inst] = true
			require.True(t, w.start.Before(waits[0].end), "the long polls overlap: %v", waits)
		}
		require.Len(t, insts, 3)
	}
	fc.produce(1)
	recs := pollN(t, c, 3)
	require.Len(t, recs, 3)
}

// Without a way to reach the other instances, the consumer keeps one
// session on its connection: it consumes that instance's partitions, and
// the others are logged and asked for again later, not failed.
func TestWithoutDialOnlyTheSeedsPartitions(t *testing.T) {
	t.Parallel()
	fc := startFakeCluster(t, "t", 4, "a", "b")
	fc.produce(5)
	c := newConsumer(t, dial(t, fc.inst("a").addr), Config{GroupID: "g", Topics: []string{"t"}})
	seen := map[recordKey]bool{}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		recs, err := c.Poll(t.Context())
		require.NoError(t, err)
		for _, r := range recs {
			require.Contains(t, []int32{0, 2}, r.Partition, "a owns 0 and 2")
			seen[recordKey{tp: r.TopicPartition(), offset: r.Offset}] = true
		}
	}
	require.Len(t, seen, 10)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	require.Positive(t, fc.notOwned)
	require.Zero(t, fc.inst("b").fetches)
}

// When a partition moves, the consumer follows it to its new owner; what
// the old owner delivered can no longer be acknowledged (ErrSessionEnded)
// and is delivered again; nothing is accepted twice.
func TestFollowsAMovedPartition(t *testing.T) {
	t.Parallel()
	fc := startFakeCluster(t, "t", 4, "a", "b") // b owns 1 and 3
	fc.produce(10)
	acks := newAckLog()
	c := newConsumer(t, dial(t, fc.inst("a").addr), Config{GroupID: "g", Topics: []string{"t"}, Dial: fc.dial(t),
		AckMode: AckExplicit, MaxRecords: 8, OnAcknowledgement: acks.hook})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// Hold two records of partition 1, delivered by b.
	var kept []Record
	for len(kept) < 2 {
		recs, err := c.Poll(ctx)
		require.NoError(t, err)
		for _, r := range recs {
			if r.Partition == 1 && len(kept) < 2 {
				kept = append(kept, r)
				continue
			}
			require.NoError(t, c.Acknowledge(r, Accept))
		}
	}
	fc.move(1, "a")
	// One acknowledged before the consumer hears of the move: it goes to b,
	// which refuses it.
	require.NoError(t, c.Acknowledge(kept[0], Accept))
	for acks.acceptedCount() < fc.total() {
		recs, err := c.Poll(ctx)
		require.NoError(t, err)
		acceptAll(t, c, recs)
	}
	_, err := c.Commit(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, c.Acknowledge(kept[1], Accept), ErrSessionEnded)

	fc.requireAcceptedOnce(t)
	acks.requireAllAcceptedOnce(t, fc.wantAll())
	var ended bool
	for _, f := range acks.failed {
		if f.TopicPartition == kept[0].TopicPartition() && f.Err == ErrSessionEnded && f.Ranges[0].FirstOffset == kept[0].Offset {
			ended = true
		}
	}
	require.True(t, ended, "the acknowledgement sent to the old owner is reported ErrSessionEnded: %v", acks.failed)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	require.Equal(t, 2, fc.recs[1][kept[1].Offset].delivered, "released by the old owner, delivered again by the new")
}

// An owner that stops answering: its partitions are followed to their new
// owner once the view says so.
func TestFollowsPartitionsOfAStoppedOwner(t *testing.T) {
	t.Parallel()
	fc := startFakeCluster(t, "t", 4, "a", "b")
	fc.produce(10)
	acks := newAckLog()
	c := newConsumer(t, dial(t, fc.inst("a").addr), Config{GroupID: "g", Topics: []string{"t"}, Dial: fc.dial(t),
		MaxRecords: 4, OnAcknowledgement: acks.hook})
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	_ = pollN(t, c, 8)

	fc.inst("b").srv.Stop()
	fc.move(1, "a")
	fc.move(3, "a")
	for acks.acceptedCount() < fc.total() {
		_, err := c.Poll(ctx)
		require.NoError(t, err)
	}
	fc.requireAcceptedOnce(t)
	acks.requireAllAcceptedOnce(t, fc.wantAll())
	require.NotContains(t, c.sessions, fc.inst("b").addr, "the stopped owner's session was retired")
}

// Outside a partitioned cluster a dialer is never used: one session on
// the given connection, as without it. Both a server that says it owns
// everything ("single") and one without DescribeCluster.
func TestDialUnusedOutsidePartitionedMode(t *testing.T) {
	t.Parallel()
	for _, viaProxy := range []bool{false, true} {
		name := "single"
		if viaProxy {
			name = "no DescribeCluster"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.createTopic("t", 2)
			e.configureGroup("g", 30*time.Second)
			e.produce("t", 0, 0, 5)
			e.produce("t", 1, 0, 5)
			var cc grpc.ClientConnInterface = e.conn
			var p *proxy
			if viaProxy {
				p, cc = startProxy(t, e)
			}
			dialled := 0
			acks := newAckLog()
			c := newConsumer(t, cc, Config{GroupID: "g", Topics: []string{"t"}, OnAcknowledgement: acks.hook,
				Dial: func(string) (grpc.ClientConnInterface, error) { dialled++; return nil, errors.New("not expected") }})
			pollAll(t, c, 10, DefaultMaxRecords)
			acks.requireAllAcceptedOnce(t, map[TopicPartition]int{{Topic: "t", Partition: 0}: 5, {Topic: "t", Partition: 1}: 5})
			require.Zero(t, dialled)
			require.Empty(t, c.sessions)
			require.True(t, c.view.read)
			if p != nil {
				require.Equal(t, int32(0), p.fetchEpochs()[0], "the session went through the given connection")
			}
		})
	}
}
