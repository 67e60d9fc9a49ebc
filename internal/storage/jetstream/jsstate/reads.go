// reads.go: reading snapshots from the bucket — Open's load, the marked
// watch every complete read goes through (syncKey, watchSnapshots,
// readSnapshots; package documentation, "Reads"), the filtered read of
// the adoptions (readKeys), and GroupIDs' unmarked listing.
//
// Locks: none. These run on the caller's goroutine and touch no field of
// the Store but kv and timeout (load sets durable and recovered before the
// committer starts).

package jsstate

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

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
