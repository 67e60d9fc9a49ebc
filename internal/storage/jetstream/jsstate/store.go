// store.go: the Store, its ticket queue and its committer. Open, Write,
// Wait, Lost, Failures, Start and Close; the committer goroutine takes the
// queue round by round (snapshots.go writes a round, adopt.go's controls
// are rounds of their own) and settles the tickets.
//
// Locks: Store.mu guards the queue (pending, next, settled, lost,
// failures, hold, closed, recovered) and the scoped-mode maps of what is
// adopted and what was lost (adopted, groupLost, adoptedParts, partLost);
// Store.cond waits on it. The committer never holds it while it writes.
// groupWatch.mu (groupwatch.go) is a leaf.

package jsstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// ErrStorage wraps every failure to read or write the bucket (the cluster
// unreachable, a timeout, a refused write).
var ErrStorage = errors.New("share state storage error")

// ErrConflict: a snapshot in the bucket changed since this instance read or
// wrote it — another instance writes the same share state. The entries of
// the commit are lost; this instance must stop serving those groups.
var ErrConflict = errors.New("share state changed by another writer")

// Options configures a Store.
type Options struct {
	// Prefix names the bucket, <prefix>_SHARE (default "SL").
	Prefix string
	// Replicas of the bucket's stream (default 3).
	Replicas int
	// Timeout bounds opening the store and each commit round (default 10 s),
	// and the reads of AdoptGroup, AdoptPartition, GroupIDs and LiveGroup
	// when their context has no deadline.
	Timeout time.Duration
	// Scoped opens the store without reading the bucket: Recovered is
	// empty, and the instance loads and owns only the groups it adopts
	// (AdoptGroup) until it drops them (DropGroup) — for when each group
	// is coordinated by one of several instances. See the package
	// documentation.
	Scoped bool
	// PartitionOwners (with Scoped only) splits a group's share state
	// between two scopes: AdoptGroup holds only the group's key (epoch and
	// config) and AdoptPartition holds one partition's share-partition
	// keys of every group, for when a share-partition's state is served by
	// the owner of its partition, whoever coordinates its group. See the
	// package documentation, "Partition owners".
	PartitionOwners bool
	// OnFenced, when set (scoped mode), is called — on a goroutine of its
	// own — for each adopted group key or adopted partition whose write
	// this store found taken by another instance (ErrConflict): the
	// instance no longer owns it, or the key was created behind its back
	// (a previous owner's late write). The caller gives the item up at
	// once, so that it is adopted again, from what the bucket holds.
	OnFenced func(Fenced)
}

// Fenced names what a refused write was about: a group's key (Group,
// GroupKey) or a partition's share state (TopicID, Partition; Group is the
// group whose key of it was refused).
type Fenced struct {
	Group     string
	GroupKey  bool
	TopicID   string
	Partition int32
}

// Store is a sharestate.Store whose durable form is one snapshot per group
// and per share-partition in a JetStream KV bucket; see the package
// documentation.
type Store struct {
	kv      njs.KeyValue
	timeout time.Duration
	scoped  bool
	owners  bool // Options.PartitionOwners
	// onFenced is Options.OnFenced.
	onFenced func(Fenced)

	groupWatch groupWatch // LiveGroupIDs (groupwatch.go)

	mu        sync.Mutex
	cond      *sync.Cond
	pending   []pendingEntry // written, not yet committed, in ticket order
	next      uint64         // the last ticket given
	settled   uint64         // every ticket up to it is settled
	lost      []lostRange    // settled tickets that failed, ascending
	failures  uint64
	hold      bool // Start's snapshot is being written: commit nothing from the reset marker on
	closed    bool
	recovered *sharestate.State
	done      chan struct{} // closed when the committer has stopped

	// adopted holds, in scoped mode, the groups adopted and not dropped:
	// the control of the AdoptGroup call that adopts each.
	adopted map[string]*control
	// groupLost is, in scoped mode, the first failure of an entry of each
	// group since the group was last adopted or dropped (DropGroup's
	// result). The committer sets it when it settles a failed round.
	groupLost map[string]error
	// adoptedParts and partLost are adopted and groupLost for partitions,
	// in partition-owners mode: there groupLost counts only the group-level
	// entries (KindGroup, KindGroupDelete) and partLost the share-partition
	// entries, by partition.
	adoptedParts map[partKey]*control
	partLost     map[partKey]error

	// ownGroups and ownParts are, in partition-owners mode, the groups and
	// partitions adopted and not dropped as of the round being committed
	// (applyControl sets them in ticket order): the keys whose revisions
	// durable keeps. Only the committer goroutine uses them.
	ownGroups map[string]bool
	ownParts  map[partKey]bool

	// durable is what the bucket holds, as this instance wrote or read it:
	// in scoped mode only the groups it adopted or wrote itself. Only the
	// committer goroutine uses it after Open.
	durable durableMap
}

