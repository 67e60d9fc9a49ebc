package budget

import (
	"context"
	"strconv"
	"sync"
)

// Holder holds the grants of one call until its response is written. It
// is safe for concurrent use.
type Holder struct {
	enc      Encoding
	mu       sync.Mutex
	grants   []*Grant
	released bool
}

// NewHolder returns a Holder for responses encoded as enc.
func NewHolder(enc Encoding) *Holder { return &Holder{enc: enc} }

type holderKey struct{}

// WithHolder returns ctx carrying h: reservations made under it are held
// by h.
func WithHolder(ctx context.Context, h *Holder) context.Context {
	return context.WithValue(ctx, holderKey{}, h)
}

func holderOf(ctx context.Context) *Holder {
	h, _ := ctx.Value(holderKey{}).(*Holder)
	return h
}

func (h *Holder) add(g *Grant) {
	h.mu.Lock()
	if h.released {
		// The call has ended (its client went away): nothing will be
		// written, so nothing is held.
		h.mu.Unlock()
		g.Release()
		return
	}
	h.grants = append(h.grants, g)
	h.mu.Unlock()
}

// Release gives back every grant made under h (the response is written);
// reservations made under h later are released at once.
func (h *Holder) Release() {
	if h == nil {
		return
	}
	h.mu.Lock()
	gs := h.grants
	h.grants, h.released = nil, true
	h.mu.Unlock()
	for _, g := range gs {
		g.Release()
	}
}

// Tickets hands a Holder from the REST gateway to the in-process gRPC
// server it calls, so that what a Fetch reserves is held until the gateway
// has written the JSON body (the gRPC call ends before that). The gateway
// opens a ticket per request and passes its id in the call's metadata
// (MDTicket); only the gateway's own in-memory gRPC server looks tickets
// up. It is safe for concurrent use.
type Tickets struct {
	mu   sync.Mutex
	next uint64
	m    map[string]*Holder
}

// MDTicket is the gRPC metadata key of a ticket id.
const MDTicket = "sharelog-budget-ticket"

// NewTickets returns an empty registry.
func NewTickets() *Tickets { return &Tickets{m: map[string]*Holder{}} }

// Open registers a new Holder for responses encoded as enc.
func (t *Tickets) Open(enc Encoding) (string, *Holder) {
	h := NewHolder(enc)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	id := strconv.FormatUint(t.next, 10)
	t.m[id] = h
	return id, h
}

// Holder is the Holder of an open ticket, or nil.
func (t *Tickets) Holder(id string) *Holder {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// Close forgets the ticket and releases its Holder.
func (t *Tickets) Close(id string) {
	t.mu.Lock()
	h := t.m[id]
	delete(t.m, id)
	t.mu.Unlock()
	h.Release()
}
