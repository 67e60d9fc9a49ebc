package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// itemNode is one instance in the item tests, recording its hooks.
type itemNode struct {
	l  *Lease
	m  Member
	it *Items

	mu       sync.Mutex
	acquired map[string][]uint64
	released map[string][]string // "epoch/handover"
}

func newItemNode(t *testing.T, prefix, id string) *itemNode {
	return newItemNodeTTL(t, prefix, id, time.Second)
}

func newItemNodeTTL(t *testing.T, prefix, id string, ttl time.Duration) *itemNode {
	nc := testCluster.Connect(t)
	l, err := Open(context.Background(), nc, Options{Prefix: prefix, TTL: ttl, InstanceID: id, AdvertiseAddr: id + ":9090"})
	require.NoError(t, err)
	n := &itemNode{l: l, m: Member{ID: id, Addr: id + ":9090"},
		acquired: map[string][]uint64{}, released: map[string][]string{}}
	n.it = n.l.Items(n.m, ItemHooks{
		Acquired: func(_ context.Context, item string, epoch uint64) error {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.acquired[item] = append(n.acquired[item], epoch)
			return nil
		},
		Release: func(item string, epoch uint64, handover bool) {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.released[item] = append(n.released[item], fmt.Sprintf("%d/%v", epoch, handover))
		},
	})
	return n
}

// releasedSnapshot copies what the Release hook recorded (assertions must
// not hold n.mu: a failing one would leave it locked for the hooks).
func (n *itemNode) releasedSnapshot() map[string][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string][]string, len(n.released))
	for k, v := range n.released {
		out[k] = slices.Clone(v)
	}
	return out
}

func (n *itemNode) acquiredSnapshot() map[string][]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string][]uint64, len(n.acquired))
	for k, v := range n.acquired {
		out[k] = slices.Clone(v)
	}
	return out
}

func (n *itemNode) reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.acquired, n.released = map[string][]uint64{}, map[string][]string{}
}

func (n *itemNode) step(t *testing.T, items []string) {
	t.Helper()
	ctx := context.Background()
	// On a loaded machine a heartbeat or a step can time out, as they may
	// in production: the next round retries, and settle checks the outcome.
	if err := n.l.Heartbeat(ctx, n.m); err != nil {
		t.Logf("%s: heartbeat: %v", n.m.ID, err)
	}
	if err := n.it.Step(ctx, items); err != nil {
		t.Logf("%s: step: %v", n.m.ID, err)
	}
}

// settle steps the nodes in rounds until every item is held by exactly
// the owner the lease keys name and the placement is balanced.
func settle(t *testing.T, items []string, nodes ...*itemNode) map[string]string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, n := range nodes {
			n.step(t, items)
		}
		owners, _, err := nodes[0].l.Owners(context.Background())
		require.NoError(t, err)
		got := map[string]string{}
		ok := len(owners) == len(items)
		for _, n := range nodes {
			for item, epoch := range n.it.Held() {
				if _, dup := got[item]; dup {
					t.Fatalf("item %s held by two instances", item)
				}
				got[item] = n.m.ID
				if owners[item].Owner.ID != n.m.ID || owners[item].Epoch != epoch {
					ok = false
				}
			}
		}
		if ok && len(got) == len(items) && balancedByKind(got, len(nodes)) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no balanced placement within 10s: held %v, leases %v", got, owners)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// balancedByKind reports whether each kind of item (partitions, groups)
// is spread over the nodes within one item per node.
func balancedByKind(got map[string]string, nodes int) bool {
	kinds := map[string]map[string]string{}
	for item, owner := range got {
		k, _, _ := strings.Cut(item, "/")
		if kinds[k] == nil {
			kinds[k] = map[string]string{}
		}
		kinds[k][item] = owner
	}
	for _, its := range kinds {
		c := counts(its)
		lo, hi := len(its)/nodes, (len(its)+nodes-1)/nodes
		if len(c) != min(nodes, len(its)) {
			return false
		}
		for _, k := range c {
			if k < lo || k > hi {
				return false
			}
		}
	}
	return true
}

