package broker

import "sync/atomic"

// LongPolls bounds the Fetch and ShareFetch calls waiting for records at
// once, server-wide (--max-long-polls): each waiting call holds a goroutine,
// a timer and its request for up to max_wait_ms, so without a bound many
// clients could grow the server's memory without limit. A call that would
// wait while every slot is taken is answered at once instead, as if its
// max_wait_ms were 0: with what is there, possibly nothing, not an error.
// A nil *LongPolls has no bound.
type LongPolls struct {
	max     int64
	waiting atomic.Int64
}

// NewLongPolls returns a bound of max waiting calls (0: no call waits).
func NewLongPolls(max int) *LongPolls { return &LongPolls{max: int64(max)} }

// TryAcquire takes a slot; it reports false when all are taken.
func (l *LongPolls) TryAcquire() bool {
	if l == nil {
		return true
	}
	if l.waiting.Add(1) > l.max {
		l.waiting.Add(-1)
		return false
	}
	return true
}

// Release returns a slot taken by TryAcquire.
func (l *LongPolls) Release() {
	if l != nil {
		l.waiting.Add(-1)
	}
}

// Waiting is the number of slots taken.
func (l *LongPolls) Waiting() int64 {
	if l == nil {
		return 0
	}
	return l.waiting.Load()
}
