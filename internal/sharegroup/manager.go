package sharegroup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/apierr"
	"github.com/sharelog/sharelog/internal/sessioncache"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Manager is the share-group domain: groups, their config and share
// state, and share sessions, over a durable share-state store. See doc.go.
type Manager struct {
	store logstore.Store
	state sharestate.Store
	opts  Options
	log   *slog.Logger
	base  time.Time // origin of the monotonic clock of deadlines

	sessions *sessioncache.Cache[sessState]

	mu     sync.Mutex // guards groups
	groups map[string]*group

	topicsMu sync.Mutex
	topics   map[string]*topicRef // topic name -> current identity

	// served is, in owner mode (owners.go), the partitions whose
	// share-partitions this manager serves.
	servedMu sync.RWMutex
	served   map[partKey]bool

	life    sync.RWMutex // guards closed against ops.Add
	closed  bool
	ops     sync.WaitGroup // calls and timer callbacks in progress
	closing chan struct{}  // closed by Close: waiting fetches return
	bg      sync.WaitGroup // watchers

	arrivals atomic.Uint64 // fetch admission order, for waiters
	// unreadable counts offsets archived because the log could not read
	// them (Stats().UnreadableArchived).
	unreadable atomic.Uint64
	// badDeliverAt counts acquisitions of records whose sharelog-deliver-at
	// header is malformed (Stats().BadDeliverAt; docs/queues.md).
	badDeliverAt atomic.Uint64

	// dlq makes dead-letter copies (deadletter.go); dlqCopied and
	// dlqSkipped count records copied and archived without a copy since
	// Open, over all groups.
	dlq                   *dlqWorker
	dlqCopied, dlqSkipped atomic.Uint64
}

// group is a share group: its config, share-partitions and membership.
type group struct {
	m   *Manager
	id  string
	cfg atomic.Pointer[effConfig]

	// op serialises heartbeats, member expiry, config updates and admin
	// calls of the group; it guards mem and is held across their
	// durable waits. Taken before mu; see doc.go for the lock order.
	op       sync.Mutex
	mem      membership   // guarded by op (membership.go)
	nMembers atomic.Int32 // len(mem.members), for ListGroups without op

	mu       sync.Mutex
	deleted  bool        // removed from the manager (set with Manager.mu held too)
	dead     bool        // DeleteShareGroup in progress: no new share-partitions
	explicit GroupConfig // fields explicitly set (persisted)
	epoch    int32       // group_epoch; written under op and mu
	parts    map[partKey]*sharePartition

	// Records copied to the dead-letter topic, and archived without a
	// copy (deadletter.go), since Open.
	dlqCopied, dlqSkipped atomic.Uint64

	// latestHinted: the INFO line "a new share group starts at latest over records
	// already in the log" was logged for this group (once per group and process;
	// partition.go initStart).
	latestHinted atomic.Bool
}

type partKey struct {
	topicID string
	part    int32
}

func (g *group) config() *effConfig { return g.cfg.Load() }

// sessState is what a share session holds besides its epoch.
type sessState struct {
	g     *group
	parts []*sessPart                  // fetch set, insertion order
	index map[TopicPartition]*sessPart // parts by name
	held  map[*sharePartition]struct{} // where it may hold ACQUIRED records
}

type session = sessioncache.Session[sessState]

// sessPart is one partition of a session's fetch set.
type sessPart struct {
	tp      TopicPartition
	topicID string
	sp      *sharePartition
	lastErr bool // its last report had a non-NONE error_code
}

func (st *sessState) add(sp *sessPart) {
	st.parts = append(st.parts, sp)
	st.index[sp.tp] = sp
}

// replace puts np in old's place. sessParts are immutable once shared
// (but for lastErr, guarded by Session.Mu): requests of the session read
// them without the lock.
func (st *sessState) replace(old, np *sessPart) {
	for i, x := range st.parts {
		if x == old {
			st.parts[i] = np
		}
	}
	st.index[np.tp] = np
}

func (st *sessState) remove(tp TopicPartition) {
	sp := st.index[tp]
	if sp == nil {
		return
	}
	delete(st.index, tp)
	st.parts = slices.DeleteFunc(st.parts, func(x *sessPart) bool { return x == sp })
}

// removeOf removes tp only while it still stands for the topic with ID
// topicID: a request of the session may have put the re-created topic's
// partition in its place meanwhile.
func (st *sessState) removeOf(tp TopicPartition, topicID string) {
	if sp := st.index[tp]; sp != nil && sp.topicID == topicID {
		st.remove(tp)
	}
}

