package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
)

// itemKeyPrefix starts the key of every per-item lease (phase 2) in the
// lease bucket: item.<hex of the item name>.
const itemKeyPrefix = "item."

func itemKey(item string) string { return itemKeyPrefix + hex.EncodeToString([]byte(item)) }

// PartitionItem and GroupItem name the items phase 2 places: a partition
// (by topic ID, so a recreated topic is a new item) and a share group.
func PartitionItem(topicID string, partition int32) string {
	return fmt.Sprintf("p/%s/%d", topicID, partition)
}

// ParsePartitionItem is the inverse of PartitionItem.
func ParsePartitionItem(item string) (topicID string, partition int32, ok bool) {
	rest, found := strings.CutPrefix(item, "p/")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", 0, false
	}
	return rest[:i], int32(p), true
}

// GroupItem names a share group's coordinator lease.
func GroupItem(group string) string { return "g/" + group }

// itemValue is the value of an item lease key.
type itemValue struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Epoch is the revision the owner's term began at, written from the
	// first renewal on (zero in the create itself, whose revision it is).
	Epoch uint64 `json:"epoch,omitempty"`
}

// ItemOwner is the current owner of one item.
type ItemOwner struct {
	Item  string
	Owner Holder
	// Epoch is the revision of the lease key when the owner's term began;
	// it grows with every new term and stays the same across renewals.
	Epoch uint64
}

// ItemHooks is what an owner does around its items. Both run inside
// Items.Step, for several items at once (takes, renewals and handovers
// run in parallel), each at most once per term of an item.
type ItemHooks struct {
	// Acquired runs after the item's lease was created by this instance:
	// load its state and start serving it. An error gives the lease back.
	Acquired func(ctx context.Context, item string, epoch uint64) error
	// Release runs when this instance stops owning the item. handover is
	// true when it gives the item up while still holding the lease (the
	// placement moved it, or the instance is stopping): stop serving,
	// flush the item's state, and the lease is deleted after Release
	// returns. handover is false when the lease was lost (taken, or not
	// renewed in time): stop serving at once; fencing refuses any write.
	Release func(item string, epoch uint64, handover bool)
	// Keep, when set, may keep an item the placement moved away (not one
	// that is no item any more, nor at ReleaseAll): a consumer group with
	// members, whose membership the next owner would not have. The
	// placement's target owner waits for it, as for any held item.
	Keep func(item string) bool
}

type heldItem struct {
	epoch   uint64 // the revision the term began at
	rev     uint64 // the current revision
	renewed time.Time
	// acquiring: the Acquired hook of this term is running. The item is
	// not handed over meanwhile (the next step does it), and a term lost
	// meanwhile (expired, taken, fenced) is released by the take once the
	// hook returned (settle): a Release running beside Acquired would
	// find nothing served yet, and the hook would then serve an item
	// whose lease is gone, never released.
	acquiring bool
	// seq orders the takes (Items.seq when taken): a step hands over an
	// item missing from its list only if it was taken before the list
	// was made.
	seq uint64
}

// Items holds this instance's per-item leases (phase 2). Step moves it
// towards the placement of the live set; Run calls Step every TTL/4.
type Items struct {
	l     *Lease
	self  Member
	hooks ItemHooks

	takeMu sync.Mutex // serialises Take
	mu     sync.Mutex
	held   map[string]*heldItem
	seq    uint64               // the takes so far
	owners map[string]ItemOwner // as the last Step read them
}

// Items returns the per-item lease holder of this instance (self must be
// the member it heartbeats as).
func (l *Lease) Items(self Member, hooks ItemHooks) *Items {
	if hooks.Acquired == nil {
		hooks.Acquired = func(context.Context, string, uint64) error { return nil }
	}
	if hooks.Release == nil {
		hooks.Release = func(string, uint64, bool) {}
	}
	return &Items{l: l, self: self, hooks: hooks, held: map[string]*heldItem{}}
}

// Held returns the items this instance owns with their epochs.
func (it *Items) Held() map[string]uint64 {
	it.mu.Lock()
	defer it.mu.Unlock()
	out := make(map[string]uint64, len(it.held))
	for k, h := range it.held {
		out[k] = h.epoch
	}
	return out
}