func TestItemsSpreadMoveOnLeaveAndJoin(t *testing.T) {
	prefix := testCluster.Prefix()
	var items []string
	for p := range int32(10) {
		items = append(items, PartitionItem("t1", p))
	}
	items = append(items, GroupItem("g1"), GroupItem("g2"))
	a, b, c := newItemNode(t, prefix, "a"), newItemNode(t, prefix, "b"), newItemNode(t, prefix, "c")
	before := settle(t, items, a, b, c)
	epochs := map[string]uint64{}
	for _, n := range []*itemNode{a, b, c} {
		n.reset() // the first instance to step took everything and handed most over
		for item, e := range n.it.Held() {
			epochs[item] = e
		}
	}

	// c dies (no more steps, no more heartbeats): after the TTL its items
	// go to a and b; theirs do not move and keep their epochs.
	after := settle(t, items, a, b)
	for item, o := range before {
		if o != "c" {
			require.Equal(t, o, after[item], "item %s moved although its owner lived", item)
			e, _ := map[string]*itemNode{"a": a, "b": b}[o].it.Owns(item)
			require.Equal(t, epochs[item], e, "item %s changed term", item)
		} else {
			e, _ := map[string]*itemNode{"a": a, "b": b}[after[item]].it.Owns(item)
			require.Greater(t, e, epochs[item], "a new owner's epoch is higher")
		}
	}
	for _, n := range []*itemNode{a, b} {
		require.Empty(t, n.releasedSnapshot(), "%s released something while nothing moved away from it", n.m.ID)
	}

	// d joins: it takes a fair share of each kind, handed over by a and b,
	// each released once, with a handover: 3 of the 10 partitions, and no
	// group (a and b have one each, within one of the fair share).
	d := newItemNode(t, prefix, "d")
	joined := settle(t, items, a, b, d)
	var dParts, dGroups int
	for item, o := range joined {
		if o == "d" && strings.HasPrefix(item, "p/") {
			dParts++
		} else if o == "d" {
			dGroups++
		}
	}
	require.Equal(t, 3, dParts)
	require.Equal(t, 0, dGroups)
	for item, o := range joined {
		if o != "d" {
			require.Equal(t, after[item], o)
			continue
		}
		prev := map[string]*itemNode{"a": a, "b": b}[after[item]]
		rel := prev.releasedSnapshot()[item]
		require.Len(t, rel, 1, "item %s released %v", item, rel)
		require.Contains(t, rel[0], "/true")
		require.Len(t, d.acquiredSnapshot()[item], 1)
	}

	// A clean stop hands everything over at once.
	d.it.ReleaseAll(context.Background())
	require.NoError(t, d.l.Leave(context.Background(), d.m.ID))
	require.Empty(t, d.it.Held())
	settle(t, items, a, b)
}

func TestParsePartitionItem(t *testing.T) {
	id, p, ok := ParsePartitionItem(PartitionItem("5c92b0b8-fc4c", 12))
	require.True(t, ok)
	require.Equal(t, "5c92b0b8-fc4c", id)
	require.Equal(t, int32(12), p)
	for _, bad := range []string{GroupItem("g"), "p/", "p/x", "p//1", "p/x/-1", "p/x/y"} {
		_, _, ok := ParsePartitionItem(bad)
		require.False(t, ok, bad)
	}
}

func TestItemsFencedAndTakenLeasesAreDropped(t *testing.T) {
	prefix := testCluster.Prefix()
	items := []string{PartitionItem("t", 0), PartitionItem("t", 1)}
	a := newItemNode(t, prefix, "a")
	settle(t, items, a)
	e0, ok := a.it.Owns(items[0])
	require.True(t, ok)

	// A fenced write drops the item at once, without a handover.
	a.it.Fenced(items[0], e0+1) // another term: ignored
	_, ok = a.it.Owns(items[0])
	require.True(t, ok)
	a.it.Fenced(items[0], e0)
	_, ok = a.it.Owns(items[0])
	require.False(t, ok)
	require.Equal(t, []string{fmt.Sprintf("%d/false", e0)}, a.releasedSnapshot()[items[0]])

	// Another instance overwrites the lease of items[1]: a's next renewal
	// fails its compare-and-set and a drops the item.
	e1, _ := a.it.Owns(items[1])
	_, err := a.l.kv.Put(context.Background(), itemKey(items[1]), []byte(`{"id":"x","addr":"x:1"}`))
	require.NoError(t, err)
	a.it.renewAll(context.Background())
	_, ok = a.it.Owns(items[1])
	require.False(t, ok)
	require.Equal(t, []string{fmt.Sprintf("%d/false", e1)}, a.releasedSnapshot()[items[1]])
}

