// Package sessioncache is the share session cache of KIP-932 share groups:
// at most one session per (group, member), a bounded
// number of sessions (in total and per client, so that one client cannot
// take every slot), the session epoch sequence shared by ShareFetch and
// ShareAcknowledge, in-flight accounting and idle eviction.
//
// The cache knows nothing about share-partitions. A session carries an
// opaque State owned by the caller and guarded by the session's Mu; when a
// session ends — by close, replacement, idle eviction, group deletion or
// shutdown — the cache marks it ended (under Mu), closes its Done channel
// and calls Config.OnEnd, which releases whatever the session held.
//
// # Locks
//
// Cache.mu, then Session.Mu. Session.Mu is a leaf for the cache; callers may
// take it under their own locks (sharegroup takes it under a share-partition
// lock, to register ownership atomically with the "not ended" check).
// OnEnd is never called with Cache.mu held.
//
// # Ownership
//
// A key is bound to the principal (principal.User) that first used it, by
// opening a session or, through BindMember, by joining the group as that
// member. While the binding lasts — as long as the key has a session or a
// member — another principal's Open, Admit and AdmitClose fail with
// ErrNotFound and change nothing: it can neither replace, advance nor close
// the owner's session, nor learn its epoch. A key with neither session nor
// member is unbound, and the next principal to use it owns it. Within one
// principal nothing changes.
package sessioncache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/internal/principal"
)

// Key identifies a session: at most one per (group, member).
type Key struct {
	Group  string
	Member string
}

// Errors of the session step. The share-group layer maps them to request
// reasons (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
// SHARE_SESSION_LIMIT_REACHED).
var (
	ErrNotFound = errors.New("share session not found")
	ErrLimit    = errors.New("share session cache is full")
	ErrClosed   = errors.New("share session cache closed")
	// ErrPrincipalLimit is ErrLimit for one client: the client already holds
	// Config.MaxPerPrincipal sessions, while others may still open theirs.
	ErrPrincipalLimit = fmt.Errorf("%w for this client", ErrLimit)
)

// EpochError is an epoch that is not the session's next expected one. The
// session is unchanged: the request may be retried.
type EpochError struct {
	Expected int32
}

func (e *EpochError) Error() string {
	return "share session epoch mismatch: expected " + strconv.Itoa(int(e.Expected))
}

// EndReason says why a session ended.
type EndReason int

const (
	EndClosed       EndReason = iota // epoch -1 on ShareFetch or ShareAcknowledge
	EndReplaced                      // an epoch-0 ShareFetch of the same key
	EndEvicted                       // idle past IdleTimeout
	EndGroupDeleted                  // its group was deleted
	EndShutdown                      // Cache.Close
	EndMoved                         // its group moved to another instance
)

func (r EndReason) String() string {
	switch r {
	case EndClosed:
		return "closed"
	case EndReplaced:
		return "replaced"
	case EndEvicted:
		return "evicted"
	case EndGroupDeleted:
		return "group deleted"
	case EndShutdown:
		return "shutdown"
	case EndMoved:
		return "group moved"
	}
	return "EndReason(" + strconv.Itoa(int(r)) + ")"
}

// Config configures a Cache.
type Config[T any] struct {
	// Capacity is the maximum number of sessions (--max-share-sessions).
	Capacity int
	// MaxPerPrincipal is the most sessions one client (principal.Name of
	// the opening request's context) may hold, so that one client cannot
	// take every slot (--max-share-sessions-per-principal). 0 means half
	// of Capacity (at least 1); requests without a client identity are
	// bounded by Capacity only.
	MaxPerPrincipal int
	// IdleTimeout ends a session that has had no request in flight for this
	// long, counted from the completion of its last request.
	IdleTimeout time.Duration
	// SweepInterval is the period of the idle sweep; default IdleTimeout/16,
	// at least 1ms and at most 1s.
	SweepInterval time.Duration
	// OnEnd runs once per session after it ended (Ended reports true and
	// Done is closed). It runs on the goroutine that ended the session —
	// the caller of Open, End, EndIf or Close, or the sweeper — and never
	// under the cache's lock.
	OnEnd func(s *Session[T], why EndReason)
}

