// Package ownership is what an instance of a partitioned cluster
// (docs/cluster.md "Phase 2") knows about the items it serves — partitions
// and share groups, each behind a gate its lease opens and closes — and
// the log domain's view of it: [Partitions] is the broker.Owners over the
// partition leases (internal/cluster Items).
package ownership

import (
	"context"
	"sync"
)

// Gates says, per lease item, whether this instance serves it. Calls on
// an item hold its gate shared while they run; giving the item up takes
// it exclusively, so it waits for them, and none starts after.
type Gates struct {
	mu    sync.Mutex
	gates map[string]*gate
}

type gate struct {
	mu    sync.RWMutex
	owned bool
	epoch uint64
	// calls ends when the term ends (Stop): a share group's calls that
	// wait (a fetch) return.
	calls context.Context
	stop  context.CancelFunc
}

// NewGates returns gates that serve nothing.
func NewGates() *Gates { return &Gates{gates: map[string]*gate{}} }

func (gs *Gates) gate(item string) *gate {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.gates[item]
	if g == nil {
		g = &gate{}
		gs.gates[item] = g
	}
	return g
}

// Serve opens item's gate for the term begun at epoch (its state loaded).
func (gs *Gates) Serve(item string, epoch uint64) {
	g := gs.gate(item)
	g.mu.Lock()
	g.owned, g.epoch = true, epoch
	g.calls, g.stop = context.WithCancel(context.Background())
	g.mu.Unlock()
}

// Stop closes item's gate if it is open for the term begun at epoch: the
// term's calls context ends, then Stop waits for the holds taken before.
// False when the item was not served in that term.
func (gs *Gates) Stop(item string, epoch uint64) bool {
	g := gs.gate(item)
	g.mu.RLock()
	stop, owned := g.stop, g.owned && g.epoch == epoch
	g.mu.RUnlock()
	if !owned {
		return false
	}
	stop() // running calls end, and hold the gate until they have
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.owned || g.epoch != epoch {
		return false
	}
	g.owned, g.stop = false, nil
	return true
}

// Held is a hold on an item this instance serves.
type Held struct {
	g *gate
	// Epoch is the term the item is served in.
	Epoch uint64
	// Calls ends when the term ends.
	Calls context.Context
}

// Release ends the hold.
func (h *Held) Release() { h.g.mu.RUnlock() }

// Hold holds item's gate if this instance serves item; the caller
// releases it.
func (gs *Gates) Hold(item string) (*Held, bool) {
	g := gs.gate(item)
	g.mu.RLock()
	if !g.owned {
		g.mu.RUnlock()
		return nil, false
	}
	return &Held{g: g, Epoch: g.epoch, Calls: g.calls}, true
}

// Serves reports whether this instance serves item.
func (gs *Gates) Serves(item string) bool {
	h, ok := gs.Hold(item)
	if ok {
		h.Release()
	}
	return ok
}

// Term is the epoch item is served in, false when it is not served here.
func (gs *Gates) Term(item string) (uint64, bool) {
	g := gs.gate(item)
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.epoch, g.owned
}