var _ sharestate.Store = (*Store)(nil)

// pendingEntry is an entry waiting for its commit round, or a reset marker
// (Start's snapshot follows it and replaces everything before it), or a
// no-op (a reset marker whose snapshot failed), or a control.
type pendingEntry struct {
	ticket uint64
	e      sharestate.Entry
	reset  bool
	noop   bool
	ctl    *control
}

// control is AdoptGroup's or DropGroup's (or AdoptPartition's or
// DropPartition's) change of durable: a round of its own, so the committer
// applies it in ticket order, after every entry queued before it is
// settled, and writes nothing.
type control struct {
	group string
	part  *partKey // AdoptPartition, DropPartition: the partition (group is unused)
	adopt bool     // AdoptGroup: install dg; DropGroup: forget the group
	dg    *dGroup  // the group's snapshots as AdoptGroup read them; nil: none
	// parts are the partition's keys as AdoptPartition read them, by group.
	parts map[string]*dPart
	// lost is the group's (or partition's) entry failure the committer
	// found when it applied the control (groupLost, partLost); set before
	// the control's ticket is settled.
	lost error
}

type lostRange struct {
	lo, hi uint64
	err    error
}

// Open opens the store on the bucket <prefix>_SHARE (created if absent)
// and recovers the state its snapshots hold.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Store, error) {
	if err := sljs.BucketDefaults(&o.Prefix, &o.Replicas, &o.Timeout); err != nil {
		return nil, err
	}
	if o.PartitionOwners && !o.Scoped {
		return nil, errors.New("share state store: Options.PartitionOwners needs Options.Scoped")
	}
	js, err := njs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w (%w)", err, ErrStorage)
	}
	ctx, cancel := withTimeout(ctx, o.Timeout)
	defer cancel()
	bucket := sljs.ShareBucket(o.Prefix)
	kv, err := sljs.OpenKV(ctx, js, bucket, "sharelog share-group state snapshots", o.Replicas)
	if err != nil {
		return nil, sljs.Wrap(ctx, "open the share state bucket "+bucket, err, ErrStorage)
	}
	s := &Store{kv: kv, timeout: o.Timeout, scoped: o.Scoped, owners: o.PartitionOwners, onFenced: o.OnFenced, durable: make(durableMap), done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	if o.Scoped {
		s.recovered = &sharestate.State{}
		s.adopted = make(map[string]*control)
		s.groupLost = make(map[string]error)
		if o.PartitionOwners {
			s.adoptedParts = make(map[partKey]*control)
			s.partLost = make(map[partKey]error)
			s.ownGroups = make(map[string]bool)
			s.ownParts = make(map[partKey]bool)
		}
	} else if err := s.load(ctx); err != nil {
		return nil, err
	}
	go s.committer()
	return s, nil
}

// withTimeout bounds ctx by d when it has no deadline of its own.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// Recovered implements sharestate.Store.
func (s *Store) Recovered() *sharestate.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recovered
}

