package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
)

// view keeps the heartbeats and item leases of the lease bucket as one
// long-lived watch delivers them. Members and Owners each read the bucket
// through a new watch (an ephemeral consumer created, drained and
// deleted); an instance of phase 2 did that twice every TTL/4, and the
// cost per instance did not shrink with its share of the load
// (docs/cluster.md, "Watching the lease bucket"). The view is eventually
// current: a change reaches it as fast as the watch delivers it, and an
// expired key as fast as JetStream places its marker (the bucket keeps
// markers, LimitMarkerTTL); an entry not renewed for twice the TTL is
// dropped even if no marker came.
type view struct {
	l *Lease

	once sync.Once
	mu   sync.Mutex
	// ready: the watch delivered every value the bucket held when it
	// started, and has not ended since.
	ready   bool
	members map[string]viewEntry // by key
	items   map[string]viewEntry // by key
	// gone is signalled (without blocking) when a heartbeat or an item
	// lease is deleted once the view is ready: an instance left or handed
	// items over, so the placement may have free items for this one
	// (Items.Run steps at once instead of at its next interval).
	gone chan struct{}
}

// departures is the view's signal of deleted heartbeats and item leases.
func (v *view) departures() <-chan struct{} {
	v.start()
	return v.gone
}

type viewEntry struct {
	key string
	val []byte
	rev uint64
	at  time.Time // when this instance received it
}

// viewRefresh restarts the watch from a fresh snapshot now and then, so a
// view that went wrong in a way nobody noticed heals by itself.
const viewRefresh = 5 * time.Minute

// start runs the watch for as long as the NATS connection is open.
func (v *view) start() {
	v.once.Do(func() { go v.run() })
}

func (v *view) run() {
	for !v.l.nc.IsClosed() {
		v.watchOnce()
		v.mu.Lock()
		v.ready = false
		v.mu.Unlock()
		if v.l.nc.IsClosed() {
			return
		}
		time.Sleep(v.l.interval())
	}
}

// watchOnce follows the bucket until the watch ends, the connection
// closes, or viewRefresh passes.
func (v *view) watchOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), viewRefresh)
	defer cancel()
	w, err := v.l.kv.WatchFiltered(ctx, []string{memberKeyPrefix + ">", itemKeyPrefix + ">"})
	if err != nil {
		return
	}
	defer func() { _ = w.Stop() }()
	members, items := map[string]viewEntry{}, map[string]viewEntry{}
	tick := time.NewTicker(v.l.interval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if v.l.nc.IsClosed() {
				return
			}
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // every value the bucket held is in
				v.mu.Lock()
				v.members, v.items, v.ready = members, items, true
				v.mu.Unlock()
				continue
			}
			m := items
			if strings.HasPrefix(e.Key(), memberKeyPrefix) {
				m = members
			}
			v.mu.Lock() // the maps are the view's once the first nil came
			if e.Operation() == njs.KeyValuePut {
				m[e.Key()] = viewEntry{key: e.Key(), val: e.Value(), rev: e.Revision(), at: v.l.o.Now()}
			} else {
				delete(m, e.Key())
			}
			ready := v.ready
			v.mu.Unlock()
			if ready && e.Operation() != njs.KeyValuePut {
				select {
				case v.gone <- struct{}{}:
				default:
				}
			}
		}
	}
}

// snapshot returns copies of the current entries, or false when the view
// is not ready (the callers then read the bucket).
func (v *view) snapshot() (members, items []viewEntry, ok bool) {
	v.start()
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ready {
		return nil, nil, false
	}
	limit := 2 * v.l.o.TTL
	now := v.l.o.Now()
	for _, e := range v.members {
		if now.Sub(e.at) < limit {
			members = append(members, e)
		}
	}
	for _, e := range v.items {
		if now.Sub(e.at) < limit {
			items = append(items, e)
		}
	}
	return members, items, true
}

// LiveMembers is Members from the lease bucket's watch: as current as the
// watch (milliseconds behind a change), without a read of the bucket. It
// reads the bucket like Members until the watch has started.
func (l *Lease) LiveMembers(ctx context.Context) ([]Member, error) {
	entries, _, ok := l.view.snapshot()
	if !ok {
		return l.Members(ctx)
	}
	var out []Member
	for _, e := range entries {
		var m Member
		if json.Unmarshal(e.val, &m) != nil || m.ID == "" {
			continue // not ours to judge; it expires
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// LiveOwners is Owners from the lease bucket's watch, as LiveMembers is
// Members.
func (l *Lease) LiveOwners(ctx context.Context) (map[string]ItemOwner, error) {
	_, entries, ok := l.view.snapshot()
	if !ok {
		owners, _, err := l.Owners(ctx)
		return owners, err
	}
	owners := make(map[string]ItemOwner, len(entries))
	for _, e := range entries {
		if o, ok := itemOwner(e.key, e.val, e.rev); ok {
			owners[o.Item] = o
		}
	}
	return owners, nil
}

// itemOwner decodes an item lease key and value read at revision rev.
func itemOwner(key string, val []byte, rev uint64) (ItemOwner, bool) {
	raw, err := hex.DecodeString(strings.TrimPrefix(key, itemKeyPrefix))
	var v itemValue
	if err != nil || json.Unmarshal(val, &v) != nil || v.ID == "" {
		return ItemOwner{}, false // not ours; it expires
	}
	epoch := v.Epoch
	if epoch == 0 {
		epoch = rev
	}
	return ItemOwner{Item: string(raw), Owner: Holder{ID: v.ID, Addr: v.Addr}, Epoch: epoch}, true
}
