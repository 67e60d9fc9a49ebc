package jsstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// writeParallel is how many snapshot writes one commit round has in flight.
const writeParallel = 16

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

// durableMap is durable's type: the bucket's snapshots by group.
type durableMap map[string]*dGroup

// dGroup is one group as the bucket holds it.
type dGroup struct {
	rev   uint64 // revision of the group's key; 0 when the key is absent
	val   []byte
	parts map[partKey]*dPart
}

type dPart struct {
	rev uint64
	val []byte
}

type partKey struct {
	topicID string
	part    int32
}

// groupValue is the snapshot of a group: key g.<hex(group)>.
type groupValue struct {
	Epoch  int32                  `json:"epoch"`
	Config sharestate.GroupConfig `json:"config"`
}

// partValue is the snapshot of a share-partition: key
// p.<hex(group)>.<hex(topic id)>.<partition>.
type partValue struct {
	Topic       string             `json:"topic"`
	TopicID     string             `json:"topic_id"`
	Partition   int32              `json:"partition"`
	Initialized bool               `json:"initialized"`
	SPSO        int64              `json:"spso"`
	Ranges      []sharestate.Range `json:"ranges,omitempty"`
	Offline     string             `json:"offline,omitempty"`
}

func groupKey(g string) string { return "g." + sljs.HexKey(g) }

func partKeyName(g string, k partKey) string {
	return "p." + sljs.HexKey(g) + "." + sljs.HexKey(k.topicID) + "." + strconv.Itoa(int(k.part))
}

// Open opens the store on the bucket <prefix>_SHARE (created if absent)
// and recovers the state its snapshots hold.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Store, error) {
	if o.Prefix == "" {
		o.Prefix = sljs.DefaultPrefix
	}
	if err := sljs.CheckPrefix(o.Prefix); err != nil {
		return nil, err
	}
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
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
	var kv njs.KeyValue
	err = sljs.Retry(ctx, func(ctx context.Context) (err error) {
		kv, err = js.CreateKeyValue(ctx, njs.KeyValueConfig{
			Bucket:      bucket,
			Description: "sharelog share-group state snapshots",
			History:     1,
			Storage:     njs.FileStorage,
			Replicas:    o.Replicas,
		})
		return err
	})
	if errors.Is(err, njs.ErrBucketExists) {
		err = sljs.Retry(ctx, func(ctx context.Context) (err error) {
			kv, err = js.KeyValue(ctx, bucket)
			return err
		})
	}
	if err == nil {
		err = sljs.WaitLeader(ctx, js, "KV_"+bucket)
	}
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

// load reads every snapshot of the bucket into durable and builds the
// recovered state (readSnapshots).
func (s *Store) load(ctx context.Context) error {
	dm, st, err := watchSnapshots(ctx, s.syncMark, func(ctx context.Context) (njs.KeyWatcher, error) {
		return s.kv.WatchAll(ctx)
	})
	if err != nil {
		return sljs.Wrap(ctx, "read the share state bucket", err, ErrStorage)
	}
	s.durable, s.recovered = dm, st
	return nil
}

// errWatchEnded: a watch's subscription closed before the end of its
// initial values, so what it delivered is not all there is.
var errWatchEnded = errors.New("the watch ended before every snapshot was read")

// syncKey is the key every read of snapshots writes before it reads: the
// read is complete once its watch has delivered this write (package
// documentation, "Reads"). Its value is empty; it is no snapshot.
const syncKey = "sync"

// syncMark writes syncKey and returns the write's revision.
func (s *Store) syncMark(ctx context.Context) (uint64, error) {
	return s.kv.Put(ctx, syncKey, nil)
}

