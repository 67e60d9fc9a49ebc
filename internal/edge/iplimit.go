package edge

import (
	"container/list"
	"sync"

	"golang.org/x/time/rate"
)

// IPLimiter is a token bucket per client IP in a bounded LRU map: an
// evicted IP starts again with a full bucket, which bounds memory whatever
// the number of addresses. It rate-limits what needs no credential (health
// checks and probes) per client.
type IPLimiter struct {
	limit rate.Limit
	burst int
	max   int

	mu  sync.Mutex
	lru *list.List // of *ipBucket, most recent first
	m   map[string]*list.Element
}

type ipBucket struct {
	ip  string
	lim *rate.Limiter
}

// NewIPLimiter allows limit events a second per IP, in bursts of burst,
// keeping the buckets of at most max IPs.
func NewIPLimiter(limit rate.Limit, burst, max int) *IPLimiter {
	return &IPLimiter{limit: limit, burst: burst, max: max, lru: list.New(), m: make(map[string]*list.Element)}
}

// Allow reports whether ip may have one more event now, and spends it.
func (l *IPLimiter) Allow(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[ip]; ok {
		l.lru.MoveToFront(e)
		return e.Value.(*ipBucket).lim.Allow()
	}
	if l.lru.Len() >= l.max {
		oldest := l.lru.Back()
		l.lru.Remove(oldest)
		delete(l.m, oldest.Value.(*ipBucket).ip)
	}
	b := &ipBucket{ip: ip, lim: rate.NewLimiter(l.limit, l.burst)}
	l.m[ip] = l.lru.PushFront(b)
	return b.lim.Allow()
}

// IPSlots counts the open streams of each client IP, up to max each. The
// map holds only IPs with an open stream.
type IPSlots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

// NewIPSlots allows max open streams per IP.
func NewIPSlots(max int) *IPSlots { return &IPSlots{max: max, n: make(map[string]int)} }

// Acquire takes a slot of ip, false if it holds max already.
func (s *IPSlots) Acquire(ip string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[ip] >= s.max {
		return false
	}
	s.n[ip]++
	return true
}

// Release gives back a slot Acquire took.
func (s *IPSlots) Release(ip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[ip]--; s.n[ip] <= 0 {
		delete(s.n, ip)
	}
}