// Cache holds the sessions. All methods are safe for concurrent use.
type Cache[T any] struct {
	cfg Config[T]

	mu     sync.Mutex
	m      map[Key]*Session[T]
	owned  map[string]int   // live sessions per client identity (non-empty only)
	bound  map[Key]*binding // the owning principal of every key in use
	nextID uint64
	closed bool

	stop chan struct{}
	wg   sync.WaitGroup
}

// binding is the principal a key is bound to, and whether a group member
// holds it (besides a session, if c.m has one).
type binding struct {
	user   string
	member bool
}

// Session is one share session.
type Session[T any] struct {
	key   Key
	id    uint64
	owner string // principal.Name of the opening request; "" = unknown
	user  string // principal.User of the opening request: the key's owner
	done  chan struct{}

	fetches atomic.Uint64 // ShareFetch requests admitted so far

	// Mu guards State and the ended flag. The cache sets ended under Mu
	// before anything else observes the end, so a caller holding Mu and
	// seeing EndedLocked() == false knows OnEnd has not yet run its course
	// past that point (see package doc).
	Mu    sync.Mutex
	ended bool
	State T

	// Guarded by Cache.mu.
	next     int32     // next expected epoch, 1..MaxInt32
	inFlight int       // admitted requests not yet Done
	lastDone time.Time // completion of the last request (monotonic)
}

// New returns a cache and starts its idle sweeper (stopped by Close).
func New[T any](cfg Config[T]) *Cache[T] {
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = min(max(cfg.IdleTimeout/16, time.Millisecond), time.Second)
	}
	if cfg.MaxPerPrincipal <= 0 {
		cfg.MaxPerPrincipal = max(cfg.Capacity/2, 1)
	}
	c := &Cache[T]{cfg: cfg, m: make(map[Key]*Session[T]), owned: make(map[string]int), bound: make(map[Key]*binding),
		stop: make(chan struct{})}
	if cfg.IdleTimeout > 0 {
		c.wg.Add(1)
		go c.sweepLoop()
	}
	return c
}

// Key returns the session's key.
func (s *Session[T]) Key() Key { return s.key }

// User is the principal that opened the session (and owns its key).
func (s *Session[T]) User() string { return s.user }

// ID is unique among all sessions of the cache, never reused and never 0:
// share-partitions record it as the owner of acquired records.
func (s *Session[T]) ID() uint64 { return s.id }

// Done is closed when the session ends.
func (s *Session[T]) Done() <-chan struct{} { return s.done }

// Ended reports whether the session has ended.
func (s *Session[T]) Ended() bool {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.ended
}

// EndedLocked is Ended for a caller that holds Mu.
func (s *Session[T]) EndedLocked() bool { return s.ended }

// NextFetchIndex counts the session's ShareFetch requests: it returns k for
// the k-th (0 for the opening one), for partition rotation.
func (s *Session[T]) NextFetchIndex() uint64 { return s.fetches.Add(1) - 1 }

// nextEpoch is the epoch after e: MaxInt32 wraps to 1, never 0 or negative.
func nextEpoch(e int32) int32 {
	if e == math.MaxInt32 {
		return 1
	}
	return e + 1
}