// watchSnapshots reads the snapshots of a watch that open starts, which
// must include syncKey, after writing syncKey with mark; it starts again
// (a new mark, a new watch) when the watch ends early (the stream's leader
// moved, a NATS node went away) until ctx ends: the partial read is
// dropped, never used.
//
// The mark is what makes the read complete. The watch is an ordered
// consumer, R1, which nats-server may place on any replica of the
// bucket's stream, a follower that has not applied the latest writes
// included: its initial values are that replica's, and can miss a write a
// quorum acknowledged. Every write acknowledged before the mark precedes
// it in the stream (a quorum stored it first), and a replica applies the
// stream in order: once the watch has delivered the mark (or a later write
// of syncKey), it has delivered every write before it of the keys it
// watches. Cheaper than asking the leader about each key, and it covers
// what a list of the leader's keys would not: a key the watch delivered
// deleted that was written again since.
func watchSnapshots(ctx context.Context, mark func(context.Context) (uint64, error), open func(context.Context) (njs.KeyWatcher, error)) (durableMap, *sharestate.State, error) {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		rev, err := mark(ctx)
		if err != nil {
			return nil, nil, err
		}
		w, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		dm, st, err := readSnapshots(ctx, w, rev)
		_ = w.Stop()
		if !errors.Is(err, errWatchEnded) {
			return dm, st, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(backoff):
		}
	}
}