// Owns reports whether this instance owns item, and the epoch.
func (it *Items) Owns(item string) (uint64, bool) {
	it.mu.Lock()
	defer it.mu.Unlock()
	h := it.held[item]
	if h == nil {
		return 0, false
	}
	return h.epoch, true
}

// Owner is item's owner as the last Step read the leases (this instance's
// own items are in Owns, which is current).
func (it *Items) Owner(item string) (ItemOwner, bool) {
	it.mu.Lock()
	defer it.mu.Unlock()
	o, ok := it.owners[item]
	return o, ok
}

// Fenced reports that a write for item in the term begun at epoch was
// refused: another instance owns it. The item is dropped at once.
func (it *Items) Fenced(item string, epoch uint64) {
	it.mu.Lock()
	h := it.held[item]
	if h == nil || h.epoch != epoch {
		it.mu.Unlock()
		return
	}
	delete(it.held, item)
	it.mu.Unlock()
	it.l.o.Logger.Warn("a write was fenced: another instance owns the item", "item", item, "epoch", epoch)
	if !h.acquiring {
		it.hooks.Release(item, epoch, false)
	}
}

// Owners reads every item lease: item → owner and epoch.
func (l *Lease) Owners(ctx context.Context) (map[string]ItemOwner, map[string]uint64, error) {
	w, err := l.kv.WatchFiltered(ctx, []string{itemKeyPrefix + ">"}, njs.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("read the item leases: %w", err)
	}
	defer func() { _ = w.Stop() }()
	owners, revs := map[string]ItemOwner{}, map[string]uint64{}
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("read the item leases: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, errors.New("read the item leases: the watch ended")
			}
			if e == nil {
				return owners, revs, nil
			}
			if e.Operation() != njs.KeyValuePut {
				continue
			}
			o, ok := itemOwner(e.Key(), e.Value(), e.Revision())
			if !ok {
				continue
			}
			owners[o.Item] = o
			revs[o.Item] = e.Revision()
		}
	}
}

// Step does one round: renew the held leases, hand over the items the
// placement moved away, and take the free items the placement gives this
// instance. items is every item there is (partitions and groups).
func (it *Items) Step(ctx context.Context, items []string) error {
	return it.step(ctx, items, it.mark())
}

// mark is the takes so far: items taken after it may be missing from a
// list of items made after it.
func (it *Items) mark() uint64 {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.seq
}

// takenAfter lists the held items taken after mark.
func (it *Items) takenAfter(mark uint64) map[string]bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	out := map[string]bool{}
	for item, h := range it.held {
		if h.seq > mark {
			out[item] = true
		}
	}
	return out
}

// step is Step with items listed after mark: an item taken since (a call
// took a group nobody coordinated while the list was read) and missing
// from it is not "no item any more"; the next list has it.
func (it *Items) step(ctx context.Context, items []string, mark uint64) error {
	it.expire()
	it.renewAll(ctx)

	// The renewals are done: reading the live set and the leases may take
	// longer than a renewal round on a loaded machine, only the placement
	// waits for it.
	rctx, cancel := context.WithTimeout(ctx, it.l.o.TTL/2)
	defer cancel()
	members, err := it.l.LiveMembers(rctx)
	if err != nil {
		return err
	}
	owners, err := it.l.LiveOwners(rctx)
	if err != nil {
		return err
	}
	it.mu.Lock()
	it.owners = owners
	it.mu.Unlock()
	live := make([]string, 0, len(members)+1)
	for _, m := range members {
		live = append(live, m.ID)
	}
	live = append(live, it.self.ID) // a Step is a sign of life even before the first heartbeat is read
	current := make(map[string]string, len(owners))
	for item, o := range owners {
		current[item] = o.Owner.ID
	}
	// What this instance holds is its own, whatever the view says: the view
	// may not show a lease it took a moment ago (or still show the owner
	// before it), and placing that item as unowned would hand it over at
	// once.
	for item := range it.Held() {
		current[item] = it.self.ID
	}
	target := PlaceFair(items, live, current)

	// Hand over what the placement moved away, and what is no item any
	// more.
	var away, free []string
	recent := it.takenAfter(mark)
	for _, item := range slices.Sorted(maps.Keys(it.Held())) {
		owner, listed := target[item]
		switch {
		case owner == it.self.ID, !listed && recent[item]:
		case listed && it.hooks.Keep != nil && it.hooks.Keep(item):
		default:
			away = append(away, item)
		}
	}
	it.parallel(away, func(item string) { it.handover(ctx, item) })
	// Take what is ours and free.
	for _, item := range slices.Sorted(maps.Keys(target)) {
		if target[item] != it.self.ID {
			continue
		}
		if _, taken := owners[item]; taken {
			continue // its owner hands it over first
		}
		if _, ok := it.Owns(item); ok {
			continue
		}
		free = append(free, item)
	}
	it.parallel(free, func(item string) { it.take(ctx, item) })
	return nil
}

