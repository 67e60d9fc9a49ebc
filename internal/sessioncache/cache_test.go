package sessioncache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sharelog/sharelog/internal/principal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type state struct{ tag string }

type ended struct {
	mu   sync.Mutex
	list []string
}

func (e *ended) onEnd(s *Session[state], why EndReason) {
	e.mu.Lock()
	e.list = append(e.list, s.Key().Member+":"+why.String())
	e.mu.Unlock()
}

func (e *ended) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

func newCache(t *testing.T, capacity int, idle time.Duration) (*Cache[state], *ended) {
	var e ended
	c := New(Config[state]{Capacity: capacity, IdleTimeout: idle, OnEnd: e.onEnd})
	t.Cleanup(c.Close)
	return c, &e
}

func key(m string) Key { return Key{Group: "g", Member: m} }

func TestEpochSequence(t *testing.T) {
	c, _ := newCache(t, 10, 0)
	s, err := c.Open(context.Background(), key("m"), 0, nil)
	require.NoError(t, err)
	c.Done(s)
	for _, tc := range []struct {
		name     string
		epoch    int32
		expected int32 // 0 = admitted
	}{
		{"next expected", 1, 0},
		{"replay of a consumed epoch", 1, 2},
		{"ahead", 3, 2},
		{"next", 2, 0},
		{"next again", 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := c.Admit(context.Background(), key("m"), tc.epoch, nil)
			if tc.expected == 0 {
				require.NoError(t, err)
				c.Done(s)
				return
			}
			var ee *EpochError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, tc.expected, ee.Expected)
		})
	}
	_, err = c.Admit(context.Background(), key("other"), 1, nil)
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = c.AdmitClose(context.Background(), key("other"))
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestEpochWrap(t *testing.T) {
	c, _ := newCache(t, 10, 0)
	s, err := c.Open(context.Background(), key("m"), 0, nil)
	require.NoError(t, err)
	c.Done(s)
	require.True(t, c.SetNextEpoch(key("m"), math.MaxInt32))
	s, err = c.Admit(context.Background(), key("m"), math.MaxInt32, nil)
	require.NoError(t, err)
	c.Done(s)
	_, next, ok := c.Lookup(key("m"))
	require.True(t, ok)
	assert.Equal(t, int32(1), next, "2147483647 is followed by 1")
}

// Of concurrent requests with the same epoch exactly one is admitted.
func TestAdmitAtomic(t *testing.T) {
	c, _ := newCache(t, 10, 0)
	s, err := c.Open(context.Background(), key("m"), 0, nil)
	require.NoError(t, err)
	c.Done(s)
	for epoch := int32(1); epoch <= 50; epoch++ {
		var ok atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				if s, err := c.Admit(context.Background(), key("m"), epoch, nil); err == nil {
					ok.Add(1)
					c.Done(s)
				}
			})
		}
		wg.Wait()
		require.Equal(t, int32(1), ok.Load(), "epoch %d", epoch)
	}
}

func TestReplaceAndClose(t *testing.T) {
	c, e := newCache(t, 1, 0)
	ctx := context.Background()
	s1, err := c.Open(ctx, key("m"), 0, func(st *state) { st.tag = "first" })
	require.NoError(t, err)
	c.Done(s1)
	// Replacing needs no slot even when the cache is full.
	s2, err := c.Open(ctx, key("m"), 0, nil)
	require.NoError(t, err)
	c.Done(s2)
	assert.True(t, s1.Ended())
	assert.NotEqual(t, s1.ID(), s2.ID())
	select {
	case <-s1.Done():
	default:
		t.Fatal("Done not closed")
	}
	assert.Equal(t, []string{"m:replaced"}, e.get())
	s, err := c.AdmitClose(context.Background(), key("m"))
	require.NoError(t, err)
	c.End(s, EndClosed)
	c.End(s, EndClosed) // idempotent
	c.Done(s)
	assert.Equal(t, []string{"m:replaced", "m:closed"}, e.get())
	assert.Equal(t, 0, c.Len())
}

