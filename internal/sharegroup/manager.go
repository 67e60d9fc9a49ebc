package sharegroup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/logstore"
	"github.com/sharelog/sharelog/internal/sessioncache"
)

// Manager is the share-group domain: groups, their config and share
// state, share sessions, and the durable state log. See doc.go.
type Manager struct {
	store logstore.Store
	opts  Options
	log   *slog.Logger
	base  time.Time // origin of the monotonic clock of deadlines
	slog  *stateLog

	sessions *sessioncache.Cache[sessState]

	mu     sync.Mutex // guards groups
	groups map[string]*group

	topicsMu sync.Mutex
	topics   map[string]*topicRef // topic name -> current identity

	life    sync.RWMutex // guards closed against ops.Add
	closed  bool
	ops     sync.WaitGroup // calls and timer callbacks in progress
	closing chan struct{}  // closed by Close: waiting fetches return
	bg      sync.WaitGroup // watchers and the compactor

	compactCh chan struct{}
	snapBytes atomic.Int64  // size of the last snapshot
	arrivals  atomic.Uint64 // fetch admission order, for waiters
}

// group is a share group: its config, share-partitions and membership.
type group struct {
	m   *Manager
	id  string
	cfg atomic.Pointer[effConfig]

	// op serialises heartbeats, member expiry, config updates and admin
	// calls of the group (§11); it guards mem and is held across their
	// durable waits. Taken before mu; see doc.go for the lock order.
	op       sync.Mutex
	mem      membership   // guarded by op (membership.go)
	nMembers atomic.Int32 // len(mem.members), for ListGroups without op

	mu       sync.Mutex
	deleted  bool        // removed from the manager (set with Manager.mu held too)
	dead     bool        // DeleteShareGroup in progress: no new share-partitions
	explicit GroupConfig // fields explicitly set (persisted)
	epoch    int32       // group_epoch (§8); written under op and mu
	parts    map[partKey]*sharePartition
}

type partKey struct {
	topicID string
	part    int32
}

func (g *group) config() *effConfig { return g.cfg.Load() }

// sessState is what a share session holds besides its epoch (§2.1).
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
	lastErr bool // its last report had a non-NONE error_code (§3.5)
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

// topicRef caches a topic name's identity; watch (partition 0's Watch
// channel) closing means it may have changed and is re-checked.
type topicRef struct {
	id         string
	partitions int32
	watch      <-chan struct{}
}

// Open opens the share-group state in opts.Dir, recovering it (§7), and
// starts the background work. It refuses defaults outside their bounds.
func Open(store logstore.Store, opts Options) (*Manager, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sharegroup: %w", err)
	}
	rec, err := recoverDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("sharegroup: %w", err)
	}
	hooks := defaultHooks()
	if opts.testHooks != nil {
		hooks = *opts.testHooks
	}
	m := &Manager{
		store:     store,
		opts:      opts,
		log:       opts.Logger,
		base:      time.Now(),
		groups:    make(map[string]*group),
		topics:    make(map[string]*topicRef),
		closing:   make(chan struct{}),
		compactCh: make(chan struct{}, 1),
	}
	m.slog = &stateLog{dir: opts.Dir, mode: opts.Fsync, interval: opts.FsyncInterval, log: opts.Logger, hooks: hooks, onBatch: m.maybeCompact}
	if err := m.slog.start(rec.lastGen + 1); err != nil {
		return nil, fmt.Errorf("sharegroup: %w", err)
	}
	if err := m.load(rec); err != nil {
		m.slog.close()
		return nil, fmt.Errorf("sharegroup: %w", err)
	}
	// The startup snapshot makes the new file self-contained (clamps and
	// dropped topics included); then the old files go.
	if err := m.snapshot(rec.lastGen + 1); err != nil {
		m.slog.close()
		return nil, fmt.Errorf("sharegroup: writing the startup snapshot: %w", err)
	}
	m.removeOldFiles(rec.lastGen + 1)
	m.sessions = sessioncache.New(sessioncache.Config[sessState]{
		Capacity:        opts.MaxShareSessions,
		IdleTimeout:     opts.SessionIdleTimeout,
		MaxPerPrincipal: opts.MaxSessionsPerPrincipal,
		OnEnd:           m.endSession,
	})
	m.bg.Add(1)
	go m.compactLoop()
	return m, nil
}