// Open admits an epoch-0 request: it ends the key's existing session (its
// OnEnd completes before Open returns, so the replaced session's records are
// released before the new one fetches) and creates a new one with next
// epoch 1 and this request in flight. When a new slot is needed and the
// cache is full it first evicts every idle session; if still full it waits
// maxWait (or until ctx ends) and fails with ErrLimit — a slot freed during
// the wait is not taken. A client (principal.Name(ctx)) that already holds
// MaxPerPrincipal sessions is refused the same way with ErrPrincipalLimit,
// before anything changes; replacing its own session does not count as a
// new one. A key bound to another principal (see Ownership) is refused
// with ErrNotFound before anything else. init, if not nil, prepares State
// before the session becomes visible.
func (c *Cache[T]) Open(ctx context.Context, key Key, maxWait time.Duration, init func(*T)) (*Session[T], error) {
	var ended []*Session[T]
	var why EndReason
	owner, user := principal.Name(ctx), principal.User(ctx)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if b := c.bound[key]; b != nil && b.user != user {
		c.mu.Unlock()
		return nil, ErrNotFound
	}
	old := c.m[key]
	if owner != "" {
		held := c.owned[owner]
		if old != nil && old.owner == owner {
			held-- // replaced, not added
		}
		if held >= c.cfg.MaxPerPrincipal {
			c.mu.Unlock()
			if err := c.waitFull(ctx, maxWait); !errors.Is(err, ErrLimit) {
				return nil, err
			}
			return nil, ErrPrincipalLimit
		}
	}
	if old != nil {
		c.removeLocked(old)
		ended, why = append(ended, old), EndReplaced
	} else if len(c.m) >= c.cfg.Capacity {
		ended, why = c.collectIdleLocked(time.Now()), EndEvicted
		if len(c.m) >= c.cfg.Capacity {
			c.mu.Unlock()
			c.finish(ended, why)
			return nil, c.waitFull(ctx, maxWait)
		}
	}
	c.nextID++
	s := &Session[T]{key: key, id: c.nextID, owner: owner, user: user, done: make(chan struct{}), next: 1, inFlight: 1}
	if init != nil {
		init(&s.State)
	}
	c.m[key] = s
	if c.bound[key] == nil {
		c.bound[key] = &binding{user: user}
	}
	if owner != "" {
		c.owned[owner]++
	}
	c.mu.Unlock()
	c.finish(ended, why)
	return s, nil
}

// waitFull holds a refused epoch-0 request for maxWait.
func (c *Cache[T]) waitFull(ctx context.Context, maxWait time.Duration) error {
	if maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.stop:
			return ErrClosed
		}
	}
	return ErrLimit
}

// Admit admits an incremental request (epoch 1..MaxInt32): the check and
// the advance are one atomic step, so of two requests with the same epoch
// exactly one is admitted. A rejected request changes nothing. onAdmit, if
// not nil, runs within that step (with Mu held), so changes it makes to
// State — a ShareFetch's partition adds and forgets — apply in epoch order.
// Another principal than the session's (principal.User(ctx)) gets
// ErrNotFound, as if there were no session.
func (c *Cache[T]) Admit(ctx context.Context, key Key, epoch int32, onAdmit func(*Session[T])) (*Session[T], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	s := c.m[key]
	if s == nil || s.user != principal.User(ctx) {
		return nil, ErrNotFound
	}
	if epoch != s.next {
		return nil, &EpochError{Expected: s.next}
	}
	s.next = nextEpoch(epoch)
	s.inFlight++
	if onAdmit != nil {
		s.Mu.Lock()
		onAdmit(s)
		s.Mu.Unlock()
	}
	return s, nil
}

// AdmitClose admits a closing request (epoch -1): no epoch comparison. The
// caller processes its acknowledgements, then calls End and Done. Another
// principal than the session's gets ErrNotFound.
func (c *Cache[T]) AdmitClose(ctx context.Context, key Key) (*Session[T], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	s := c.m[key]
	if s == nil || s.user != principal.User(ctx) {
		return nil, ErrNotFound
	}
	s.inFlight++
	return s, nil
}

// Done marks the completion of an admitted request; the idle timeout counts
// from the last completion.
func (c *Cache[T]) Done(s *Session[T]) {
	c.mu.Lock()
	s.inFlight--
	s.lastDone = time.Now()
	c.mu.Unlock()
}

// End ends s (if it has not ended yet) and runs OnEnd before returning.
func (c *Cache[T]) End(s *Session[T], why EndReason) {
	c.mu.Lock()
	removed := c.removeLocked(s)
	c.mu.Unlock()
	if removed {
		c.finish([]*Session[T]{s}, why)
	}
}

// EndIf ends every session whose key matches (e.g. the sessions of a
// deleted group).
func (c *Cache[T]) EndIf(match func(Key) bool, why EndReason) {
	var ended []*Session[T]
	c.mu.Lock()
	for k, s := range c.m {
		if match(k) {
			c.removeLocked(s)
			ended = append(ended, s)
		}
	}
	c.mu.Unlock()
	c.finish(ended, why)
}