// A full cache evicts idle sessions; otherwise it holds the request for
// max_wait and fails, without taking a slot freed meanwhile.
func TestCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, e := newCache(t, 2, time.Minute)
		ctx := context.Background()
		a, err := c.Open(ctx, key("a"), 0, nil)
		require.NoError(t, err)
		b, err := c.Open(ctx, key("b"), 0, nil)
		require.NoError(t, err)
		c.Done(a)
		// b stays in flight: never evicted.
		start := time.Now()
		go func() {
			time.Sleep(50 * time.Millisecond)
			c.End(a, EndClosed) // frees a slot during the wait
		}()
		_, err = c.Open(ctx, key("c"), 100*time.Millisecond, nil)
		assert.ErrorIs(t, err, ErrLimit)
		assert.Equal(t, 100*time.Millisecond, time.Since(start))

		// Idle sessions are evicted to make room.
		a, err = c.Open(ctx, key("a"), 0, nil)
		require.NoError(t, err)
		c.Done(a)
		time.Sleep(30 * time.Second)
		_, err = c.Open(ctx, key("c"), 0, nil)
		assert.ErrorIs(t, err, ErrLimit, "not idle long enough")
		time.Sleep(30 * time.Second)
		cs, err := c.Open(ctx, key("c"), 0, nil)
		require.NoError(t, err)
		c.Done(cs)
		c.Done(b)
		assert.Contains(t, e.get(), "a:evicted")
		assert.NotContains(t, e.get(), "b:evicted")
	})
}

// The sweeper ends sessions idle past the timeout, counted from the
// completion of their last request, never while one is in flight.
func TestIdleEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, e := newCache(t, 10, 10*time.Second)
		ctx := context.Background()
		s, err := c.Open(ctx, key("busy"), 0, nil)
		require.NoError(t, err)
		i, err := c.Open(ctx, key("idle"), 0, nil)
		require.NoError(t, err)
		c.Done(i)
		time.Sleep(9 * time.Second)
		synctest.Wait()
		assert.Empty(t, e.get())
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"idle:evicted"}, e.get())
		time.Sleep(time.Minute) // busy is in flight for a minute
		synctest.Wait()
		assert.Equal(t, []string{"idle:evicted"}, e.get())
		c.Done(s)
		time.Sleep(9 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"idle:evicted"}, e.get())
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"idle:evicted", "busy:evicted"}, e.get())
	})
}

func TestClose(t *testing.T) {
	var e ended
	c := New(Config[state]{Capacity: 10, IdleTimeout: time.Minute, OnEnd: e.onEnd})
	s, err := c.Open(context.Background(), key("m"), 0, nil)
	require.NoError(t, err)
	c.Done(s)
	c.Close()
	c.Close()
	assert.Equal(t, []string{"m:shutdown"}, e.get())
	_, err = c.Open(context.Background(), key("m"), 0, nil)
	assert.True(t, errors.Is(err, ErrClosed))
	_, err = c.Admit(context.Background(), key("m"), 1, nil)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestEndIf(t *testing.T) {
	c, e := newCache(t, 10, 0)
	ctx := context.Background()
	for _, k := range []Key{{"g1", "a"}, {"g1", "b"}, {"g2", "a"}} {
		s, err := c.Open(ctx, k, 0, nil)
		require.NoError(t, err)
		c.Done(s)
	}
	c.EndIf(func(k Key) bool { return k.Group == "g1" }, EndGroupDeleted)
	assert.ElementsMatch(t, []string{"a:group deleted", "b:group deleted"}, e.get())
	assert.Equal(t, 1, c.Len())
}

func TestEndIfSession(t *testing.T) {
	c, e := newCache(t, 10, 0)
	ctx := context.Background()
	for i, k := range []Key{{"g1", "a"}, {"g1", "b"}, {"g2", "a"}} {
		s, err := c.Open(ctx, k, 0, func(st *state) { st.tag = fmt.Sprint(i) })
		require.NoError(t, err)
		c.Done(s)
	}
	c.EndIfSession(func(s *Session[state]) bool { return s.State.tag != "1" }, EndGroupDeleted)
	assert.ElementsMatch(t, []string{"a:group deleted", "a:group deleted"}, e.get())
	_, _, ok := c.Lookup(Key{"g1", "b"})
	assert.True(t, ok)
	assert.Equal(t, 1, c.Len())
}

// One client cannot take every slot: beyond MaxPerPrincipal it is refused,
// while another client still opens sessions; replacing its own session
// does not count, and ending one frees a slot for it again.
func TestPerPrincipalShare(t *testing.T) {
	c, _ := newCache(t, 10, 0)
	a := principal.WithName(context.Background(), "ip:127.0.0.2")
	b := principal.WithName(context.Background(), "token-1")
	var held []*Session[state]
	for i := range 5 { // default share: half of 10
		s, err := c.Open(a, key(fmt.Sprint("a", i)), 0, nil)
		require.NoError(t, err)
		c.Done(s)
		held = append(held, s)
	}
	_, err := c.Open(a, key("a5"), 0, nil)
	require.ErrorIs(t, err, ErrPrincipalLimit)
	require.ErrorIs(t, err, ErrLimit, "mapped like a full cache (SHARE_SESSION_LIMIT_REACHED)")
	assert.Equal(t, 5, c.Len(), "a refusal changes nothing")

	s, err := c.Open(a, key("a0"), 0, nil)
	require.NoError(t, err, "replacing its own session is not a new one")
	c.Done(s)
	held[0] = s

	for i := range 5 {
		s, err := c.Open(b, key(fmt.Sprint("b", i)), 0, nil)
		require.NoError(t, err, "client B keeps its share")
		c.Done(s)
	}
	_, err = c.Open(b, key("b5"), 0, nil)
	require.ErrorIs(t, err, ErrPrincipalLimit)

	c.End(held[1], EndClosed)
	s, err = c.Open(a, key("a5"), 0, nil)
	require.NoError(t, err, "an ended session frees the client's slot")
	c.Done(s)

	// A session opened by another client under the same key moves between
	// owners: B's replacement of A's key counts for B.
	_, err = c.Open(b, key("a2"), 0, nil)
	require.ErrorIs(t, err, ErrPrincipalLimit, "B is at its share even though the key exists")

	// Calls without an identity are bounded by the capacity only.
	_, err = c.Open(context.Background(), key("anon"), 0, nil)
	require.ErrorIs(t, err, ErrLimit)
	assert.NotErrorIs(t, err, ErrPrincipalLimit, "the cache is full, not the client's share")
}

func TestPerPrincipalExplicitAndWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Config[state]{Capacity: 10, MaxPerPrincipal: 1})
		defer c.Close()
		a := principal.WithName(context.Background(), "ip:10.0.0.1")
		s, err := c.Open(a, key("x"), 0, nil)
		require.NoError(t, err)
		c.Done(s)
		start := time.Now()
		_, err = c.Open(a, key("y"), 300*time.Millisecond, nil)
		require.ErrorIs(t, err, ErrPrincipalLimit)
		assert.Equal(t, 300*time.Millisecond, time.Since(start), "answered after max wait, as a full cache is")
	})
}