// load builds the live groups from the recovered state: share-partitions
// of deleted topics are dropped and SPSO is clamped to the log start.
func (m *Manager) load(rec *recovered) error {
	ctx := context.Background()
	infos := map[string]*logstore.TopicInfo{}
	for _, rg := range rec.groups {
		g := m.newGroup(rg.id)
		g.explicit, g.epoch = rg.config, rg.epoch
		g.mem.assignEpoch = rg.epoch
		g.cfg.Store(m.opts.effective(&g.explicit))
		m.groups[g.id] = g
		for _, rp := range rg.parts {
			info, ok := infos[rp.topic]
			if !ok {
				ti, err := m.store.TopicInfo(ctx, rp.topic)
				switch {
				case err == nil:
					info = &ti
				case errors.Is(err, logstore.ErrUnknownTopic):
				default:
					return fmt.Errorf("looking up topic %q: %w", rp.topic, err)
				}
				infos[rp.topic] = info
			}
			if info == nil || info.ID != rp.topicID || rp.part >= info.Partitions {
				m.log.Info("dropping share state of a deleted topic", "group", g.id, "topic", rp.topic, "topic_id", rp.topicID, "partition", rp.part)
				continue
			}
			sp := newSharePartition(g, rp.topic, rp.topicID, rp.part)
			sp.status, sp.spso, sp.speo, sp.runs = spLive, rp.spso, rp.speo, rp.runs
			g.parts[partKey{rp.topicID, rp.part}] = sp
			if ls, _, err := m.store.Bounds(rp.topic, rp.part); err == nil {
				sp.mu.Lock()
				sp.prepare(ls, m.now())
				sp.mu.Unlock()
			}
		}
	}
	return nil
}

func (m *Manager) newGroup(id string) *group {
	g := &group{m: m, id: id, parts: make(map[partKey]*sharePartition)}
	g.mem.members = make(map[string]*member)
	g.cfg.Store(m.opts.effective(&g.explicit))
	return g
}

func (m *Manager) now() int64 { return int64(time.Since(m.base)) }

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
	defer m.mu.Unlock()
	g := m.groups[id]
	if g == nil && create {
		g = m.newGroup(id)
		m.registerLocked(g)
	}
	return g
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
	// Group creation is written without waiting (§7).
	_, _ = m.slog.write(func(b []byte) []byte { return appendGroupEntry(b, g.id, 0, &g.explicit) })
}