// readSnapshots reads the snapshots w delivers up to the end of its initial
// values and up to syncKey at revision mark or later, whichever comes last
// (watchSnapshots): their revisions and values by group, and the state
// they hold. A key delivered deleted (a delete or purge marker) is absent,
// whatever w delivered of it before. A snapshot that cannot be decoded
// marks its share-partition offline (its state is lost) rather than
// failing the read; an undecodable group snapshot makes a group with no
// config (decodeGroup, partEntries).
func readSnapshots(ctx context.Context, w njs.KeyWatcher, mark uint64) (durableMap, *sharestate.State, error) {
	dm := make(durableMap)
	for initial, synced := true, false; initial || !synced; {
		var (
			e  njs.KeyValueEntry
			ok bool
		)
		select {
		case e, ok = <-w.Updates():
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		if !ok {
			// The subscription closed (the connection did) before the
			// end of the initial values: what was read is not all.
			return nil, nil, errWatchEnded
		}
		if e == nil { // the end of the initial values
			initial = false
			continue
		}
		if e.Key() == syncKey {
			synced = synced || e.Revision() >= mark
			continue
		}
		deleted := e.Operation() != njs.KeyValuePut
		tok := strings.Split(e.Key(), ".")
		switch {
		case len(tok) == 2 && tok[0] == "g":
			g, err := sljs.UnhexKey(tok[1])
			if err != nil {
				continue // not a key this store writes
			}
			dg := dm.group(g)
			dg.rev, dg.val = 0, nil
			if !deleted {
				dg.rev, dg.val = e.Revision(), slices.Clone(e.Value())
			}
		case len(tok) == 4 && tok[0] == "p":
			g, err1 := sljs.UnhexKey(tok[1])
			tid, err2 := sljs.UnhexKey(tok[2])
			pn, err3 := strconv.ParseInt(tok[3], 10, 32)
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			k := partKey{topicID: tid, part: int32(pn)}
			dg := dm.group(g)
			delete(dg.parts, k)
			if !deleted {
				dg.parts[k] = &dPart{rev: e.Revision(), val: slices.Clone(e.Value())}
			}
		}
	}
	im := sharestate.NewImage()
	var parts []sharestate.Entry
	for g, dg := range dm {
		if dg.rev == 0 && len(dg.parts) == 0 {
			delete(dm, g) // every key of it was delivered deleted
			continue
		}
		if dg.rev != 0 {
			ge := decodeGroup(g, dg.val)
			im.Apply(&ge)
		}
		for k, dp := range dg.parts {
			parts = partEntries(parts, g, k, dp.val)
		}
	}
	// Share-partitions after their groups: a group entry does not touch
	// them, but keep the order the replay rules expect.
	for i := range parts {
		im.Apply(&parts[i])
	}
	return dm, im.State(), nil
}

// decodeGroup returns the entry that rebuilds group g from its snapshot;
// an undecodable snapshot is a group with no config.
func decodeGroup(g string, val []byte) sharestate.Entry {
	var v groupValue
	_ = json.Unmarshal(val, &v)
	return sharestate.Entry{Kind: sharestate.KindGroup, Group: g, GroupEpoch: v.Epoch, Config: v.Config}
}

// partEntries appends to dst the full entries that rebuild share-partition
// k of group g from its snapshot; an undecodable snapshot is the
// share-partition offline (its state is lost).
func partEntries(dst []sharestate.Entry, g string, k partKey, val []byte) []sharestate.Entry {
	var v partValue
	if err := json.Unmarshal(val, &v); err != nil {
		v = partValue{TopicID: k.topicID, Partition: k.part, Offline: "its snapshot in the share state bucket is undecodable: " + err.Error()}
	}
	if v.Initialized {
		dst = append(dst, sharestate.Entry{Kind: sharestate.KindPartFull, Group: g, Topic: v.Topic, TopicID: v.TopicID,
			Partition: v.Partition, SPSO: v.SPSO, Ranges: v.Ranges})
	}
	if v.Offline != "" {
		dst = append(dst, sharestate.Entry{Kind: sharestate.KindPartOffline, Group: g, Topic: v.Topic, TopicID: v.TopicID,
			Partition: v.Partition, Reason: v.Offline})
	}
	return dst
}

func (dm durableMap) group(g string) *dGroup {
	dg := dm[g]
	if dg == nil {
		dg = &dGroup{parts: make(map[partKey]*dPart)}
		dm[g] = dg
	}
	return dg
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

// AdoptGroup makes this instance the coordinator of group's share state
// (scoped mode only): it reads the group's snapshots — and nothing else of
// the bucket — with the decoding rules of Open, and from then on the
// group's writes are conditional on the revisions read. It returns the
// group's recovered state, nil when the bucket holds nothing of it.
//
// With Options.PartitionOwners it reads and holds only the group's key
// (g.<hex(group)>): the GroupState it returns has the group's epoch and
// config and no share-partitions, which AdoptPartition gives to the
// owners of their partitions.
//
// ctx bounds the read (the store's timeout when ctx has no deadline). The
// revisions take effect in ticket order, after every entry written before
// the call is settled; AdoptGroup returns once they have, so write the
// group's entries after it returns. A Start whose snapshot is being taken
// delays it until the snapshot is written (so it must not be called from
// snap). Adopting a group that is adopted and not dropped is an error.
func (s *Store) AdoptGroup(ctx context.Context, group string) (*sharestate.GroupState, error) {
	if !s.scoped {
		return nil, errors.New("share state store: AdoptGroup needs a scoped store (Options.Scoped)")
	}
	h := sljs.HexKey(group)
	filter := []string{"g." + h, "p." + h + ".>"}
	if s.owners {
		filter = filter[:1]
	}
	c := &control{group: group, adopt: true}
	st, err := adoptIn(ctx, s, s.adopted, group, c, fmt.Sprintf("group %q", group),
		fmt.Sprintf("read group %q from the share state bucket", group), filter,
		func(dm durableMap) { c.dg = dm[group] })
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(st.Groups, func(g sharestate.GroupState) bool { return g.ID == group }); i >= 0 {
		return &st.Groups[i], nil
	}
	return nil, nil
}

// AdoptPartition makes this instance the owner of a partition's share
// state in every group (partition-owners mode only, Options.PartitionOwners):
// it reads the keys p.*.<hex(topicID)>.<partition> — one per group that has
// a share-partition of it, and nothing else of the bucket — with the
// decoding rules of Open, fences them as AdoptGroup does, and from then on
// their writes are conditional on the revisions read. It returns one
// GroupState per group with a key of the partition: its ID and that one
// share-partition's state; Config and GroupEpoch are zero (the group's key
// is its coordinator's, see AdoptGroup).
//
// ctx bounds the read (the store's timeout when ctx has no deadline). As
// with AdoptGroup, the revisions take effect in ticket order and
// AdoptPartition returns once they have; a Start whose snapshot is being
// taken delays it until the snapshot is written. Adopting a partition that
// is adopted and not dropped is an error.
func (s *Store) AdoptPartition(ctx context.Context, topicID string, partition int32) ([]sharestate.GroupState, error) {
	if !s.owners {
		return nil, errors.New("share state store: AdoptPartition needs a partition-owners store (Options.PartitionOwners)")
	}
	k := partKey{topicID: topicID, part: partition}
	c := &control{part: &k, adopt: true}
	filter := "p.*." + sljs.HexKey(topicID) + "." + strconv.Itoa(int(partition))
	st, err := adoptIn(ctx, s, s.adoptedParts, k, c, fmt.Sprintf("partition %d of topic id %s", partition, topicID),
		fmt.Sprintf("read partition %d of topic id %s from the share state bucket", partition, topicID), []string{filter},
		func(dm durableMap) {
			c.parts = make(map[string]*dPart)
			for g, dg := range dm {
				if dp := dg.parts[k]; dp != nil {
					c.parts[g] = dp
				}
			}
		})
	if err != nil {
		return nil, err
	}
	var out []sharestate.GroupState
	for _, gs := range st.Groups {
		if len(gs.Partitions) > 0 {
			out = append(out, sharestate.GroupState{ID: gs.ID, Partitions: gs.Partitions})
		}
	}
	return out, nil
}

// adoptIn is AdoptGroup's and AdoptPartition's common part: it registers
// c as adopting k in adopted (one of the store's maps of what is adopted;
// what names k in errors), reads the keys filter matches, fenced
// (readFenced; op names the read), and once Start's snapshot is not being
// taken has install put what was read into c (s.mu held), then applies c
// in ticket order and waits until it is. A failure or a drop meanwhile
// leaves k not adopted.
func adoptIn[K comparable](ctx context.Context, s *Store, adopted map[K]*control, k K, c *control, what, op string, filter []string,
	install func(durableMap)) (*sharestate.State, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, sharestate.ErrClosed
	}
	if adopted[k] != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("share state store: %s is adopted already", what)
	}
	adopted[k] = c
	s.mu.Unlock()

	dm, st, err := s.readFenced(ctx, op, filter)

	s.mu.Lock()
	defer s.mu.Unlock()
	for s.hold && !s.closed {
		s.cond.Wait()
	}
	switch {
	case err != nil:
	case s.closed:
		err = sharestate.ErrClosed
	case adopted[k] != c:
		err = fmt.Errorf("share state store: %s was dropped while it was being adopted", what)
	}
	if err != nil {
		if adopted[k] == c {
			delete(adopted, k)
		}
		return nil, err
	}
	install(dm)
	t := s.enqueue(pendingEntry{ctl: c})
	for s.settled < t {
		s.cond.Wait()
	}
	return st, nil
}