// Write implements sharestate.Store: the entry joins the next commit round.
func (s *Store) Write(e sharestate.Entry) (uint64, error) {
	e.Ranges = slices.Clone(e.Ranges)
	e.Config = cloneConfig(e.Config)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, sharestate.ErrClosed
	}
	s.next++
	s.pending = append(s.pending, pendingEntry{ticket: s.next, e: e})
	s.cond.Broadcast()
	return s.next, nil
}

// Wait implements sharestate.Store: it returns once the commit round
// holding ticket has written every snapshot it changed (a write is
// acknowledged by JetStream once a quorum of replicas stored it — on disk
// when the servers run with sync_interval: always).
func (s *Store) Wait(ticket uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ticket > s.next {
		return fmt.Errorf("share state store: ticket %d was never given", ticket)
	}
	for s.settled < ticket {
		s.cond.Wait()
	}
	if err := s.lostErr(ticket); err != nil {
		return fmt.Errorf("share state store: %w", err)
	}
	return nil
}

// Lost implements sharestate.Store.
func (s *Store) Lost(ticket uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ticket != 0 && ticket <= s.settled && s.lostErr(ticket) != nil
}

func (s *Store) lostErr(ticket uint64) error {
	i, _ := slices.BinarySearchFunc(s.lost, ticket, func(r lostRange, t uint64) int {
		switch {
		case r.hi < t:
			return -1
		case r.lo > t:
			return 1
		}
		return 0
	})
	if i < len(s.lost) && s.lost[i].lo <= ticket && ticket <= s.lost[i].hi {
		return s.lost[i].err
	}
	return nil
}

// Failures implements sharestate.Store: failed commit rounds.
func (s *Store) Failures() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// Start implements sharestate.Store: snap's entries replace every snapshot
// in the bucket (what it does not write is deleted), committed as one round.
// Snapshots never grow (one value per key), so there is no later
// compaction and snap is called only here.
//
// What it deletes are the snapshots in durable: in scoped mode those of
// the groups adopted so far (or written by this instance), so nothing when
// Start follows Open; the groups other instances coordinate are never
// touched. In partition-owners mode those are the keys held: the adopted
// groups' keys and the adopted partitions' share-partition keys.
func (s *Store) Start(snap func() error) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return sharestate.ErrClosed
	}
	s.next++
	marker := s.next
	s.pending = append(s.pending, pendingEntry{ticket: marker, reset: true})
	s.hold = true
	s.mu.Unlock()

	err := snap()

	s.mu.Lock()
	s.hold = false
	if err != nil {
		// Keep the snapshot's entries (full states, harmless on top of the
		// bucket) but not the reset: nothing is deleted.
		for i := range s.pending {
			if s.pending[i].ticket == marker {
				s.pending[i].reset, s.pending[i].noop = false, true
			}
		}
	}
	last := s.next
	s.cond.Broadcast()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.Wait(last); err != nil {
		return fmt.Errorf("startup snapshot: %w", err)
	}
	return nil
}

// enqueue gives p the next ticket and queues it; s.mu is held.
func (s *Store) enqueue(p pendingEntry) uint64 {
	s.next++
	p.ticket = s.next
	s.pending = append(s.pending, p)
	s.cond.Broadcast()
	return s.next
}