// topicRef caches a topic name's identity; watch (partition 0's Watch
// channel) closing means it may have changed and is re-checked.
type topicRef struct {
	id         string
	partitions int32
	watch      <-chan struct{}
}

// Open opens the share-group domain over the log store and the share-state
// store state, which it owns from now on (Close closes it, and so does a
// failed Open): it loads the state state recovered, settles it against
// the log (clamps, share-partitions of deleted topics dropped), has state
// write its startup snapshot and starts the session sweeper. It refuses
// defaults outside their bounds.
func Open(store logstore.Store, state sharestate.Store, opts Options) (*Manager, error) {
	if err := opts.normalize(); err != nil {
		_ = state.Close()
		return nil, err
	}
	m := &Manager{
		store:   store,
		state:   state,
		opts:    opts,
		log:     opts.Logger,
		base:    time.Now(),
		groups:  make(map[string]*group),
		served:  make(map[partKey]bool),
		topics:  make(map[string]*topicRef),
		closing: make(chan struct{}),
	}
	m.dlq = newDLQWorker(m)
	if err := m.load(state.Recovered()); err != nil {
		_ = state.Close()
		return nil, fmt.Errorf("sharegroup: %w", err)
	}
	if err := state.Start(m.writeSnapshot); err != nil {
		_ = state.Close()
		return nil, fmt.Errorf("sharegroup: %w", err)
	}
	m.sessions = sessioncache.New(sessioncache.Config[sessState]{
		Capacity:        opts.MaxShareSessions,
		IdleTimeout:     opts.SessionIdleTimeout,
		MaxPerPrincipal: opts.MaxSessionsPerPrincipal,
		OnEnd:           m.endSession,
	})
	if !opts.dlqManual {
		m.bg.Add(1)
		go m.dlq.run(context.Background())
	}
	return m, nil
}

// load builds the live groups from the recovered state: share-partitions
// of deleted topics are dropped and SPSO is clamped to the log start.
func (m *Manager) load(st *sharestate.State) error {
	infos := map[string]*logstore.TopicInfo{}
	for gi := range st.Groups {
		g, _, err := m.loadGroup(&st.Groups[gi], infos)
		if err != nil {
			return err
		}
		m.groups[g.id] = g
	}
	return nil
}

// loadGroup builds one live group from its recovered state (infos caches
// topic lookups across groups). It returns the group, not registered yet,
// and the share-partitions it dropped because their topic is gone.
func (m *Manager) loadGroup(rg *sharestate.GroupState, infos map[string]*logstore.TopicInfo) (*group, []*sharestate.PartitionState, error) {
	g := m.newGroup(rg.ID)
	g.explicit, g.epoch = GroupConfig(rg.Config), rg.GroupEpoch
	g.mem.assignEpoch = rg.GroupEpoch
	g.cfg.Store(m.opts.effective(&g.explicit))
	sps, dropped, err := m.loadPartitions(g, rg.Partitions, infos)
	if err != nil {
		return nil, nil, err
	}
	for _, sp := range sps {
		g.parts[partKey{sp.topicID, sp.part}] = sp
		if sp.dlqCheck {
			m.dlq.add(sp)
		}
	}
	return g, dropped, nil
}

// loadPartitions builds g's share-partitions from their recovered states,
// settled against the log (a log start moved meanwhile applies), without
// adding them to g. It also returns the states it dropped because their
// topic is gone.
func (m *Manager) loadPartitions(g *group, rps []sharestate.PartitionState, infos map[string]*logstore.TopicInfo) ([]*sharePartition, []*sharestate.PartitionState, error) {
	ctx := context.Background()
	var sps []*sharePartition
	var dropped []*sharestate.PartitionState
	for pi := range rps {
		rp := &rps[pi]
		info, ok := infos[rp.Topic]
		if !ok {
			ti, err := m.store.TopicInfo(ctx, rp.Topic)
			switch {
			case err == nil:
				info = &ti
			case errors.Is(err, logstore.ErrUnknownTopic):
			default:
				return nil, nil, fmt.Errorf("looking up topic %q: %w", rp.Topic, err)
			}
			infos[rp.Topic] = info
		}
		if info == nil || info.ID != rp.TopicID || rp.Partition >= info.Partitions {
			m.log.Info("dropping share state of a deleted topic", "group", g.id, "topic", rp.Topic, "topic_id", rp.TopicID, "partition", rp.Partition)
			dropped = append(dropped, rp)
			continue
		}
		sp := newSharePartition(g, rp.Topic, rp.TopicID, rp.Partition)
		sp.restoreDurable(rp)
		sps = append(sps, sp)
		if sp.status != spLive {
			continue
		}
		if ls, _, err := m.store.Bounds(rp.Topic, rp.Partition); err == nil {
			sp.mu.Lock()
			sp.prepare(ls, m.now())
			sp.mu.Unlock()
		}
	}
	return sps, dropped, nil
}

