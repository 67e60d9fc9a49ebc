package jetstream

import (
	"context"
	"errors"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
)

var errWatchEnded = errors.New("the watch ended before every key was read")

// ReadSynced returns the last entry of every key of kv that filter
// matches (a delete marker included), with every write acknowledged
// before the call: it writes syncKey (an empty value naming nothing),
// watches filter and syncKey, and ends once the watch has delivered its
// initial values and syncKey at the mark's revision or later. A watch that
// ends early is started again with a new mark. The KV-backed stores
// (jsoffsets, jstxn) read so, as their doc.go "Reads" describe.
func ReadSynced(ctx context.Context, kv njs.KeyValue, filter, syncKey string) (map[string]njs.KeyValueEntry, error) {
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		mark, err := kv.Put(ctx, syncKey, nil)
		if err != nil {
			return nil, err
		}
		w, err := kv.WatchFiltered(ctx, []string{filter, syncKey})
		if err != nil {
			return nil, err
		}
		out, err := readWatch(ctx, w, mark, syncKey)
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

func readWatch(ctx context.Context, w njs.KeyWatcher, mark uint64, syncKey string) (map[string]njs.KeyValueEntry, error) {
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
