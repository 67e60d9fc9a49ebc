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

	sljs "github.com/sharelog/sharelog/internal/jetstream"
	"github.com/sharelog/sharelog/internal/sharestate"
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
	// Timeout bounds opening the store and each commit round (default 10 s).
	Timeout time.Duration
}

// writeParallel is how many snapshot writes one commit round has in flight.
const writeParallel = 16

// Store is a sharestate.Store whose durable form is one snapshot per group
// and per share-partition in a JetStream KV bucket; see the package
// documentation.
type Store struct {
	kv      njs.KeyValue
	timeout time.Duration

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

	// durable is what the bucket holds, as this instance wrote or read it.
	// Only the committer goroutine uses it after Open.
	durable map[string]*dGroup
}

var _ sharestate.Store = (*Store)(nil)

// pendingEntry is an entry waiting for its commit round, or a reset marker
// (Start's snapshot follows it and replaces everything before it), or a
// no-op (a reset marker whose snapshot failed).
type pendingEntry struct {
	ticket uint64
	e      sharestate.Entry
	reset  bool
	noop   bool
}

type lostRange struct {
	lo, hi uint64
	err    error
}

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
	js, err := njs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w (%w)", err, ErrStorage)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
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
		kv, err = js.KeyValue(ctx, bucket)
	}
	if err == nil {
		err = sljs.WaitLeader(ctx, js, "KV_"+bucket)
	}
	if err != nil {
		return nil, sljs.Wrap(ctx, "open the share state bucket "+bucket, err, ErrStorage)
	}
	s := &Store{kv: kv, timeout: o.Timeout, durable: make(map[string]*dGroup), done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	go s.committer()
	return s, nil
}

// load reads every snapshot of the bucket into durable and builds the
// recovered state. A snapshot that cannot be decoded marks its
// share-partition offline (its state is lost) rather than failing the
// open; an undecodable group snapshot makes a group with no config.
func (s *Store) load(ctx context.Context) error {
	w, err := s.kv.WatchAll(ctx, njs.IgnoreDeletes())
	if err != nil {
		return sljs.Wrap(ctx, "read the share state bucket", err, ErrStorage)
	}
	defer func() { _ = w.Stop() }()
	im := sharestate.NewImage()
	var parts []sharestate.Entry
	for {
		var e njs.KeyValueEntry
		select {
		case e = <-w.Updates():
		case <-ctx.Done():
			return sljs.Wrap(ctx, "read the share state bucket", ctx.Err(), ErrStorage)
		}
		if e == nil {
			break
		}
		tok := strings.Split(e.Key(), ".")
		switch {
		case len(tok) == 2 && tok[0] == "g":
			g, err := sljs.UnhexKey(tok[1])
			if err != nil {
				continue // not a key this store writes
			}
			var v groupValue
			_ = json.Unmarshal(e.Value(), &v) // undecodable: a group with no config
			dg := s.group(g)
			dg.rev, dg.val = e.Revision(), slices.Clone(e.Value())
			im.Apply(&sharestate.Entry{Kind: sharestate.KindGroup, Group: g, GroupEpoch: v.Epoch, Config: v.Config})
		case len(tok) == 4 && tok[0] == "p":
			g, err1 := sljs.UnhexKey(tok[1])
			tid, err2 := sljs.UnhexKey(tok[2])
			pn, err3 := strconv.ParseInt(tok[3], 10, 32)
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			k := partKey{topicID: tid, part: int32(pn)}
			var v partValue
			if err := json.Unmarshal(e.Value(), &v); err != nil {
				v = partValue{TopicID: tid, Partition: k.part, Offline: "its snapshot in the share state bucket is undecodable: " + err.Error()}
			}
			s.group(g).parts[k] = &dPart{rev: e.Revision(), val: slices.Clone(e.Value())}
			if v.Initialized {
				parts = append(parts, sharestate.Entry{Kind: sharestate.KindPartFull, Group: g, Topic: v.Topic, TopicID: v.TopicID,
					Partition: v.Partition, SPSO: v.SPSO, Ranges: v.Ranges})
			}
			if v.Offline != "" {
				parts = append(parts, sharestate.Entry{Kind: sharestate.KindPartOffline, Group: g, Topic: v.Topic, TopicID: v.TopicID,
					Partition: v.Partition, Reason: v.Offline})
			}
		}
	}
	// Share-partitions after their groups: a group entry does not touch
	// them, but keep the order the replay rules expect.
	for i := range parts {
		im.Apply(&parts[i])
	}
	s.recovered = im.State()
	return nil
}

