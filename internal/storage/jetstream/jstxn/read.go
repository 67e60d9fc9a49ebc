package jstxn

import (
	"context"
	"errors"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
)

// syncKey is the key every read writes before it reads: the read is
// complete once its watch has delivered this write (doc.go "Reads"). Its
// value is empty; it names no transactional id.
const syncKey = "sync"

var errWatchEnded = errors.New("the watch ended before every key was read")

// read returns the last entry of every key filter matches (a delete
// marker included), with every write acknowledged before the call: it
// writes syncKey, watches filter and syncKey, and ends once the watch
// has delivered its initial values and syncKey at the mark's revision or
// later. A watch that ends early is started again with a new mark.
func (s *Store) read(ctx context.Context, filter string) (map[string]njs.KeyValueEntry, error) {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		mark, err := s.kv.Put(ctx, syncKey, nil)
		if err != nil {
			return nil, err
		}
		w, err := s.kv.WatchFiltered(ctx, []string{filter, syncKey})
		if err != nil {
			return nil, err
		}
		out, err := readWatch(ctx, w, mark)
		_ = w.Stop()
		if !errors.Is(err, errWatchEnded) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
	}
}

func readWatch(ctx context.Context, w njs.KeyWatcher, mark uint64) (map[string]njs.KeyValueEntry, error) {
	out := map[string]njs.KeyValueEntry{}
	for initial, synced := true, false; initial || !synced; {
		var (
			e  njs.KeyValueEntry
			ok bool
		)
		select {
		case e, ok = <-w.Updates():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		switch {
		case !ok:
			return nil, errWatchEnded
		case e == nil:
			initial = false
		case e.Key() == syncKey:
			synced = synced || e.Revision() >= mark
		default:
			out[e.Key()] = e
		}
	}
	return out, nil
}