// A key belongs to the principal that opened its session or bound it as a
// member: another principal's Open, Admit and AdmitClose find no session
// and change nothing; the binding ends with the last of session and member.
func TestKeyBoundToPrincipal(t *testing.T) {
	c, e := newCache(t, 10, 0)
	alice := principal.WithUser(context.Background(), "User:alice")
	bob := principal.WithUser(context.Background(), "User:bob")

	s, err := c.Open(alice, key("m"), 0, nil)
	require.NoError(t, err)
	c.Done(s)
	assert.Equal(t, "User:alice", s.User())
	_, err = c.Open(bob, key("m"), 0, nil)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = c.Admit(bob, key("m"), 1, func(*Session[state]) { t.Error("admitted another principal") })
	require.ErrorIs(t, err, ErrNotFound)
	_, err = c.AdmitClose(bob, key("m"))
	require.ErrorIs(t, err, ErrNotFound)
	assert.False(t, c.BindMember(key("m"), "User:bob"))
	cur, next, ok := c.Lookup(key("m"))
	require.True(t, ok)
	assert.Same(t, s, cur)
	assert.Equal(t, int32(1), next, "the owner's epoch did not move")
	assert.Empty(t, e.get(), "no session ended")

	s2, err := c.Admit(alice, key("m"), 1, nil)
	require.NoError(t, err, "the owner goes on")
	c.Done(s2)

	// Member and session: the binding outlives the session while the
	// member exists, and ends with it.
	require.True(t, c.BindMember(key("m"), "User:alice"))
	c.End(s, EndClosed)
	owner, ok := c.BoundTo(key("m"))
	require.True(t, ok)
	assert.Equal(t, "User:alice", owner)
	_, err = c.Open(bob, key("m"), 0, nil)
	require.ErrorIs(t, err, ErrNotFound)
	c.UnbindMember(key("m"))
	_, ok = c.BoundTo(key("m"))
	require.False(t, ok)
	s3, err := c.Open(bob, key("m"), 0, nil)
	require.NoError(t, err, "an unbound key is anyone's")
	c.Done(s3)
	assert.Equal(t, "User:bob", s3.User())
	c.End(s3, EndClosed)
	_, ok = c.BoundTo(key("m"))
	assert.False(t, ok, "no session, no member: unbound")
}