// readFenced reads the snapshots of the keys filter matches and rewrites
// each, unchanged, on condition of the revision read, so that the previous
// coordinator (or owner) — which may not know yet that it lost them (its
// lease expired under load) — can write none of them any more: its next
// write is an ErrConflict, and an acknowledgement it confirmed is in what
// was read. A key written in between makes the read start again. (Phase 1
// gets the same from its startup snapshot, which rewrites every key.)
func (s *Store) readFenced(ctx context.Context, op string, filter []string) (durableMap, *sharestate.State, error) {
	ctx, cancel := withTimeout(ctx, s.timeout)
	defer cancel()
	for {
		dm, st, err := s.readKeys(ctx, op, filter)
		if err != nil {
			return nil, nil, err
		}
		err = s.touch(ctx, dm)
		if err == nil {
			return dm, st, nil
		}
		if !errors.Is(err, ErrConflict) || ctx.Err() != nil {
			return nil, nil, err
		}
	}
}

// touch rewrites the keys of dm with their values, each on condition of
// its revision, and records the new revisions in dm.
func (s *Store) touch(ctx context.Context, dm durableMap) error {
	for group, dg := range dm {
		if dg.rev != 0 {
			rev, err := s.put(ctx, &kvWrite{key: groupKey(group), val: dg.val, rev: dg.rev})
			if err != nil {
				return err
			}
			dg.rev = rev
		}
		for k, dp := range dg.parts {
			rev, err := s.put(ctx, &kvWrite{key: partKeyName(group, k), val: dp.val, rev: dp.rev})
			if err != nil {
				return err
			}
			dp.rev = rev
		}
	}
	return nil
}