// parallel runs fn for every item, renewParallel at a time: each is one
// or two replicated writes, and a step must end well within the TTL.
func (it *Items) parallel(items []string, fn func(item string)) {
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for _, item := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(item)
		})
	}
	wg.Wait()
}

// expire drops the items not renewed in time, as the phase-1 lease does.
func (it *Items) expire() {
	now := it.l.o.Now()
	limit := it.l.o.TTL - it.l.margin()
	var lost []string
	var epochs []uint64
	var acquiring []bool
	it.mu.Lock()
	for item, h := range it.held {
		if now.Sub(h.renewed) >= limit {
			lost = append(lost, item)
			epochs = append(epochs, h.epoch)
			acquiring = append(acquiring, h.acquiring)
			delete(it.held, item)
		}
	}
	it.mu.Unlock()
	for i, item := range lost {
		it.l.o.Logger.Warn("item lease not renewed in time: stop serving it", "item", item, "epoch", epochs[i])
		if !acquiring[i] {
			it.hooks.Release(item, epochs[i], false)
		}
	}
}

// renewParallel bounds the renewals in flight at once: one renewal is one
// replicated write (about 1.5 ms with fsync always), so renewing a
// thousand items one after the other would outlast TTL/4.
const renewParallel = 32

func (it *Items) renewAll(ctx context.Context) {
	type ren struct {
		item       string
		epoch, rev uint64
	}
	it.mu.Lock()
	rs := make([]ren, 0, len(it.held))
	for item, h := range it.held {
		rs = append(rs, ren{item, h.epoch, h.rev})
	}
	it.mu.Unlock()
	byItem := make(map[string]ren, len(rs))
	names := make([]string, 0, len(rs))
	for _, r := range rs {
		byItem[r.item] = r
		names = append(names, r.item)
	}
	it.parallel(names, func(item string) {
		r := byItem[item]
		it.renew(ctx, r.item, r.epoch, r.rev)
	})
}

// renew renews one item lease held at revision rev, in the term begun at
// epoch.
func (it *Items) renew(ctx context.Context, item string, epoch, rev uint64) {
	sent := it.l.o.Now()
	data, _ := json.Marshal(itemValue{ID: it.self.ID, Addr: it.self.Addr, Epoch: epoch})
	msg := nats.NewMsg("$KV." + it.l.bucket + "." + itemKey(item))
	msg.Data = data
	pctx, cancel := context.WithTimeout(ctx, it.l.interval())
	ack, err := it.l.js.PublishMsg(pctx, msg, njs.WithExpectLastSequencePerSubject(rev), njs.WithMsgTTL(it.l.o.TTL))
	cancel()
	it.mu.Lock()
	h := it.held[item]
	if h == nil || h.epoch != epoch {
		it.mu.Unlock()
		return
	}
	switch {
	case err == nil:
		h.rev, h.renewed = ack.Sequence, sent
		it.mu.Unlock()
	case sljs.IsWrongLastSequence(err):
		delete(it.held, item)
		it.mu.Unlock()
		it.l.o.Logger.Warn("item lease taken by another instance", "item", item, "epoch", epoch)
		if !h.acquiring {
			it.hooks.Release(item, epoch, false)
		}
	default:
		it.mu.Unlock()
		it.l.o.Logger.Debug("item lease renewal failed", "item", item, "err", err)
	}
}