// restoreDurable sets a new share-partition's state from its recovered
// durable state: what was ACQUIRED is AVAILABLE with its durable count.
// A group with a redelivery backoff waits it again from now for every
// AVAILABLE record delivered before (the release instants are not
// durable; docs/queues.md).
func (p *sharePartition) restoreDurable(rp *sharestate.PartitionState) {
	p.offline = rp.Offline
	if !rp.Initialized {
		return
	}
	p.status, p.spso, p.speo = spLive, rp.SPSO, rp.SPSO-1
	p.runs = make([]run, 0, 2*len(rp.Ranges))
	cfg, now := p.g.config(), p.g.m.now()
	defer p.armTimer(now)
	for _, r := range rp.Ranges {
		if r.First > p.speo+1 {
			p.runs = append(p.runs, availableRun(p.speo+1, r.First-1, 0))
		}
		v := run{first: r.First, last: r.Last, state: recState(r.State), count: r.Count}
		if v.state == stAvailable {
			v = releasedRun(v.first, v.last, v.count, now, cfg)
			if v.availAt != 0 {
				p.nextAvail = min(p.nextAvail, v.availAt)
			}
		}
		p.runs = append(p.runs, v)
		p.speo = r.Last
		if r.State == sharestate.Archiving {
			// Its copy may have been made before the crash: look first.
			p.dlqCheck = true
		}
	}
	p.mergeRuns(0, len(p.runs)-1)
}

func (m *Manager) newGroup(id string) *group {
	g := &group{m: m, id: id, parts: make(map[partKey]*sharePartition)}
	g.mem.members = make(map[string]*member)
	g.cfg.Store(m.opts.effective(&g.explicit))
	if !m.coordinates(id) {
		m.follow(g) // a follower: the coordinator's config (owners.go)
	}
	return g
}

func (m *Manager) now() int64 { return int64(time.Since(m.base)) }

// wallMs is the wall clock in ms since the epoch, for sharelog-deliver-at.
func (m *Manager) wallMs() int64 { return time.Now().UnixMilli() }

// enter registers a call (or timer callback) unless the manager is closed.
func (m *Manager) enter() bool {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.closed {
		return false
	}
	m.ops.Add(1)
	return true
}

func (m *Manager) leave() { m.ops.Done() }

// groupFor returns the group, creating it (EMPTY) if asked.
func (m *Manager) groupFor(id string, create bool) *group {
	m.mu.Lock()
	g := m.groups[id]
	m.mu.Unlock()
	if g != nil || !create {
		return g
	}
	// Made outside the lock: a follower's config may be looked up.
	return m.register(m.newGroup(id))
}

// register adds a group made with newGroup, unless one of that ID was
// registered meanwhile: it returns the group that is registered.
func (m *Manager) register(g *group) *group {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.groups[g.id]; cur != nil {
		return cur
	}
	m.registerLocked(g)
	return g
}

func (m *Manager) registerLocked(g *group) {
	m.groups[g.id] = g
	if !m.coordinates(g.id) {
		return // a follower writes nothing of the group's own (owners.go)
	}
	// Group creation is written without waiting.
	_, _ = m.state.Write(sharestate.Entry{Kind: sharestate.KindGroup, Group: g.id, Config: sharestate.GroupConfig(g.explicit)})
}

// entryLocked returns the group's entry (epoch and explicit config). mu
// is held.
func (g *group) entryLocked() sharestate.Entry {
	return sharestate.Entry{Kind: sharestate.KindGroup, Group: g.id, GroupEpoch: g.epoch, Config: sharestate.GroupConfig(g.explicit)}
}

// partition returns the group's share-partition, creating it uninitialised
// if asked.
func (g *group) partition(topicID, topic string, part int32, create bool) *sharePartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := partKey{topicID, part}
	sp := g.parts[k]
	if sp == nil && create && !g.deleted && !g.dead && g.m.serving(topicID, part) {
		sp = newSharePartition(g, topic, topicID, part)
		g.parts[k] = sp
	}
	return sp
}