// EndIfSession ends every session for which match returns true; match is
// called with the session's Mu held, so it may read State (e.g. to end the
// sessions bound to one incarnation of a group, not those of a group
// created under the same ID since).
func (c *Cache[T]) EndIfSession(match func(*Session[T]) bool, why EndReason) {
	var ended []*Session[T]
	c.mu.Lock()
	for _, s := range c.m {
		s.Mu.Lock()
		ok := match(s)
		s.Mu.Unlock()
		if ok {
			c.removeLocked(s)
			ended = append(ended, s)
		}
	}
	c.mu.Unlock()
	c.finish(ended, why)
}

// BindMember records that a group member of principal user holds key, so
// that the key stays bound to user while the member exists, session or not.
// It reports false, changing nothing, when the key is bound to another
// principal (by a session or a member).
func (c *Cache[T]) BindMember(key Key, user string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.bound[key]
	if b == nil {
		c.bound[key] = &binding{user: user, member: true}
		return true
	}
	if b.user != user {
		return false
	}
	b.member = true
	return true
}

// UnbindMember records that the key's member left the group; the binding
// ends with the key's session, if it has one, else now.
func (c *Cache[T]) UnbindMember(key Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.bound[key]; b != nil {
		b.member = false
		if c.m[key] == nil {
			delete(c.bound, key)
		}
	}
}

// BoundTo returns the principal the key is bound to, if any.
func (c *Cache[T]) BoundTo(key Key) (user string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.bound[key]; b != nil {
		return b.user, true
	}
	return "", false
}

// Lookup returns the key's session and its next expected epoch.
func (c *Cache[T]) Lookup(key Key) (s *Session[T], next int32, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s = c.m[key]
	if s == nil {
		return nil, 0, false
	}
	return s, s.next, true
}

// SetNextEpoch sets the next expected epoch of the key's session. It
// exists for tests (the epoch wrap after 2147483647) and reports whether
// the session exists.
func (c *Cache[T]) SetNextEpoch(key Key, next int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.m[key]
	if s == nil || next < 1 {
		return false
	}
	s.next = next
	return true
}

// Len is the number of live sessions.
func (c *Cache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Close stops the sweeper and ends every session. Later Open and Admit
// calls fail with ErrClosed.
func (c *Cache[T]) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.stop)
	ended := make([]*Session[T], 0, len(c.m))
	for _, s := range c.m {
		c.removeLocked(s)
		ended = append(ended, s)
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.finish(ended, EndShutdown)
}

// removeLocked takes s out of the map and marks it ended; it reports false
// if s had already ended. c.mu is held.
func (c *Cache[T]) removeLocked(s *Session[T]) bool {
	s.Mu.Lock()
	already := s.ended
	s.ended = true
	s.Mu.Unlock()
	if already {
		return false
	}
	if c.m[s.key] == s {
		delete(c.m, s.key)
		if b := c.bound[s.key]; b != nil && !b.member {
			delete(c.bound, s.key)
		}
		if s.owner != "" {
			if c.owned[s.owner]--; c.owned[s.owner] <= 0 {
				delete(c.owned, s.owner)
			}
		}
	}
	return true
}

// finish completes the end of removed sessions, outside c.mu.
func (c *Cache[T]) finish(ended []*Session[T], why EndReason) {
	for _, s := range ended {
		close(s.done)
		if c.cfg.OnEnd != nil {
			c.cfg.OnEnd(s, why)
		}
	}
}

// collectIdleLocked removes and returns the sessions idle past the timeout:
// none in flight and the last completion at least IdleTimeout ago.
func (c *Cache[T]) collectIdleLocked(now time.Time) []*Session[T] {
	if c.cfg.IdleTimeout <= 0 {
		return nil
	}
	var idle []*Session[T]
	for _, s := range c.m {
		if s.inFlight == 0 && now.Sub(s.lastDone) >= c.cfg.IdleTimeout {
			c.removeLocked(s)
			idle = append(idle, s)
		}
	}
	return idle
}

func (c *Cache[T]) sweepLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.mu.Lock()
			idle := c.collectIdleLocked(time.Now())
			c.mu.Unlock()
			c.finish(idle, EndEvicted)
		}
	}
}
