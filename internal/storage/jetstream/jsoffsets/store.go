package jsoffsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/sharelog/sharelog/internal/storage/groupoffsets"
	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
)

// ErrStorage wraps every failure to reach or use the bucket: nothing was
// written by the call (doc.go "Failures").
var ErrStorage = errors.New("the cluster's offsets bucket failed")

// Options configures Open.
type Options struct {
	// Prefix names the bucket (default sljs.DefaultPrefix).
	Prefix string
	// Replicas of the bucket when it is created (default 3; --nats-replicas).
	Replicas int
	// Timeout bounds each operation (default 10 s).
	Timeout time.Duration
	// Scoped: Load holds and returns no group; the store reads and writes
	// only the groups it adopts (Adopt), as the coordinator of some groups
	// among several instances (partitioned mode).
	Scoped bool
	// Epoch is the writer's term in an unscoped store (the active
	// instance's lease revision): stamped on every value written, and
	// what Load fences the groups it reads with.
	Epoch uint64
	// OnFenced, if set, is told (on a goroutine of its own) of a group
	// whose write found it written by a newer term: this instance lost it.
	OnFenced func(group string)
	Logger   *slog.Logger
}

// Store is groupoffsets.Store over one KV bucket (doc.go).
type Store struct {
	kv      njs.KeyValue
	bucket  string
	o       Options
	maxSize int // the largest value NATS takes

	mu     sync.Mutex // groups, closed; a leaf
	groups map[string]*held
	closed bool
}

var _ groupoffsets.Store = (*Store)(nil)

// held is a group this store reads and writes.
type held struct {
	mu      sync.Mutex // serializes the group's writes; before Store.mu
	id      string
	rev     uint64 // of the key as last read or written; 0: no key
	epoch   uint64 // this store's term of the group
	im      image
	dropped bool // Drop, or fenced: writes are refused
}

// image is a group's state: its value in the bucket.
type image struct {
	offsets map[groupoffsets.Partition]groupoffsets.Offset
	meta    groupoffsets.Meta
}

func (im image) empty() bool { return len(im.offsets) == 0 && im.meta == (groupoffsets.Meta{}) }

// value is a key's JSON.
type value struct {
	Epoch   uint64                `json:"e"`
	Offsets []groupoffsets.Offset `json:"o,omitempty"`
	Meta    groupoffsets.Meta     `json:"m"`
}

func (im image) sorted() []groupoffsets.Offset {
	out := make([]groupoffsets.Offset, 0, len(im.offsets))
	for _, o := range im.offsets {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return out
}

func (im image) group(id string) groupoffsets.Group {
	g := groupoffsets.Group{ID: id, Meta: im.meta}
	if len(im.offsets) > 0 {
		g.Offsets = im.sorted()
	}
	return g
}

func decode(raw []byte) (value, image, error) {
	var v value
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, image{offsets: map[groupoffsets.Partition]groupoffsets.Offset{}}, err
	}
	im := image{offsets: make(map[groupoffsets.Partition]groupoffsets.Offset, len(v.Offsets)), meta: v.Meta}
	for _, o := range v.Offsets {
		im.offsets[groupoffsets.Partition{Topic: o.Topic, Partition: o.Partition}] = o
	}
	return v, im, nil
}

// Open creates the bucket if needed (or opens it as the operator left it)
// and waits for its leader.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Store, error) {
	if err := sljs.BucketDefaults(&o.Prefix, &o.Replicas, &o.Timeout); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	js, err := njs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w (%w)", err, ErrStorage)
	}
	octx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	bucket := sljs.OffsetsBucket(o.Prefix)
	kv, err := sljs.OpenKV(octx, js, bucket, "sharelog consumer groups' committed offsets", o.Replicas)
	if err != nil {
		return nil, sljs.Wrap(ctx, "open the offsets bucket "+bucket, err, ErrStorage)
	}
	// Headroom for the message's headers under the connection's limit.
	maxSize := int(nc.MaxPayload()) - 1024
	return &Store{kv: kv, bucket: bucket, o: o, maxSize: maxSize, groups: map[string]*held{}}, nil
}

func (s *Store) String() string { return "KV bucket " + s.bucket }

func (s *Store) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.o.Timeout)
}

// key is a group's key: g.<hex(group)>.
func key(group string) string { return "g." + sljs.HexKey(group) }

// groupOf is the group a key names (false: not a group key).
func groupOf(k string) (string, bool) {
	tok, ok := strings.CutPrefix(k, "g.")
	if !ok || strings.Contains(tok, ".") {
		return "", false
	}
	g, err := sljs.UnhexKey(tok)
	return g, err == nil
}

var errClosed = fmt.Errorf("the offsets store is closed (%w)", ErrStorage)

