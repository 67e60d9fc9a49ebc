package jsstate

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/jetstream"
)

// groupWatch follows the group keys (g.*) of the bucket through one
// long-lived watch, so that an instance placing the share groups every
// lease interval does not list the bucket each time (a list is an
// ephemeral consumer created, drained and deleted: docs/cluster.md,
// "Watching the lease bucket", says why that matters).
type groupWatch struct {
	once   sync.Once
	stop   context.CancelFunc
	mu     sync.Mutex
	ready  bool // the watch delivered every key the bucket held, and has not ended since
	groups map[string]struct{}
}

// groupWatchRefresh restarts the watch from a fresh snapshot now and then,
// so a set that went wrong unnoticed heals by itself.
const groupWatchRefresh = 5 * time.Minute

// LiveGroupIDs is GroupIDs from a long-lived watch of the bucket's group
// keys (started at the first call, stopped by Close): milliseconds behind
// a change, without listing the bucket. Until the watch has delivered the
// bucket's keys it lists them like GroupIDs.
func (s *Store) LiveGroupIDs(ctx context.Context) ([]string, error) {
	w := &s.groupWatch
	w.once.Do(func() {
		wctx, cancel := context.WithCancel(context.Background())
		w.stop = cancel
		go s.runGroupWatch(wctx)
	})
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
	kw, err := s.kv.Watch(ctx, "g.*", njs.MetaOnly())
	if err != nil {
		return
	}
	defer func() { _ = kw.Stop() }()
	w := &s.groupWatch
	groups := map[string]struct{}{}
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
			groups[g] = struct{}{}
		} else {
			delete(groups, g)
		}
		w.mu.Unlock()
	}
}
