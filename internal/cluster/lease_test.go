package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharelog/sharelog/internal/storage/jetstream/jstest"
)

var testCluster *jstest.Cluster

// The tests share one JetStream cluster; once it is shut down, nothing
// they started (connections, watchers, loops) may still run.
func TestMain(m *testing.M) {
	jstest.Main(m, jstest.Options{SyncAlways: true}, func(c *jstest.Cluster) { testCluster = c })
}

func openLease(t *testing.T, prefix, id string) *Lease {
	t.Helper()
	nc := testCluster.Connect(t)
	l, err := Open(context.Background(), nc, Options{Prefix: prefix, TTL: time.Second, InstanceID: id, AdvertiseAddr: id + ":9090"})
	require.NoError(t, err)
	return l
}

// waitRole steps l until it has role r or the deadline passes.
func waitRole(t *testing.T, l *Lease, r Role, within time.Duration) Status {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.Step(context.Background())
		if st := l.Status(); st.Role == r {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after %v, want %v", l.self.ID, l.Status().Role, within, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOneActiveOthersFollow(t *testing.T) {
	prefix := testCluster.Prefix()
	a, b := openLease(t, prefix, "a"), openLease(t, prefix, "b")
	sa := waitRole(t, a, Active, 5*time.Second)
	require.NotZero(t, sa.Epoch)
	sb := waitRole(t, b, Standby, 5*time.Second)
	require.Equal(t, Holder{ID: "a", Addr: "a:9090"}, sb.Holder)

	// Renewals keep a active past several TTLs, with a new epoch each time.
	for range 6 {
		time.Sleep(250 * time.Millisecond)
		a.Step(context.Background())
		b.Step(context.Background())
		require.Equal(t, Active, a.Status().Role)
		require.Equal(t, Standby, b.Status().Role)
	}
	require.Greater(t, a.Status().Epoch, sa.Epoch)
}

func TestExpiredLeaseIsTakenAndOldHolderDeposed(t *testing.T) {
	prefix := testCluster.Prefix()
	a, b := openLease(t, prefix, "a"), openLease(t, prefix, "b")
	old := waitRole(t, a, Active, 5*time.Second)
	// a stops renewing (a paused process); b takes the lease once it expires.
	start := time.Now()
	sb := waitRole(t, b, Active, 5*time.Second)
	require.Less(t, time.Since(start), 3*time.Second, "takeover after TTL")
	require.Greater(t, sb.Epoch, old.Epoch)
	// a wakes up past its stop deadline: it stops serving without trying,
	// then follows b.
	a.Step(context.Background())
	require.Equal(t, Disconnected, a.Status().Role)
	a.Step(context.Background())
	require.Equal(t, Status{Role: Standby, Holder: Holder{ID: "b", Addr: "b:9090"}, Term: sb.Term}, a.Status())
}

func TestStaleRenewalIsRefused(t *testing.T) {
	prefix := testCluster.Prefix()
	a, b := openLease(t, prefix, "a"), openLease(t, prefix, "b")
	old := waitRole(t, a, Active, 5*time.Second)
	waitRole(t, b, Active, 5*time.Second) // after a's lease expired
	// a renews with its old revision (a process whose clock says it still
	// holds the lease): the compare-and-set refuses it.
	a.mu.Lock()
	a.renewed = a.o.Now()
	a.mu.Unlock()
	a.Step(context.Background())
	require.Equal(t, Standby, a.Status().Role)
	require.NotEqual(t, old.Epoch, b.Status().Epoch)
	b.Step(context.Background())
	require.Equal(t, Active, b.Status().Role, "b keeps the lease")
}

func TestFencedDropsActiveAtOnce(t *testing.T) {
	prefix := testCluster.Prefix()
	a := openLease(t, prefix, "a")
	st := waitRole(t, a, Active, 5*time.Second)
	a.Fenced(st.Epoch + 1) // a later term's fence: ignored
	a.Fenced(st.Epoch - 1) // an earlier term's fence: ignored
	require.Equal(t, Active, a.Status().Role)
	a.Step(context.Background()) // a renewal raises the revision, not the term
	require.Greater(t, a.Status().Epoch, st.Epoch)
	ch := a.Changed()
	a.Fenced(st.Epoch)
	<-ch
	require.Equal(t, Standby, a.Status().Role)
	// It does not adopt its own stale lease; it takes a new one after expiry.
	a.Step(context.Background())
	require.Equal(t, Standby, a.Status().Role)
	st2 := waitRole(t, a, Active, 5*time.Second)
	require.Greater(t, st2.Epoch, st.Epoch)
}

func TestReleaseHandsOverWithoutTTL(t *testing.T) {
	prefix := testCluster.Prefix()
	a, b := openLease(t, prefix, "a"), openLease(t, prefix, "b")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	for a.Status().Role != Active {
		<-a.Changed()
	}
	waitRole(t, b, Standby, 5*time.Second)
	cancel()
	<-done
	b.Step(context.Background()) // the key is gone: b creates it now
	require.Equal(t, Active, b.Status().Role)
}

func TestUnreachableActiveStopsServing(t *testing.T) {
	prefix := testCluster.Prefix()
	nc := testCluster.Connect(t)
	now := time.Now()
	clock := func() time.Time { return now }
	l, err := Open(context.Background(), nc, Options{Prefix: prefix, TTL: time.Second, InstanceID: "a", AdvertiseAddr: "a:1", Now: clock})
	require.NoError(t, err)
	// The take has TTL/4 (250 ms) to be acknowledged; on a loaded machine
	// (go test ./... on 2 cores) the first may time out. The fake clock
	// stands still, so stepping again changes nothing else.
	for deadline := time.Now().Add(10 * time.Second); l.Status().Role != Active && time.Now().Before(deadline); {
		l.Step(context.Background())
	}
	require.Equal(t, Active, l.Status().Role)
	nc.Close()
	now = now.Add(500 * time.Millisecond)
	l.Step(context.Background())
	require.Equal(t, Active, l.Status().Role, "within TTL minus margin")
	now = now.Add(400 * time.Millisecond)
	l.Step(context.Background())
	require.Equal(t, Disconnected, l.Status().Role, "past TTL minus margin")
}

func TestOptionsRefused(t *testing.T) {
	nc := testCluster.Connect(t)
	_, err := Open(context.Background(), nc, Options{Prefix: "P", TTL: 500 * time.Millisecond, InstanceID: "a", AdvertiseAddr: "a:1"})
	require.ErrorContains(t, err, "below the minimum")
	_, err = Open(context.Background(), nc, Options{Prefix: "P"})
	require.ErrorContains(t, err, "instance ID")
}

// A key that outlives its TTL (its holder stopped renewing but no expiry
// came) is taken over after twice the TTL without a new revision.
func TestStaleKeyIsTakenOver(t *testing.T) {
	prefix := testCluster.Prefix()
	nc := testCluster.Connect(t)
	now := time.Now()
	b, err := Open(context.Background(), nc, Options{Prefix: prefix, TTL: time.Minute, InstanceID: "b", AdvertiseAddr: "b:1",
		Now: func() time.Time { return now }})
	require.NoError(t, err)
	// A holder's key with no TTL at all: it never expires by itself.
	rev, err := b.kv.Create(context.Background(), leaseKey, []byte(`{"id":"a","addr":"a:1"}`))
	require.NoError(t, err)
	b.Step(context.Background())
	require.Equal(t, Status{Role: Standby, Holder: Holder{ID: "a", Addr: "a:1"}, Term: rev}, b.Status(), "a value without a term: its revision began it")
	now = now.Add(119 * time.Second)
	b.Step(context.Background())
	require.Equal(t, Standby, b.Status().Role, "not yet twice the TTL")
	now = now.Add(2 * time.Second)
	b.Step(context.Background())
	require.Equal(t, Active, b.Status().Role)
}

// The term numbers the holders: it is the revision the holder's term
// began at, the same through its renewals and at every follower, and
// higher for the next holder (docs/cluster.md "Kafka listener": the
// active-standby mode's leader epoch).
func TestTermStableAcrossRenewalsAndGrowsWithNextHolder(t *testing.T) {
	prefix := testCluster.Prefix()
	a, b := openLease(t, prefix, "a"), openLease(t, prefix, "b")
	sa := waitRole(t, a, Active, 5*time.Second)
	require.Equal(t, sa.Epoch, sa.Term, "a term begins at the create's revision")
	sb := waitRole(t, b, Standby, 5*time.Second)
	require.Equal(t, sa.Term, sb.Term, "read before any renewal")
	for range 4 {
		time.Sleep(250 * time.Millisecond)
		a.Step(context.Background())
		b.Step(context.Background())
	}
	require.Greater(t, a.Status().Epoch, sa.Epoch, "renewed")
	require.Equal(t, sa.Term, a.Status().Term, "renewals keep the term")
	require.Equal(t, sa.Term, b.Status().Term, "the follower reads the term from a renewal")
	// a stops renewing: b's term is higher.
	nb := waitRole(t, b, Active, 5*time.Second)
	require.Greater(t, nb.Term, sa.Term)
	a.Step(context.Background())
	a.Step(context.Background())
	require.Equal(t, Status{Role: Standby, Holder: Holder{ID: "b", Addr: "b:9090"}, Term: nb.Term}, a.Status())
}