// partition returns the group's share-partition, creating it uninitialised
// if asked.
func (g *group) partition(topicID, topic string, part int32, create bool) *sharePartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := partKey{topicID, part}
	sp := g.parts[k]
	if sp == nil && create && !g.deleted && !g.dead {
		sp = newSharePartition(g, topic, topicID, part)
		g.parts[k] = sp
	}
	return sp
}

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
	if err != nil {
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
			if sp.status == spLive {
				_, _ = m.slog.write(func(b []byte) []byte { return appendPartDelete(b, g.id, sp) })
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

// GetConfig returns a group's effective configuration (§9).
func (m *Manager) GetConfig(groupID string) (GroupConfig, error) {
	if !m.enter() {
		return GroupConfig{}, ErrClosed
	}
	defer m.leave()
	g := m.groupFor(groupID, false)
	if g == nil {
		return GroupConfig{}, &Error{Reason: ReasonGroupIDNotFound, Message: fmt.Sprintf("share group %q does not exist", groupID)}
	}
	return g.config().public(), nil
}

// UpdateConfig sets the fields of c that are not nil, creating the group
// if needed. Every set field is validated first; one bad value fails the
// call with INVALID_REQUEST and changes nothing. The change is durable
// before it returns; it applies as §9 says (lock duration to later locks,
// the limits at the next transition or acquisition, auto_offset_reset to
// uninitialised share-partitions) and wakes waiting fetches.
func (m *Manager) UpdateConfig(groupID string, c GroupConfig) (GroupConfig, error) {
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
	ticket, err := m.slog.write(func(b []byte) []byte { return appendGroupEntry(b, g.id, g.epoch, &explicit) })
	if err == nil {
		err = m.slog.ackWait(ticket)
	}
	if err != nil {
		g.mu.Unlock()
		return GroupConfig{}, fmt.Errorf("share group %q: config not saved: %w", groupID, err)
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
// session still holds, in every share-partition where it acquired (§2.5).
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
// fetches with no records, waits for calls in progress, and syncs and
// closes the state log. Later calls fail with ErrClosed.
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
	return m.slog.close()
}

// --- compaction -------------------------------------------------------------

// maybeCompact is the state log's onBatch: it asks for a compaction when
// the newest file outgrows max(CompactBytes, 4 × the last snapshot).
func (m *Manager) maybeCompact(size int64) {
	if size > max(m.opts.CompactBytes, 4*m.snapBytes.Load()) {
		select {
		case m.compactCh <- struct{}{}:
		default:
		}
	}
}

func (m *Manager) compactLoop() {
	defer m.bg.Done()
	for {
		select {
		case <-m.closing:
			return
		case <-m.compactCh:
			gen, err := m.slog.rotate()
			if err == nil {
				err = m.snapshot(gen)
			}
			if err != nil {
				m.log.Error("share state compaction failed", "err", err)
				continue
			}
			m.removeOldFiles(gen)
			// Requests made while the old file was still growing are moot.
			select {
			case <-m.compactCh:
			default:
			}
		}
	}
}

// snapshot appends the full state of every group and share-partition and a
// marker for generation gen (the file entries now go to), and syncs it.
func (m *Manager) snapshot(gen uint64) error {
	var first, last uint64
	note := func(t uint64, err error) error {
		if err == nil {
			if first == 0 {
				first = t
			}
			last = t
		}
		return err
	}
	for _, g := range m.groupList() {
		g.mu.Lock()
		if g.deleted || g.dead {
			// A dead group's delete entry is being written: a group entry
			// after it would bring the group back at recovery. If that
			// write fails the log is broken and this snapshot fails too.
			g.mu.Unlock()
			continue
		}
		err := note(m.slog.write(func(b []byte) []byte { return appendGroupEntry(b, g.id, g.epoch, &g.explicit) }))
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
				err = note(sp.writeFull())
			}
			sp.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
	if err := note(m.slog.write(func(b []byte) []byte { return appendMarker(b, gen) })); err != nil {
		return err
	}
	if err := m.slog.syncTo(last); err != nil {
		return err
	}
	m.snapBytes.Store(int64(last - first))
	return nil
}

// removeOldFiles deletes the generations before gen, whose content the
// snapshot in gen now covers.
func (m *Manager) removeOldFiles(gen uint64) {
	files, err := listGenerations(m.opts.Dir)
	if err != nil {
		m.log.Warn("listing share state files", "err", err)
		return
	}
	removed := false
	for _, f := range files {
		if f.gen < gen {
			if err := os.Remove(filepath.Join(m.opts.Dir, f.name)); err != nil {
				m.log.Warn("removing an old share state file", "file", f.name, "err", err)
			}
			removed = true
		}
	}
	if removed {
		if err := fsutil.SyncDir(m.opts.Dir); err != nil {
			m.log.Warn("syncing the share state directory", "err", err)
		}
	}
}