// Close implements sharestate.Store: it commits what is pending and stops.
func (s *Store) Close() error {
	s.groupWatch.once.Do(func() {}) // no watch starts from now on
	if s.groupWatch.stop != nil {
		s.groupWatch.stop()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	s.hold = false
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
	return nil
}

// committer takes everything pending as one round, writes it and settles
// its tickets, until the store is closed and drained.
func (s *Store) committer() {
	defer close(s.done)
	for {
		s.mu.Lock()
		var n int
		for {
			n = len(s.pending)
			if s.hold {
				n = slices.IndexFunc(s.pending, func(p pendingEntry) bool { return p.reset })
			}
			if n > 0 || (s.closed && len(s.pending) == 0) {
				break
			}
			s.cond.Wait()
		}
		if n == 0 {
			s.mu.Unlock()
			return
		}
		// A control is a round of its own, after the entries before it.
		if i := slices.IndexFunc(s.pending[:n], func(p pendingEntry) bool { return p.ctl != nil }); i >= 0 {
			n = max(i, 1)
		}
		batch := slices.Clone(s.pending[:n])
		s.pending = slices.Delete(s.pending, 0, n)
		s.mu.Unlock()

		var err error
		ctl := batch[0].ctl
		if ctl != nil {
			s.applyControl(ctl)
		} else {
			err = s.commit(batch)
		}

		s.mu.Lock()
		lo, hi := batch[0].ticket, batch[len(batch)-1].ticket
		if err != nil {
			s.lost = append(s.lost, lostRange{lo: lo, hi: hi, err: err})
			s.failures++
			if s.scoped {
				s.noteLost(batch, err)
			}
		}
		switch {
		case ctl != nil && ctl.part != nil:
			ctl.lost = s.partLost[*ctl.part]
			delete(s.partLost, *ctl.part)
		case ctl != nil:
			ctl.lost = s.groupLost[ctl.group]
			delete(s.groupLost, ctl.group)
		}
		s.settled = hi
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// noteLost records err, the failure of batch, as the first loss of each
// scope unit batch has an entry of that has none yet: its group
// (groupLost) — or, in partition-owners mode, for a share-partition entry,
// its partition (partLost). s.mu is held.
func (s *Store) noteLost(batch []pendingEntry, err error) {
	for _, pe := range batch {
		if pe.reset || pe.noop {
			continue
		}
		if s.owners && !groupLevel(pe.e.Kind) {
			k := partKey{topicID: pe.e.TopicID, part: pe.e.Partition}
			if _, ok := s.partLost[k]; !ok {
				s.partLost[k] = err
			}
			continue
		}
		if _, ok := s.groupLost[pe.e.Group]; !ok {
			s.groupLost[pe.e.Group] = err
		}
	}
}

// groupLevel reports whether entries of kind k are the group's own
// (its key's), not a share-partition's.
func groupLevel(k sharestate.Kind) bool {
	return k == sharestate.KindGroup || k == sharestate.KindGroupDelete
}

// cloneConfig copies every field of c (sharestate.GroupConfig's fields, as
// sharestate's Image copies them), so Write retains nothing of the caller's.
func cloneConfig(c sharestate.GroupConfig) sharestate.GroupConfig {
	i32 := func(v *int32) *int32 {
		if v == nil {
			return nil
		}
		x := *v
		return &x
	}
	out := sharestate.GroupConfig{RecordLockDurationMs: i32(c.RecordLockDurationMs), DeliveryCountLimit: i32(c.DeliveryCountLimit),
		PartitionMaxRecordLocks: i32(c.PartitionMaxRecordLocks), SessionTimeoutMs: i32(c.SessionTimeoutMs), HeartbeatIntervalMs: i32(c.HeartbeatIntervalMs)}
	if c.AutoOffsetReset != nil {
		x := *c.AutoOffsetReset
		out.AutoOffsetReset = &x
	}
	if c.DeadLetterTopic != nil {
		x := *c.DeadLetterTopic
		out.DeadLetterTopic = &x
	}
	if c.Ordering != nil {
		o := *c.Ordering
		out.Ordering = &o
	}
	if c.IsolationLevel != nil {
		x := *c.IsolationLevel
		out.IsolationLevel = &x
	}
	out.RedeliveryBackoffInitialMs, out.RedeliveryBackoffMaxMs = i32(c.RedeliveryBackoffInitialMs), i32(c.RedeliveryBackoffMaxMs)
	if c.RedeliveryBackoffMultiplier != nil {
		m := *c.RedeliveryBackoffMultiplier
		out.RedeliveryBackoffMultiplier = &m
	}
	return out
}