// alwaysStale is the watch of a topic reference that must not be cached:
// a closed channel, so every lookup refreshes it.
var alwaysStale = func() <-chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// lookupTopic returns the topic's current identity, or nil if it does not
// exist. A name now bound to another ID means the old topic was deleted:
// its share state is dropped.
func (m *Manager) lookupTopic(ctx context.Context, name string) (*topicRef, error) {
	m.topicsMu.Lock()
	ref := m.topics[name]
	m.topicsMu.Unlock()
	if ref != nil {
		select {
		case <-ref.watch:
		default:
			return ref, nil
		}
	}
	info, err := m.store.TopicInfo(ctx, name)
	if err != nil {
		if !errors.Is(err, logstore.ErrUnknownTopic) {
			return nil, err
		}
		m.topicsMu.Lock()
		if m.topics[name] == ref {
			delete(m.topics, name)
		}
		m.topicsMu.Unlock()
		if ref != nil {
			m.TopicDeleted(ref.id)
		}
		return nil, nil
	}
	ch, err := m.store.Watch(name, 0)
	switch {
	case errors.Is(err, logstore.ErrOffline):
		// Partition 0 is offline, the topic is there all the same (its
		// other partitions serve): with no change signal to cache on,
		// every lookup asks the store again.
		ch = alwaysStale
	case err != nil:
		return nil, nil // deleted meanwhile
	}
	nref := &topicRef{id: info.ID, partitions: info.Partitions, watch: ch}
	m.topicsMu.Lock()
	m.topics[name] = nref
	m.topicsMu.Unlock()
	if ref != nil && ref.id != info.ID {
		m.TopicDeleted(ref.id)
	}
	return nref, nil
}

// resolve maps a named partition to its topic ID; ok is false if it does
// not exist (invalid names and negative indexes included).
func (m *Manager) resolve(ctx context.Context, tp TopicPartition) (topicID string, ok bool, err error) {
	if tp.Partition < 0 || tp.Topic == "" || len(tp.Topic) > maxTopicLen {
		return "", false, nil
	}
	ref, err := m.lookupTopic(ctx, tp.Topic)
	if err != nil {
		if ctx.Err() != nil {
			return "", false, ctx.Err()
		}
		return "", false, nil
	}
	if ref == nil || tp.Partition >= ref.partitions {
		return "", false, nil
	}
	return ref.id, true, nil
}

// TopicDeleted drops the share state bound to a deleted topic in every
// group (durably, without waiting); fetches waiting on it wake and report
// UNKNOWN_TOPIC_OR_PARTITION, sessions drop it at their next fetch. The
// service calls it after LogService.DeleteTopic; it is also detected
// lazily when a topic name resolves to another ID.
func (m *Manager) TopicDeleted(topicID string) {
	if !m.enter() {
		return
	}
	defer m.leave()
	m.topicsMu.Lock()
	for name, ref := range m.topics {
		if ref.id == topicID {
			delete(m.topics, name)
		}
	}
	m.topicsMu.Unlock()
	for _, g := range m.groupList() {
		var dropped []*sharePartition
		g.mu.Lock()
		for k, sp := range g.parts {
			if k.topicID == topicID {
				delete(g.parts, k)
				dropped = append(dropped, sp)
			}
		}
		g.mu.Unlock()
		for _, sp := range dropped {
			sp.mu.Lock()
			if sp.status == spLive || sp.offline != "" {
				e := sp.entry(sharestate.KindPartDelete)
				_, _ = m.state.Write(e)
			}
			sp.dropLocked()
			sp.mu.Unlock()
		}
	}
}

// groupList snapshots the groups, sorted by ID.
func (m *Manager) groupList() []*group {
	m.mu.Lock()
	gs := make([]*group, 0, len(m.groups))
	for _, g := range m.groups {
		gs = append(gs, g)
	}
	m.mu.Unlock()
	slices.SortFunc(gs, func(a, b *group) int { return cmp.Compare(a.id, b.id) })
	return gs
}

// getConfig is GetConfig here.
func (m *Manager) getConfig(groupID string) (GroupConfig, error) {
	if !m.enter() {
		return GroupConfig{}, ErrClosed
	}
	defer m.leave()
	g := m.groupFor(groupID, false)
	if g == nil {
		return GroupConfig{}, &apierr.Error{Reason: apierr.GroupIDNotFound, Message: fmt.Sprintf("share group %q does not exist", groupID)}
	}
	return g.config().public(), nil
}