// Run steps every TTL/4 until ctx ends, then hands over every held item
// (a clean stop). items lists every item there is at each step; when it
// fails the step only renews (an empty list would hand everything over).
func (it *Items) Run(ctx context.Context, items func() ([]string, error)) {
	for {
		mark := it.mark()
		all, err := items()
		if err == nil {
			err = it.step(ctx, all, mark)
		} else {
			it.expire()
			it.renewAll(ctx)
		}
		if err != nil && ctx.Err() == nil {
			it.l.o.Logger.Debug("item lease step failed", "err", err)
		}
		t := time.NewTimer(it.l.interval())
		select {
		case <-ctx.Done():
			t.Stop()
			it.ReleaseAll(context.Background())
			return
		case <-t.C:
		case <-it.l.view.departures():
			// An instance left or handed items over (a clean stop releases
			// everything at once): step now, after a moment that lets the
			// rest of its deletions arrive, instead of up to TTL/4 later.
			t.Stop()
			select {
			case <-ctx.Done():
			case <-time.After(departureSettle):
			}
		}
	}
}

// departureSettle is how long Run waits after a departure before its
// step, so that one step sees all of a stopping instance's releases.
const departureSettle = 50 * time.Millisecond

// handover stops serving item, lets the hook flush it, and deletes the
// lease at exactly the revision held, so the next owner can take it. The
// item leaves held before the hook runs: it is released once.
func (it *Items) handover(ctx context.Context, item string) {
	it.mu.Lock()
	h := it.held[item]
	if h == nil || h.acquiring {
		it.mu.Unlock()
		return // an item being acquired is handed over by a later step
	}
	delete(it.held, item)
	it.mu.Unlock()
	it.hooks.Release(item, h.epoch, true)
	dctx, cancel := context.WithTimeout(ctx, it.l.interval())
	defer cancel()
	if err := it.l.kv.Delete(dctx, itemKey(item), njs.LastRevision(h.rev)); err != nil {
		it.l.o.Logger.Warn("could not release an item lease; it expires after its TTL", "item", item, "err", err)
	}
}

// Take takes item now if it is free, outside the placement (a call for a
// share group nobody coordinates yet): true when this instance owns it
// afterwards. The next steps may move it, as any other item.
func (it *Items) Take(ctx context.Context, item string) bool {
	it.takeMu.Lock() // one take of an item at a time: the others see its result
	defer it.takeMu.Unlock()
	if _, ok := it.Owns(item); ok {
		return true
	}
	it.take(ctx, item)
	_, ok := it.Owns(item)
	return ok
}

func (it *Items) take(ctx context.Context, item string) {
	sent := it.l.o.Now()
	data, _ := json.Marshal(itemValue{ID: it.self.ID, Addr: it.self.Addr})
	cctx, cancel := context.WithTimeout(ctx, it.l.interval())
	rev, err := it.l.kv.Create(cctx, itemKey(item), data, njs.KeyTTL(it.l.o.TTL))
	cancel()
	if err != nil {
		if !errors.Is(err, njs.ErrKeyExists) {
			it.l.o.Logger.Debug("item lease create failed", "item", item, "err", err)
		}
		return
	}
	it.mu.Lock()
	it.seq++
	it.held[item] = &heldItem{epoch: rev, rev: rev, renewed: sent, acquiring: true, seq: it.seq}
	it.mu.Unlock()
	err = it.hooks.Acquired(ctx, item, rev)
	if !it.settle(item, rev) {
		// The term ended while the hook ran (its lease expired, was
		// taken or fenced): stop what the hook started.
		it.l.o.Logger.Warn("item lease lost while it was being acquired: stop serving it", "item", item, "epoch", rev)
		it.hooks.Release(item, rev, false)
		return
	}
	if err != nil {
		it.l.o.Logger.Error("cannot serve an acquired item; giving it back", "item", item, "err", err)
		it.handover(ctx, item)
	}
}

// settle ends the acquisition of item's term begun at epoch: false when
// that term is no longer held.
func (it *Items) settle(item string, epoch uint64) bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	h := it.held[item]
	if h == nil || h.epoch != epoch {
		return false
	}
	h.acquiring = false
	return true
}

// ReleaseAll hands over every held item (a clean stop), so the others
// take them without waiting for the TTL.
func (it *Items) ReleaseAll(ctx context.Context) {
	it.parallel(slices.Sorted(maps.Keys(it.Held())), func(item string) { it.handover(ctx, item) })
}