// Many items, two instances driven by Run: the placement settles, every
// lease is renewed round after round without one being lost, and a
// stopping instance hands everything over.
func TestItemsRunRenewsManyItems(t *testing.T) {
	prefix := testCluster.Prefix()
	var items []string
	for p := range int32(200) {
		items = append(items, PartitionItem("big", p))
	}
	// The default TTL (5 s): what must hold in production, on a loaded
	// 2-core machine running the tests with -race.
	a, b := newItemNodeTTL(t, prefix, "a", 5*time.Second), newItemNodeTTL(t, prefix, "b", 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, n := range []*itemNode{a, b} {
		wg.Go(func() { n.l.RunHeartbeat(ctx, n.m) })
		wg.Go(func() { n.it.Run(ctx, func() ([]string, error) { return items, nil }) })
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(stop)

	var owners map[string]ItemOwner
	require.Eventually(t, func() bool {
		var err error
		owners, _, err = a.l.Owners(context.Background())
		ha, hb := a.it.Held(), b.it.Held()
		return err == nil && len(owners) == 200 && len(ha) == 100 && len(hb) == 100
	}, 20*time.Second, 50*time.Millisecond)
	for _, n := range []*itemNode{a, b} {
		n.reset()
	}
	epochs := map[string]uint64{}
	for item, o := range owners {
		epochs[item] = o.Epoch
	}
	// Two rounds in which every lease is renewed after the round began.
	for range 2 {
		_, revs, err := a.l.Owners(context.Background())
		require.NoError(t, err)
		var top uint64
		for _, r := range revs {
			top = max(top, r)
		}
		require.Eventually(t, func() bool {
			_, now, err := a.l.Owners(context.Background())
			if err != nil || len(now) != 200 {
				return false
			}
			for _, r := range now {
				if r <= top {
					return false
				}
			}
			return true
		}, 10*time.Second, 50*time.Millisecond)
	}
	for _, n := range []*itemNode{a, b} {
		require.Empty(t, n.releasedSnapshot(), "%s lost or moved items while both lived", n.m.ID)
		for item, e := range n.it.Held() {
			require.Equal(t, epochs[item], e, "item %s changed term", item)
		}
	}

	// A clean stop hands every item over; nothing is left held.
	stop()
	require.Empty(t, a.it.Held())
	require.Empty(t, b.it.Held())
	owners, _, err := a.l.Owners(context.Background())
	require.NoError(t, err)
	require.Empty(t, owners)
	for _, n := range []*itemNode{a, b} {
		released := n.releasedSnapshot()
		require.Len(t, released, 100)
		for item, rs := range released {
			require.Equal(t, []string{fmt.Sprintf("%d/true", epochs[item])}, rs)
		}
	}
}

// A Take whose Acquired hook is still running when a step moves the item
// away, or when its term is lost: the step leaves the item alone (its
// lease is not deleted under a hook about to serve it), and a term lost
// meanwhile is released once the hook has returned, not before it
// (where the Release would find nothing served yet and the hook would
// then serve an item whose lease is gone).
func TestItemsTakeBesideAStepOrALoss(t *testing.T) {
	ctx := context.Background()
	prefix := testCluster.Prefix()
	a := newItemNode(t, prefix, "a")
	b := newItemNode(t, prefix, "b")
	own := GroupItem("a0")
	settle(t, []string{own}, a)
	require.NoError(t, b.l.Heartbeat(ctx, b.m))
	require.Eventually(t, func() bool {
		ms, err := a.l.LiveMembers(ctx)
		return err == nil && slices.ContainsFunc(ms, func(m Member) bool { return m.ID == "b" })
	}, 5*time.Second, 20*time.Millisecond, "a sees b live")

	x, y := GroupItem("x"), GroupItem("y")
	entered, proceed := map[string]chan struct{}{x: make(chan struct{}), y: make(chan struct{})},
		map[string]chan struct{}{x: make(chan struct{}), y: make(chan struct{})}
	acquired := a.it.hooks.Acquired
	a.it.hooks.Acquired = func(ctx context.Context, item string, epoch uint64) error {
		if ch, ok := entered[item]; ok {
			close(ch)
			<-proceed[item]
		}
		return acquired(ctx, item, epoch)
	}
	take := func(item string) chan bool {
		done := make(chan bool, 1)
		go func() { done <- a.it.Take(ctx, item) }()
		<-entered[item]
		return done
	}

	// The placement gives x to b (a holds a0 and x, its quota is one).
	done := take(x)
	ex, ok := a.it.Owns(x)
	require.True(t, ok)
	a.step(t, []string{own, x})
	owners, _, err := a.l.Owners(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", owners[x].Owner.ID, "the lease of an item being acquired is kept")
	require.Empty(t, a.releasedSnapshot()[x])
	close(proceed[x])
	require.True(t, <-done)
	a.step(t, []string{own, x}) // now handed over
	_, ok = a.it.Owns(x)
	require.False(t, ok)
	require.Equal(t, []string{fmt.Sprintf("%d/true", ex)}, a.releasedSnapshot()[x])

	// y's term is lost (fenced) while its hook runs: released after it.
	done = take(y)
	ey, ok := a.it.Owns(y)
	require.True(t, ok)
	a.it.Fenced(y, ey)
	require.Empty(t, a.releasedSnapshot()[y], "no release beside the running hook")
	close(proceed[y])
	require.False(t, <-done, "the take ends without the item")
	require.Equal(t, []string{fmt.Sprintf("%d/false", ey)}, a.releasedSnapshot()[y])
	require.Equal(t, []uint64{ey}, a.acquiredSnapshot()[y])
}

// An item taken (by a call) after the step's list of items was made is
// missing from that list: the step keeps it; a step whose list was made
// after the take hands it over as no item any more.
func TestItemsTakenAfterTheListAreKept(t *testing.T) {
	ctx := context.Background()
	prefix := testCluster.Prefix()
	a := newItemNode(t, prefix, "a")
	own, x := GroupItem("a0"), GroupItem("x")
	settle(t, []string{own}, a)
	mark := a.it.mark()
	require.True(t, a.it.Take(ctx, x))
	require.NoError(t, a.it.step(ctx, []string{own}, mark))
	_, ok := a.it.Owns(x)
	require.True(t, ok, "taken after the list: kept")
	require.Empty(t, a.releasedSnapshot()[x])
	a.step(t, []string{own})
	_, ok = a.it.Owns(x)
	require.False(t, ok, "missing from a list made after the take: handed over")
	require.Len(t, a.releasedSnapshot()[x], 1)
}

// Keep holds an item the placement moved away (a consumer group with
// members) until it says otherwise; then the step hands it over.
func TestItemsKeep(t *testing.T) {
	ctx := context.Background()
	prefix := testCluster.Prefix()
	a := newItemNode(t, prefix, "a")
	b := newItemNode(t, prefix, "b")
	own, x := GroupItem("a0"), GroupItem("x")
	settle(t, []string{own}, a)
	require.NoError(t, b.l.Heartbeat(ctx, b.m))
	require.Eventually(t, func() bool {
		ms, err := a.l.LiveMembers(ctx)
		return err == nil && slices.ContainsFunc(ms, func(m Member) bool { return m.ID == "b" })
	}, 5*time.Second, 20*time.Millisecond, "a sees b live")
	var keep sync.Map
	keep.Store(x, true)
	a.it.hooks.Keep = func(item string) bool { v, _ := keep.Load(item); return v == true }
	require.True(t, a.it.Take(ctx, x))
	a.step(t, []string{own, x}) // the placement gives x to b
	_, ok := a.it.Owns(x)
	require.True(t, ok, "kept")
	require.Empty(t, a.releasedSnapshot()[x])
	keep.Store(x, false)
	a.step(t, []string{own, x})
	_, ok = a.it.Owns(x)
	require.False(t, ok, "handed over once not kept")
	require.Len(t, a.releasedSnapshot()[x], 1)
}