// updateConfig is UpdateConfig here.
func (m *Manager) updateConfig(groupID string, c GroupConfig) (GroupConfig, error) {
	if !m.enter() {
		return GroupConfig{}, ErrClosed
	}
	defer m.leave()
	if err := validGroupID(groupID); err != nil {
		return GroupConfig{}, err
	}
	// A refused update must not create the group: validate against the
	// defaults before creating it.
	g := m.lockGroup(groupID, false)
	if g == nil {
		if err := m.opts.validateUpdate(m.opts.effective(&GroupConfig{}), &c); err != nil {
			return GroupConfig{}, err
		}
		g = m.lockGroup(groupID, true)
	}
	defer g.op.Unlock()
	if err := m.opts.validateUpdate(g.config(), &c); err != nil {
		return GroupConfig{}, err
	}
	g.mu.Lock()
	old := g.explicit
	explicit := mergeConfig(old, c)
	ticket, err := m.state.Write(sharestate.Entry{Kind: sharestate.KindGroup, Group: g.id, GroupEpoch: g.epoch, Config: sharestate.GroupConfig(explicit)})
	if err == nil {
		err = m.state.Wait(ticket)
	}
	if err != nil {
		g.mu.Unlock()
		return GroupConfig{}, storageError("share group %q: config not saved: %v", groupID, err)
	}
	g.explicit = explicit
	eff := m.opts.effective(&explicit)
	g.cfg.Store(eff)
	parts := make([]*sharePartition, 0, len(g.parts))
	for _, sp := range g.parts {
		parts = append(parts, sp)
	}
	g.mu.Unlock()
	for _, sp := range parts {
		sp.signal() // the record-lock limit or delivery limit may let a waiting fetch in
	}
	return eff.public(), nil
}

// endSession is the session cache's OnEnd: it releases every record the
// session still holds, in every share-partition where it acquired.
func (m *Manager) endSession(s *session, _ sessioncache.EndReason) {
	s.Mu.Lock()
	held := s.State.held
	s.State.held = nil
	s.Mu.Unlock()
	for sp := range held {
		sp.releaseSession(s.ID())
	}
}

// Close ends every session (releasing their records), completes waiting
// fetches with no records, waits for calls in progress, and closes the
// share-state store (flushed and durable). Later calls fail with ErrClosed.
func (m *Manager) Close() error {
	m.life.Lock()
	if m.closed {
		m.life.Unlock()
		return nil
	}
	m.closed = true
	close(m.closing)
	m.life.Unlock()
	m.ops.Wait()
	m.sessions.Close()
	for _, g := range m.groupList() {
		g.op.Lock()
		g.stopTimerLocked()
		g.op.Unlock()
		g.mu.Lock()
		for _, sp := range g.parts {
			sp.mu.Lock()
			if sp.timer != nil {
				sp.timer.Stop()
			}
			sp.mu.Unlock()
		}
		g.mu.Unlock()
	}
	m.bg.Wait()
	return m.state.Close()
}

// --- snapshot ---------------------------------------------------------------

// writeSnapshot writes the full state of every group and share-partition
// to the share-state store: its startup snapshot and every compaction
// (sharestate.Store.Start). It returns the first write error.
func (m *Manager) writeSnapshot() error {
	for _, g := range m.groupList() {
		g.mu.Lock()
		if g.deleted || g.dead {
			// A dead group's delete entry is being written: a group entry
			// after it would bring the group back at recovery. If that
			// write fails the store counts the failure and fails this snapshot.
			g.mu.Unlock()
			continue
		}
		var err error
		if m.coordinates(g.id) {
			_, err = m.state.Write(g.entryLocked())
		}
		parts := make([]*sharePartition, 0, len(g.parts))
		for _, sp := range g.parts {
			parts = append(parts, sp)
		}
		g.mu.Unlock()
		if err != nil {
			return err
		}
		for _, sp := range parts {
			sp.mu.Lock()
			if sp.status == spLive {
				_, err = sp.writeFull()
			}
			if err == nil && sp.offline != "" {
				e := sp.entry(sharestate.KindPartOffline)
				e.Reason = sp.offline
				_, err = m.state.Write(e)
			}
			sp.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
	return nil
}