// readKeys reads the snapshots of the keys filter matches (subjects of the
// package documentation's layout): g.<hex(group)> and p.<hex(group)>.> for
// AdoptGroup, p.*.<hex(topic id)>.<partition> for AdoptPartition.
func (s *Store) readKeys(ctx context.Context, op string, filter []string) (durableMap, *sharestate.State, error) {
	dm, st, err := watchSnapshots(ctx, s.syncMark, func(ctx context.Context) (njs.KeyWatcher, error) {
		// A copy (WatchFiltered prefixes the keys of the slice it is given
		// in place, and readFenced reads again with the same filter), and
		// syncKey, whose mark ends the read.
		return s.kv.WatchFiltered(ctx, append(slices.Clone(filter), syncKey))
	})
	if err != nil {
		return nil, nil, sljs.Wrap(ctx, op, err, ErrStorage)
	}
	return dm, st, nil
}

// DropGroup ends this instance's coordination of group (scoped mode only),
// to hand it over to another instance: it waits until every entry written
// before the call is settled (written or lost), then forgets the group's
// revisions, in ticket order. It returns the first failure of an entry of
// group since the group was last adopted or dropped (entries of other
// groups do not count) — nil when all of them were written — so the
// caller knows whether the state it hands over is complete. Dropping a
// group that is not adopted only settles and forgets.
//
// Afterwards an entry of group is written as for a group never adopted:
// each snapshot create-if-absent, which fails with ErrConflict (the entry
// is lost) once the group's keys exist. That is the fencing of the
// handover: the instance that adopts the group next owns those keys, and
// a late write of this one changes none of them. A Start whose snapshot is
// being taken delays it until the snapshot is written.
//
// With Options.PartitionOwners it forgets only the group key's revision
// (the share-partition keys held through AdoptPartition stay held) and
// reports only the failures of the group's group-level entries (KindGroup,
// KindGroupDelete).
func (s *Store) DropGroup(group string) error {
	if !s.scoped {
		return errors.New("share state store: DropGroup needs a scoped store (Options.Scoped)")
	}
	return dropIn(s, s.adopted, group, &control{group: group}, fmt.Sprintf("group %q", group))
}

// dropIn is DropGroup's and DropPartition's common part: once Start's
// snapshot is not being taken, it forgets k in adopted, applies c (the
// drop) in ticket order, waits until it is, and returns the failure c
// found for k (what names k in it).
func dropIn[K comparable](s *Store, adopted map[K]*control, k K, c *control, what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.hold && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return sharestate.ErrClosed
	}
	delete(adopted, k)
	t := s.enqueue(pendingEntry{ctl: c})
	for s.settled < t {
		s.cond.Wait()
	}
	if c.lost != nil {
		return fmt.Errorf("share state store: %s: %w", what, c.lost)
	}
	return nil
}

// DropPartition ends this instance's ownership of a partition's share
// state (partition-owners mode only), to hand it over to another instance:
// the mirror of DropGroup for the partition's keys of every group. It
// waits until every entry written before the call is settled, forgets the
// revisions of the partition's keys in ticket order, and returns the first
// failure of a share-partition entry of the partition since it was last
// adopted or dropped (entries of other partitions do not count).
//
// Afterwards a share-partition entry of the partition is written
// create-if-absent, which fails with ErrConflict once the key exists: the
// instance that adopts the partition next holds those keys, and a late
// write of this one changes none of them.
func (s *Store) DropPartition(topicID string, partition int32) error {
	if !s.owners {
		return errors.New("share state store: DropPartition needs a partition-owners store (Options.PartitionOwners)")
	}
	k := partKey{topicID: topicID, part: partition}
	return dropIn(s, s.adoptedParts, k, &control{part: &k}, fmt.Sprintf("partition %d of topic id %s", partition, topicID))
}

