package broker

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/sharelog/sharelog/internal/principal"
)

// LongPolls bounds the Fetch and ShareFetch calls waiting for records at
// once, server-wide (--max-long-polls) and per client
// (--max-long-polls-per-principal; the client is principal.Name of the
// call: its principal, or its IP when anonymous): each waiting call holds a
// goroutine, a timer and its request for up to max_wait_ms, so without a
// bound many clients could grow the server's memory without limit, and
// without a share one client could take every slot. A call that would wait
// while every slot (or its client's share) is taken is answered at once
// instead, as if its max_wait_ms were 0: with what is there, possibly
// nothing, not an error. A nil *LongPolls has no bound.
type LongPolls struct {
	max, perPrincipal int64
	waiting           atomic.Int64

	mu    sync.Mutex
	byKey map[string]int64
}

// NewLongPolls returns a bound of max waiting calls (0: no call waits), at
// most perPrincipal of them from one client.
func NewLongPolls(max, perPrincipal int) *LongPolls {
	return &LongPolls{max: int64(max), perPrincipal: int64(perPrincipal), byKey: map[string]int64{}}
}

// TryAcquire takes a slot for ctx's call; it reports false when all are
// taken, or all of its client's share.
func (l *LongPolls) TryAcquire(ctx context.Context) bool {
	if l == nil {
		return true
	}
	if l.waiting.Add(1) > l.max {
		l.waiting.Add(-1)
		return false
	}
	if key := principal.Name(ctx); key != "" {
		l.mu.Lock()
		if l.byKey[key] >= l.perPrincipal {
			l.mu.Unlock()
			l.waiting.Add(-1)
			return false
		}
		l.byKey[key]++
		l.mu.Unlock()
	}
	return true
}

// Release returns a slot taken by TryAcquire with the same ctx.
func (l *LongPolls) Release(ctx context.Context) {
	if l == nil {
		return
	}
	if key := principal.Name(ctx); key != "" {
		l.mu.Lock()
		if n := l.byKey[key] - 1; n > 0 {
			l.byKey[key] = n
		} else {
			delete(l.byKey, key)
		}
		l.mu.Unlock()
	}
	l.waiting.Add(-1)
}

// Waiting is the number of slots taken.
func (l *LongPolls) Waiting() int64 {
	if l == nil {
		return 0
	}
	return l.waiting.Load()
}
