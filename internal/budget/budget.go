package budget

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/internal/principal"
)

// MinGrant is the least a reservation takes when it asked for more: below
// it a response would be cut to a few records, so it waits instead.
const MinGrant = 64 << 10

// Encoding says how large a response's encoding is for its record data:
// Num/Den times the record bytes plus PerRecord for each record.
type Encoding struct {
	Num, Den  int64
	PerRecord int64
}

// Binary is the estimate of protobuf (gRPC) and the Kafka wire: the record
// bytes plus a record's framing.
var Binary = Encoding{Num: 1, Den: 1, PerRecord: 32}

// JSON is the estimate of the REST gateway's JSON: bytes are base64 (4/3)
// and each record has its field names and quoted integers.
var JSON = Encoding{Num: 4, Den: 3, PerRecord: 96}

func (e Encoding) size(data, records int64) int64 { return data*e.Num/e.Den + records*e.PerRecord }
func (e Encoding) data(size int64) int64          { return size * e.Den / e.Num }

// Config sizes a Bytes budget.
type Config struct {
	// Total is --max-response-bytes-in-flight.
	Total int64
	// PerPrincipal is --max-response-bytes-per-principal (at most Total).
	PerPrincipal int64
	// MaxFetch is --max-fetch-bytes: the most record data one response
	// asks for (its first record may exceed it).
	MaxFetch int64
}

// Bytes is the response byte budget. A nil *Bytes budgets nothing. It is
// safe for concurrent use.
type Bytes struct {
	cfg Config

	mu      sync.Mutex
	used    int64            // estimated bytes held by all grants
	byKey   map[string]int64 // the same per client (principal.Name)
	changed chan struct{}    // closed (and replaced) whenever bytes are given back

	waiting atomic.Int64 // reservations waiting now
	waits   atomic.Int64 // reservations that had to wait, ever
	refused atomic.Int64 // reservations that got nothing within their wait, ever
}

// New returns a budget of cfg.
func New(cfg Config) *Bytes {
	return &Bytes{cfg: cfg, byKey: map[string]int64{}, changed: make(chan struct{})}
}

// MaxFetch is the most record data a response asks for (--max-fetch-bytes);
// 0 = no cap.
func (b *Bytes) MaxFetch() int64 {
	if b == nil {
		return 0
	}
	return b.cfg.MaxFetch
}

// CapFetch is want capped at MaxFetch.
func (b *Bytes) CapFetch(want int) int {
	if m := b.MaxFetch(); m > 0 && int64(want) > m {
		return int(m)
	}
	return want
}

// InFlight is the estimated bytes of the responses being built or written.
func (b *Bytes) InFlight() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Waiting is the number of reservations waiting for bytes now.
func (b *Bytes) Waiting() int64 {
	if b == nil {
		return 0
	}
	return b.waiting.Load()
}

// Waits is the number of reservations that waited for bytes, ever.
func (b *Bytes) Waits() int64 {
	if b == nil {
		return 0
	}
	return b.waits.Load()
}

// Refused is the number of reservations that got nothing within their
// wait, ever.
func (b *Bytes) Refused() int64 {
	if b == nil {
		return 0
	}
	return b.refused.Load()
}

// Reserve reserves bytes for up to want bytes of record data (capped at
// MaxFetch) of the response of ctx's call, charged to the call's client
// (principal.Name(ctx)). It takes what is free as soon as at least
// MinGrant (or all of want, if less) is, waiting up to wait for it;
// Grant.Data is the record data the response may carry, 0 when nothing
// was free in time. It fails only with ctx's error. The grant is released
// with the call's Holder, or earlier by Grant.Release; a context without
// a Holder is not budgeted (the grant is all of want).
func (b *Bytes) Reserve(ctx context.Context, want int, wait time.Duration) (*Grant, error) {
	want = b.CapFetch(max(want, 0))
	h := holderOf(ctx)
	if b == nil || h == nil || want == 0 {
		return &Grant{Data: want}, nil
	}
	key := principal.Name(ctx)
	enc := h.enc
	wantSize := max(enc.size(int64(want), 0), 1)
	minSize := min(wantSize, enc.size(MinGrant, 0))
	var timer *time.Timer
	counted := false
	for {
		b.mu.Lock()
		free := b.cfg.Total - b.used
		if key != "" {
			free = min(free, b.cfg.PerPrincipal-b.byKey[key])
		}
		if free >= minSize {
			n := min(wantSize, free)
			b.used += n
			if key != "" {
				b.byKey[key] += n
			}
			b.mu.Unlock()
			if counted {
				b.waiting.Add(-1)
			}
			if timer != nil {
				timer.Stop()
			}
			data := int64(want)
			if n < wantSize {
				data = min(enc.data(n), data)
			}
			g := &Grant{Data: int(data), b: b, key: key, enc: enc, held: n}
			h.add(g)
			return g, nil
		}
		changed := b.changed
		b.mu.Unlock()
		if !counted {
			if wait <= 0 {
				b.refused.Add(1)
				return &Grant{}, nil
			}
			counted = true
			b.waiting.Add(1)
			b.waits.Add(1)
			timer = time.NewTimer(wait)
		}
		select {
		case <-changed:
		case <-timer.C:
			b.waiting.Add(-1)
			b.refused.Add(1)
			return &Grant{}, nil
		case <-ctx.Done():
			b.waiting.Add(-1)
			timer.Stop()
			return &Grant{}, ctx.Err()
		}
	}
}

// adjust moves what key holds by delta (negative: given back).
func (b *Bytes) adjust(key string, delta int64) {
	if delta == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used += delta
	if key != "" {
		if n := b.byKey[key] + delta; n > 0 {
			b.byKey[key] = n
		} else {
			delete(b.byKey, key)
		}
	}
	if delta < 0 {
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// Describe is the budget's figures for a refusal's message and metadata.
func (b *Bytes) Describe() map[string]string {
	if b == nil {
		return nil
	}
	return map[string]string{
		"max_response_bytes_in_flight":     strconv.FormatInt(b.cfg.Total, 10),
		"max_response_bytes_per_principal": strconv.FormatInt(b.cfg.PerPrincipal, 10),
	}
}

// Grant is one reservation. Data is the record data its response may
// carry (the first record may exceed it: Settle accounts for it).
type Grant struct {
	Data int

	b    *Bytes
	key  string
	enc  Encoding
	mu   sync.Mutex
	held int64 // estimated bytes held; 0 after Release
	done bool
}

// Settle sets the grant to what its response carries: data bytes of
// record data in records records. Less than reserved gives the rest back
// at once; more (a first record over the grant) is taken anyway.
func (g *Grant) Settle(data, records int) {
	if g == nil || g.b == nil {
		return
	}
	g.mu.Lock()
	if g.done {
		g.mu.Unlock()
		return
	}
	n := g.enc.size(int64(data), int64(records))
	delta := n - g.held
	g.held = n
	g.mu.Unlock()
	g.b.adjust(g.key, delta)
}

// Release gives the grant back; later calls do nothing.
func (g *Grant) Release() {
	if g == nil || g.b == nil {
		return
	}
	g.mu.Lock()
	if g.done {
		g.mu.Unlock()
		return
	}
	n := g.held
	g.held, g.done = 0, true
	g.mu.Unlock()
	g.b.adjust(g.key, -n)
}