// enqueue gives p the next ticket and queues it; s.mu is held.
func (s *Store) enqueue(p pendingEntry) uint64 {
	s.next++
	p.ticket = s.next
	s.pending = append(s.pending, p)
	s.cond.Broadcast()
	return s.next
}

// GroupIDs returns the IDs of the groups whose group snapshot is in the
// bucket, sorted: every group, whoever coordinates it. ctx bounds the read
// (the store's timeout when ctx has no deadline).
func (s *Store) GroupIDs(ctx context.Context) ([]string, error) {
	ctx, cancel := withTimeout(ctx, s.timeout)
	defer cancel()
	const op = "list the groups of the share state bucket"
	ids := []string{}
	kl, err := s.kv.ListKeysFiltered(ctx, "g.*")
	if errors.Is(err, njs.ErrNoKeysFound) {
		return ids, nil
	}
	if err != nil {
		return nil, sljs.Wrap(ctx, op, err, ErrStorage)
	}
	// The lister closes its channel at the end of the keys, or when ctx
	// ends (and stops its watch itself).
	for k := range kl.Keys() {
		tok := strings.Split(k, ".")
		if len(tok) != 2 {
			continue
		}
		if g, err := sljs.UnhexKey(tok[1]); err == nil {
			ids = append(ids, g)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, sljs.Wrap(ctx, op, err, ErrStorage)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
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

// applyControl applies an AdoptGroup's, DropGroup's, AdoptPartition's or
// DropPartition's control to durable.
func (s *Store) applyControl(c *control) {
	switch {
	case c.part != nil:
		k := *c.part
		for g, dg := range s.durable {
			delete(dg.parts, k)
			if dg.rev == 0 && len(dg.parts) == 0 {
				delete(s.durable, g)
			}
		}
		if !c.adopt {
			delete(s.ownParts, k)
			return
		}
		s.ownParts[k] = true
		for g, dp := range c.parts {
			s.durable.group(g).parts[k] = dp
		}
	case s.owners:
		if c.adopt {
			s.ownGroups[c.group] = true
		} else {
			delete(s.ownGroups, c.group)
		}
		d := s.durable.group(c.group)
		d.rev, d.val = 0, nil
		if c.adopt && c.dg != nil {
			d.rev, d.val = c.dg.rev, c.dg.val
		}
		if d.rev == 0 && len(d.parts) == 0 {
			delete(s.durable, c.group)
		}
	case c.adopt && c.dg != nil:
		s.durable[c.group] = c.dg
	default:
		delete(s.durable, c.group)
	}
}

// kvWrite is one snapshot write of a round: a put (val) or a delete (nil).
type kvWrite struct {
	key   string
	val   []byte
	rev   uint64
	group string
	part  *partKey         // a share-partition's key: its partition
	gkey  bool             // the group's key
	apply func(rev uint64) // records the result in durable
	err   error
	newRv uint64
}

// commit applies batch on top of the durable snapshots of the groups it
// touches and writes every snapshot that changed, each conditional on the
// revision this instance last saw. It returns the first failure; then the
// whole batch counts as lost (snapshots written before the failure stay).
func (s *Store) commit(batch []pendingEntry) error {
	touched := make(map[string]bool)
	im := sharestate.NewImage()
	entries := batch
	if i := slices.IndexFunc(batch, func(p pendingEntry) bool { return p.reset }); i >= 0 {
		// Start's snapshot: the state is exactly what follows the marker.
		for g := range s.durable {
			touched[g] = true
		}
		entries = batch[i+1:]
		for _, pe := range entries {
			touched[pe.e.Group] = true
		}
	} else {
		for _, pe := range entries {
			if !pe.noop {
				touched[pe.e.Group] = true
			}
		}
		for g := range touched {
			s.replayDurable(im, g)
		}
	}
	ownLevel := make(map[string]bool) // groups with a group-level entry in the round
	for i := range entries {
		if !entries[i].noop && !entries[i].reset {
			im.Apply(&entries[i].e)
			if groupLevel(entries[i].e.Kind) {
				ownLevel[entries[i].e.Group] = true
			}
		}
	}
	newState := make(map[string]*sharestate.GroupState)
	st := im.State()
	for i := range st.Groups {
		newState[st.Groups[i].ID] = &st.Groups[i]
	}
	var writes []*kvWrite
	for g := range touched {
		writes = append(writes, s.groupWrites(g, newState[g], ownLevel[g])...)
	}
	if len(writes) == 0 {
		return nil
	}
	// A group key this instance does not know is created first, and the
	// round goes on only if that worked: when the group exists (another
	// instance wrote it — or owns it now, see DropGroup) the create fails
	// with ErrConflict before any of the group's share-partition keys is
	// written, so a fenced instance adds no key to a group it lost.
	creates := slices.DeleteFunc(slices.Clone(writes), func(w *kvWrite) bool { return !w.gkey || w.val == nil || w.rev != 0 })
	rest := writes
	if len(creates) > 0 {
		rest = slices.DeleteFunc(writes, func(w *kvWrite) bool { return w.gkey && w.val != nil && w.rev == 0 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err := s.runWrites(ctx, creates)
	if err == nil {
		err = s.runWrites(ctx, rest)
	}
	if err != nil {
		// Not writes: DeleteFunc above cleared the tail of its array.
		s.reportFenced(append(slices.Clone(creates), rest...))
	}
	for g, dg := range s.durable {
		if dg.rev == 0 && len(dg.parts) == 0 {
			delete(s.durable, g)
		}
	}
	return err
}

// reportFenced calls Options.OnFenced for each adopted group key or
// partition among the writes refused with ErrConflict.
func (s *Store) reportFenced(writes []*kvWrite) {
	if s.onFenced == nil {
		return
	}
	seen := map[Fenced]bool{}
	s.mu.Lock()
	for _, w := range writes {
		if !errors.Is(w.err, ErrConflict) {
			continue
		}
		var f Fenced
		switch {
		case w.gkey && s.adopted[w.group] != nil:
			f = Fenced{Group: w.group, GroupKey: true}
		case w.part != nil && s.adoptedParts[*w.part] != nil:
			f = Fenced{Group: w.group, TopicID: w.part.topicID, Partition: w.part.part}
		default:
			continue
		}
		seen[f] = true
	}
	s.mu.Unlock()
	for f := range seen {
		go s.onFenced(f)
	}
}

// runWrites performs writes in parallel, records each that succeeded in
// durable and returns the first failure.
func (s *Store) runWrites(ctx context.Context, writes []*kvWrite) error {
	sem := make(chan struct{}, writeParallel)
	var wg sync.WaitGroup
	for _, w := range writes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			w.newRv, w.err = s.put(ctx, w)
		})
	}
	wg.Wait()
	var first error
	for _, w := range writes {
		if w.err != nil {
			if first == nil {
				first = w.err
			}
			continue
		}
		w.apply(w.newRv)
	}
	return first
}

// put performs one write.
func (s *Store) put(ctx context.Context, w *kvWrite) (uint64, error) {
	var (
		rev uint64
		err error
	)
	switch {
	case w.val == nil:
		err = s.kv.Delete(ctx, w.key, njs.LastRevision(w.rev))
	case w.rev == 0:
		rev, err = s.kv.Create(ctx, w.key, w.val)
	default:
		rev, err = s.kv.Update(ctx, w.key, w.val, w.rev)
	}
	if err == nil {
		return rev, nil
	}
	if errors.Is(err, njs.ErrKeyExists) || errors.Is(err, njs.ErrKeyRevisionMismatch) || sljs.IsWrongLastSequence(err) {
		return 0, fmt.Errorf("snapshot %s: %w (%v)", w.key, ErrConflict, err)
	}
	return 0, fmt.Errorf("write snapshot %s: %w (%w)", w.key, err, ErrStorage)
}

// replayDurable applies group g's durable snapshots to im as full entries.
func (s *Store) replayDurable(im *sharestate.Image, g string) {
	dg := s.durable[g]
	if dg == nil {
		return
	}
	if dg.rev != 0 {
		ge := decodeGroup(g, dg.val)
		im.Apply(&ge)
	}
	var buf [2]sharestate.Entry
	for k, dp := range dg.parts {
		es := partEntries(buf[:0], g, k, dp.val)
		for i := range es {
			im.Apply(&es[i])
		}
	}
}

// groupWrites returns the writes that make the bucket hold ng for group g
// (nil: the group is gone), skipping snapshots that are unchanged.
// groupLevel says the round has a group-level entry of g.
//
// In partition-owners mode only the keys of adopted groups and partitions
// are held (written on condition of their revision, which durable keeps);
// any other key is written create-if-absent and not held. The group's key
// is written only when the group is adopted or groupLevel: a round of
// share-partition entries alone leaves it to the group's coordinator —
// the image makes the group up from them, with no config.
func (s *Store) groupWrites(g string, ng *sharestate.GroupState, groupLevel bool) []*kvWrite {
	dg := s.durable[g]
	holdG, writeG := true, true
	holdPart := func(partKey) bool { return true }
	if s.owners {
		holdG = s.ownGroups[g]
		writeG = holdG || groupLevel
		holdPart = func(k partKey) bool { return s.ownParts[k] }
	}
	var out []*kvWrite
	if ng != nil && writeG {
		val, _ := json.Marshal(groupValue{Epoch: ng.GroupEpoch, Config: ng.Config})
		if dg == nil || dg.rev == 0 || !bytes.Equal(dg.val, val) {
			var rev uint64
			if dg != nil {
				rev = dg.rev
			}
			out = append(out, &kvWrite{key: groupKey(g), val: val, rev: rev, group: g, gkey: true, apply: func(r uint64) {
				if holdG {
					d := s.durable.group(g)
					d.rev, d.val = r, val
				}
			}})
		}
	}
	want := make(map[partKey]bool)
	if ng != nil {
		for _, p := range ng.Partitions {
			k := partKey{topicID: p.TopicID, part: p.Partition}
			want[k] = true
			val, _ := json.Marshal(partValue{Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition,
				Initialized: p.Initialized, SPSO: p.SPSO, Ranges: p.Ranges, Offline: p.Offline})
			var rev uint64
			if dg != nil {
				if dp := dg.parts[k]; dp != nil {
					if bytes.Equal(dp.val, val) {
						continue
					}
					rev = dp.rev
				}
			}
			out = append(out, &kvWrite{key: partKeyName(g, k), val: val, rev: rev, group: g, part: &k, apply: func(r uint64) {
				if holdPart(k) {
					s.durable.group(g).parts[k] = &dPart{rev: r, val: val}
				}
			}})
		}
	}
	if dg != nil {
		for k, dp := range dg.parts {
			if want[k] {
				continue
			}
			out = append(out, &kvWrite{key: partKeyName(g, k), rev: dp.rev, group: g, part: &k, apply: func(uint64) {
				delete(s.durable.group(g).parts, k)
			}})
		}
		if ng == nil && dg.rev != 0 {
			out = append(out, &kvWrite{key: groupKey(g), rev: dg.rev, group: g, gkey: true, apply: func(uint64) {
				d := s.durable.group(g)
				d.rev, d.val = 0, nil
			}})
		}
	}
	return out
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
	return out
}