// Load implements groupoffsets.Store: every group of the bucket, fenced
// with Options.Epoch (doc.go "Fencing"), unless the store is scoped (none).
func (s *Store) Load() ([]groupoffsets.Group, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	out := []groupoffsets.Group{}
	if s.o.Scoped {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*s.o.Timeout)
	defer cancel()
	keys, err := s.read(ctx, "g.*")
	if err != nil {
		return nil, sljs.Wrap(ctx, "read "+s.String(), err, ErrStorage)
	}
	for k, e := range keys {
		id, ok := groupOf(k)
		if !ok {
			continue
		}
		h, err := s.fence(ctx, id, s.o.Epoch, e)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.groups[id] = h
		s.mu.Unlock()
		if !h.im.empty() {
			out = append(out, h.im.group(id))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Adopt reads the group's key, fences it with epoch (the group's lease
// revision) and holds the group: its writes are this store's from now on
// (a scoped store's coordination of one group, doc.go "Scoped"). ok is
// false when the bucket holds nothing of the group. ErrFenced: a newer
// term wrote it.
func (s *Store) Adopt(ctx context.Context, group string, epoch uint64) (g groupoffsets.Group, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*s.o.Timeout)
	defer cancel()
	keys, err := s.read(ctx, key(group))
	if err != nil {
		return g, false, sljs.Wrap(ctx, "read "+s.String(), err, ErrStorage)
	}
	h, err := s.fence(ctx, group, epoch, keys[key(group)])
	if err != nil {
		return g, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return g, false, errClosed
	}
	if old := s.groups[group]; old != nil {
		old.mu.Lock()
		old.dropped = true
		old.mu.Unlock()
	}
	s.groups[group] = h
	return h.im.group(group), !h.im.empty(), nil
}

// Drop stops holding the group (its coordination moves): later writes of
// it are refused, after those running.
func (s *Store) Drop(group string) {
	s.mu.Lock()
	h := s.groups[group]
	delete(s.groups, group)
	s.mu.Unlock()
	if h != nil {
		h.mu.Lock()
		h.dropped = true
		h.mu.Unlock()
	}
}

// GroupIDs lists the groups that have a key in the bucket, whoever
// coordinates them, sorted: a view a moment behind (not read through a
// mark), for placing the groups over the instances.
func (s *Store) GroupIDs(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	const op = "list the groups of the offsets bucket"
	ids := []string{}
	kl, err := s.kv.ListKeysFiltered(ctx, "g.*")
	if errors.Is(err, njs.ErrNoKeysFound) {
		return ids, nil
	}
	if err != nil {
		return nil, sljs.Wrap(ctx, op, err, ErrStorage)
	}
	for k := range kl.Keys() {
		if g, ok := groupOf(k); ok {
			ids = append(ids, g)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, sljs.Wrap(ctx, op, err, ErrStorage)
	}
	sort.Strings(ids)
	return ids, nil
}

// fence makes the group's key this term's: a key of an older term (or of
// this one) is written again unchanged with epoch, on condition of the
// revision read, so that a write of the term before, which holds that
// revision, fails (doc.go "Fencing"). A key absent is left absent.
func (s *Store) fence(ctx context.Context, group string, epoch uint64, e njs.KeyValueEntry) (*held, error) {
	k := key(group)
	for range 5 {
		h := &held{id: group, epoch: epoch, im: image{offsets: map[groupoffsets.Partition]groupoffsets.Offset{}}}
		if e == nil || e.Operation() != njs.KeyValuePut {
			return h, nil
		}
		v, im, err := decode(e.Value())
		if err != nil {
			s.o.Logger.Warn("consumer-group offsets: a damaged key is read as empty; the group's offsets are lost", "bucket", s.bucket, "group", group, "err", err)
		}
		if v.Epoch > epoch {
			return nil, fmt.Errorf("group %q: written at term %d, after this instance's %d: %w", group, v.Epoch, epoch, groupoffsets.ErrFenced)
		}
		h.im = im
		raw, err := json.Marshal(value{Epoch: epoch, Offsets: im.sorted(), Meta: im.meta})
		if err != nil {
			return nil, err
		}
		rev, err := s.kv.Update(ctx, k, raw, e.Revision())
		if err == nil {
			h.rev = rev
			return h, nil
		}
		if !conflict(err) {
			return nil, sljs.Wrap(ctx, "fence "+s.String(), err, ErrStorage)
		}
		// Written since the read: read it again.
		keys, err := s.read(ctx, k)
		if err != nil {
			return nil, sljs.Wrap(ctx, "read "+s.String(), err, ErrStorage)
		}
		e = keys[k]
	}
	return nil, fmt.Errorf("group %q keeps being written by another instance (%w)", group, ErrStorage)
}

func conflict(err error) bool {
	return errors.Is(err, njs.ErrKeyExists) || errors.Is(err, njs.ErrKeyRevisionMismatch) || sljs.IsWrongLastSequence(err)
}

// Commit implements groupoffsets.Store.
func (s *Store) Commit(group string, offsets []groupoffsets.Offset) error {
	return s.write(group, func(im *image) {
		for _, o := range offsets {
			im.offsets[groupoffsets.Partition{Topic: o.Topic, Partition: o.Partition}] = o
		}
	})
}

// Delete implements groupoffsets.Store.
func (s *Store) Delete(group string, parts []groupoffsets.Partition) error {
	return s.write(group, func(im *image) {
		if parts == nil {
			*im = image{offsets: map[groupoffsets.Partition]groupoffsets.Offset{}}
			return
		}
		for _, p := range parts {
			delete(im.offsets, p)
		}
	})
}

// SetMeta implements groupoffsets.Store.
func (s *Store) SetMeta(group string, m groupoffsets.Meta) error {
	return s.write(group, func(im *image) { im.meta = m })
}

// Close implements groupoffsets.Store: every write has been acknowledged
// already; later calls fail.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// held returns the group's held state; an unscoped store holds a group it
// has not seen from its first write (a new group: no key).
func (s *Store) held(group string) (*held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	h := s.groups[group]
	if h == nil {
		if s.o.Scoped {
			return nil, fmt.Errorf("group %q is not adopted by this instance: %w", group, groupoffsets.ErrFenced)
		}
		h = &held{id: group, epoch: s.o.Epoch, im: image{offsets: map[groupoffsets.Partition]groupoffsets.Offset{}}}
		s.groups[group] = h
	}
	return h, nil
}

// write applies change to a copy of the group's image and writes it as
// the group's key, on condition of the revision held (doc.go "Writes").
// On error the image is unchanged.
func (s *Store) write(group string, change func(*image)) error {
	h, err := s.held(group)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dropped {
		return fmt.Errorf("group %q is no longer held by this instance: %w", group, groupoffsets.ErrFenced)
	}
	next := image{offsets: make(map[groupoffsets.Partition]groupoffsets.Offset, len(h.im.offsets)), meta: h.im.meta}
	for k, v := range h.im.offsets {
		next.offsets[k] = v
	}
	change(&next)
	if next.empty() && h.rev == 0 {
		h.im = next
		return nil // nothing in the bucket, nothing to write
	}
	var raw []byte
	if !next.empty() {
		if raw, err = json.Marshal(value{Epoch: h.epoch, Offsets: next.sorted(), Meta: next.meta}); err != nil {
			return err
		}
		if len(raw) > s.maxSize {
			return fmt.Errorf("group %q: its %d committed offsets take %d bytes, more than a NATS message may (%d) (%w)",
				group, len(next.offsets), len(raw), s.maxSize, ErrStorage)
		}
	}
	ctx, cancel := s.opCtx()
	defer cancel()
	k := key(group)
	for range 2 {
		rev, err := s.put(ctx, k, raw, h.rev)
		if err == nil {
			h.rev, h.im = rev, next
			return nil
		}
		if !conflict(err) {
			// The outcome is unknown: if the write landed, the next one
			// conflicts with it, finds this term's epoch and writes over
			// it (below).
			return sljs.Wrap(ctx, "write "+s.String(), err, ErrStorage)
		}
		keys, rerr := s.read(ctx, k)
		if rerr != nil {
			return sljs.Wrap(ctx, "read "+s.String(), rerr, ErrStorage)
		}
		cur := keys[k]
		rev = 0
		if cur != nil && cur.Operation() == njs.KeyValuePut {
			v, _, derr := decode(cur.Value())
			if derr == nil && v.Epoch > h.epoch {
				h.dropped = true
				if s.o.OnFenced != nil {
					go s.o.OnFenced(group)
				}
				return fmt.Errorf("group %q: written at term %d, after this instance's %d: %w", group, v.Epoch, h.epoch, groupoffsets.ErrFenced)
			}
			rev = cur.Revision()
		} else if cur != nil {
			rev = cur.Revision() // a delete marker: written over by revision
		}
		// This term's own write whose answer was lost, or one of an older
		// term after this one read the key: this term's image wins.
		h.rev = rev
	}
	return fmt.Errorf("group %q keeps being written by another instance (%w)", group, ErrStorage)
}

// put writes raw as k on condition that its revision is rev (0: absent),
// or deletes k when raw is nil; it returns the new revision (0 after a
// delete: the key is absent).
func (s *Store) put(ctx context.Context, k string, raw []byte, rev uint64) (uint64, error) {
	switch {
	case raw == nil:
		if err := s.kv.Delete(ctx, k, njs.LastRevision(rev)); err != nil {
			return 0, mapConflict(err)
		}
		return 0, nil
	case rev == 0:
		return s.kv.Create(ctx, k, raw)
	default:
		return s.kv.Update(ctx, k, raw, rev)
	}
}

func mapConflict(err error) error {
	if sljs.IsWrongLastSequence(err) {
		return fmt.Errorf("%w: %w", err, njs.ErrKeyRevisionMismatch)
	}
	return err
}
