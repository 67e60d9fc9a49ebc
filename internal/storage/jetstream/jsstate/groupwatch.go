package jsstate

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// groupWatch follows the group keys (g.*) of the bucket through one
// long-lived watch, so that an instance placing the share groups every
// lease interval does not list the bucket each time (a list is an
// ephemeral consumer created, drained and deleted: docs/cluster.md,
// "Watching the lease bucket", says why that matters), and an instance
// serving a share-partition of a group it does not coordinate knows the
// group's config (LiveGroup).
type groupWatch struct {
	once   sync.Once
	stop   context.CancelFunc
	mu     sync.Mutex
	ready  bool // the watch delivered every key the bucket held, and has not ended since
	groups map[string]liveGroup
}

// liveGroup is a group's key as the watch last delivered it, decoded like
// decodeGroup.
type liveGroup struct {
	epoch int32
	cfg   sharestate.GroupConfig
}

// groupWatchRefresh restarts the watch from a fresh snapshot now and then,
// so a set that went wrong unnoticed heals by itself.
const groupWatchRefresh = 5 * time.Minute

// LiveGroupIDs is GroupIDs from a long-lived watch of the bucket's group
// keys (started at the first call, stopped by Close): milliseconds behind
// a change, without listing the bucket. Until the watch has delivered the
// bucket's keys it lists them like GroupIDs.
func (s *Store) LiveGroupIDs(ctx context.Context) ([]string, error) {
	w := s.startGroupWatch()
	w.mu.Lock()
	if !w.ready {
		w.mu.Unlock()
		return s.GroupIDs(ctx)
	}
	ids := make([]string, 0, len(w.groups))
	for g := range w.groups {
		ids = append(ids, g)
	}
	w.mu.Unlock()
	slices.Sort(ids)
	return ids, nil
}

// LiveGroup returns group id's config and epoch (ok false: the bucket has
// no key of the group) from the watch of LiveGroupIDs, started at the
// first call: the group key its coordinator wrote, milliseconds behind a
// change. Until the watch has delivered the bucket's keys it reads the key
// (ctx bounds the read; the store's timeout when ctx has no deadline).
func (s *Store) LiveGroup(ctx context.Context, id string) (cfg sharestate.GroupConfig, epoch int32, ok bool, err error) {
	w := s.startGroupWatch()
	w.mu.Lock()
	if w.ready {
		g, ok := w.groups[id]
		w.mu.Unlock()
		return cloneConfig(g.cfg), g.epoch, ok, nil
	}
	w.mu.Unlock()
	ctx, cancel := withTimeout(ctx, s.timeout)
	defer cancel()
	e, err := s.kv.Get(ctx, groupKey(id))
	if errors.Is(err, njs.ErrKeyNotFound) {
		return sharestate.GroupConfig{}, 0, false, nil
	}
	if err != nil {
		return sharestate.GroupConfig{}, 0, false, sljs.Wrap(ctx, "read group "+strconv.Quote(id)+" from the share state bucket", err, ErrStorage)
	}
	ge := decodeGroup(id, e.Value())
	return ge.Config, ge.GroupEpoch, true, nil
}

// startGroupWatch starts the watch unless it has started (or Close ran).
func (s *Store) startGroupWatch() *groupWatch {
	w := &s.groupWatch
	w.once.Do(func() {
		wctx, cancel := context.WithCancel(context.Background())
		w.stop = cancel
		go s.runGroupWatch(wctx)
	})
	return w
}

func (s *Store) runGroupWatch(ctx context.Context) {
	w := &s.groupWatch
	for ctx.Err() == nil {
		s.watchGroupsOnce(ctx)
		w.mu.Lock()
		w.ready = false
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// watchGroupsOnce follows the group keys until the watch ends, ctx ends or
// groupWatchRefresh passes.
func (s *Store) watchGroupsOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, groupWatchRefresh)
	defer cancel()
	kw, err := s.kv.Watch(ctx, "g.*")
	if err != nil {
		return
	}
	defer func() { _ = kw.Stop() }()
	w := &s.groupWatch
	groups := map[string]liveGroup{}
	for {
		var e njs.KeyValueEntry
		select {
		case <-ctx.Done():
			return
		case u, ok := <-kw.Updates():
			if !ok {
				return
			}
			e = u
		}
		if e == nil { // every key the bucket held is in
			w.mu.Lock()
			w.groups, w.ready = groups, true
			w.mu.Unlock()
			continue
		}
		tok := strings.Split(e.Key(), ".")
		if len(tok) != 2 {
			continue
		}
		g, err := sljs.UnhexKey(tok[1])
		if err != nil {
			continue
		}
		w.mu.Lock() // the map is the watch's once the first nil came
		if e.Operation() == njs.KeyValuePut {
			ge := decodeGroup(g, e.Value())
			groups[g] = liveGroup{epoch: ge.GroupEpoch, cfg: ge.Config}
		} else {
			delete(groups, g)
		}
		w.mu.Unlock()
	}
}

// ReadGroup returns group id's config and epoch (ok false: the bucket has
// no key of the group) as a marked read sees it ("# Reads" in the package
// documentation): every write acknowledged before the call is in it, which
// LiveGroup, a moment behind, does not promise. It costs a write and a
// watch: for the first look at a group, not for following it. ctx bounds
// the read (the store's timeout when ctx has no deadline).
func (s *Store) ReadGroup(ctx context.Context, id string) (cfg sharestate.GroupConfig, epoch int32, ok bool, err error) {
	ctx, cancel := withTimeout(ctx, s.timeout)
	defer cancel()
	_, st, err := s.readKeys(ctx, "read group "+strconv.Quote(id)+" from the share state bucket", []string{groupKey(id)})
	if err != nil {
		return sharestate.GroupConfig{}, 0, false, err
	}
	for _, g := range st.Groups {
		if g.ID == id {
			return g.Config, g.GroupEpoch, true, nil
		}
	}
	return sharestate.GroupConfig{}, 0, false, nil
}
