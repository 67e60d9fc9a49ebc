// snapshots.go: the per-group and per-share-partition snapshots — their
// keys and JSON values, durable (what the bucket holds as this instance
// last read or wrote it), and a commit round's writes, each conditional on
// the revision held (the fencing of the package documentation).
//
// Locks: durable, and the writes of a round, belong to the committer
// goroutine alone (after Open), so commit, groupWrites, runWrites and
// replayDurable take no lock; reportFenced takes Store.mu to read what is
// adopted. The codec (groupKey, partKeyName, decodeGroup, partEntries) is
// pure.

package jsstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	njs "github.com/nats-io/nats.go/jetstream"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// writeParallel is how many snapshot writes one commit round has in flight.
const writeParallel = 16

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
