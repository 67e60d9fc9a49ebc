// adopt.go: scoped mode's adoptions and drops of groups and partitions
// (package documentation, "Scoped mode" and "Partition owners"):
// AdoptGroup, AdoptPartition, DropGroup, DropPartition, the fenced read an
// adoption starts with (readFenced, touch), and applyControl, which puts
// an adoption's or a drop's control into durable in ticket order.
//
// Locks: adoptIn and dropIn take Store.mu to register the control and
// wait on Store.cond for its round; the fenced read runs without it.
// applyControl runs on the committer goroutine (durable, ownGroups and
// ownParts are its own) and takes no lock.

package jsstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

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