func (s *Store) group(g string) *dGroup {
	dg := s.durable[g]
	if dg == nil {
		dg = &dGroup{parts: make(map[partKey]*dPart)}
		s.durable[g] = dg
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

// Close implements sharestate.Store: it commits what is pending and stops.
func (s *Store) Close() error {
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
		batch := slices.Clone(s.pending[:n])
		s.pending = slices.Delete(s.pending, 0, n)
		s.mu.Unlock()

		err := s.commit(batch)

		s.mu.Lock()
		lo, hi := batch[0].ticket, batch[len(batch)-1].ticket
		if err != nil {
			s.lost = append(s.lost, lostRange{lo: lo, hi: hi, err: err})
			s.failures++
		}
		s.settled = hi
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// kvWrite is one snapshot write of a round: a put (val) or a delete (nil).
type kvWrite struct {
	key   string
	val   []byte
	rev   uint64
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
	for i := range entries {
		if !entries[i].noop && !entries[i].reset {
			im.Apply(&entries[i].e)
		}
	}
	newState := make(map[string]*sharestate.GroupState)
	st := im.State()
	for i := range st.Groups {
		newState[st.Groups[i].ID] = &st.Groups[i]
	}
	var writes []*kvWrite
	for g := range touched {
		writes = append(writes, s.groupWrites(g, newState[g])...)
	}
	if len(writes) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
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
	for g, dg := range s.durable {
		if dg.rev == 0 && len(dg.parts) == 0 {
			delete(s.durable, g)
		}
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
		var v groupValue
		_ = json.Unmarshal(dg.val, &v)
		im.Apply(&sharestate.Entry{Kind: sharestate.KindGroup, Group: g, GroupEpoch: v.Epoch, Config: v.Config})
	}
	for k, dp := range dg.parts {
		var v partValue
		if err := json.Unmarshal(dp.val, &v); err != nil {
			v = partValue{TopicID: k.topicID, Partition: k.part, Offline: "its snapshot in the share state bucket is undecodable: " + err.Error()}
		}
		if v.Initialized {
			im.Apply(&sharestate.Entry{Kind: sharestate.KindPartFull, Group: g, Topic: v.Topic, TopicID: v.TopicID,
				Partition: v.Partition, SPSO: v.SPSO, Ranges: v.Ranges})
		}
		if v.Offline != "" {
			im.Apply(&sharestate.Entry{Kind: sharestate.KindPartOffline, Group: g, Topic: v.Topic, TopicID: v.TopicID,
				Partition: v.Partition, Reason: v.Offline})
		}
	}
}

// groupWrites returns the writes that make the bucket hold ng for group g
// (nil: the group is gone), skipping snapshots that are unchanged.
func (s *Store) groupWrites(g string, ng *sharestate.GroupState) []*kvWrite {
	dg := s.durable[g]
	var out []*kvWrite
	if ng != nil {
		val, _ := json.Marshal(groupValue{Epoch: ng.GroupEpoch, Config: ng.Config})
		if dg == nil || dg.rev == 0 || !bytes.Equal(dg.val, val) {
			var rev uint64
			if dg != nil {
				rev = dg.rev
			}
			out = append(out, &kvWrite{key: groupKey(g), val: val, rev: rev, apply: func(r uint64) {
				d := s.group(g)
				d.rev, d.val = r, val
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
			out = append(out, &kvWrite{key: partKeyName(g, k), val: val, rev: rev, apply: func(r uint64) {
				s.group(g).parts[k] = &dPart{rev: r, val: val}
			}})
		}
	}
	if dg != nil {
		for k, dp := range dg.parts {
			if want[k] {
				continue
			}
			out = append(out, &kvWrite{key: partKeyName(g, k), rev: dp.rev, apply: func(uint64) {
				delete(s.group(g).parts, k)
			}})
		}
		if ng == nil && dg.rev != 0 {
			out = append(out, &kvWrite{key: groupKey(g), rev: dg.rev, apply: func(uint64) {
				d := s.group(g)
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
