package jstxn

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

	sljs "github.com/sharelog/sharelog/internal/storage/jetstream"
	"github.com/sharelog/sharelog/internal/storage/txnstate"
)

// ErrStorage wraps every failure to reach or use the bucket.
var ErrStorage = errors.New("the cluster's transaction bucket failed")

// version is the value layout this package writes and reads (doc.go).
const version = 1

// Options configures Open.
type Options struct {
	// Prefix names the bucket (default sljs.DefaultPrefix).
	Prefix string
	// Replicas of the bucket when it is created (default 3; --nats-replicas).
	Replicas int
	// Timeout bounds each operation (default 10 s).
	Timeout time.Duration
	// Scoped: Load holds and returns no id; the store reads and writes
	// only the ids it adopts (Adopt), as the coordinator of some ids
	// among several instances (partitioned mode).
	Scoped bool
	// Epoch is the writer's term in an unscoped store (the active
	// instance's lease revision): stamped on every value written, and
	// what Load fences the ids it reads with.
	Epoch uint64
	// OnFenced, if set, is told (on a goroutine of its own) of an id
	// whose write found it written by a newer term: this instance lost it.
	OnFenced func(id string)
	Logger   *slog.Logger
}

// Store is txnstate.Store over one KV bucket (doc.go).
type Store struct {
	kv     njs.KeyValue
	bucket string
	o      Options

	mu     sync.Mutex // ids, closed; a leaf
	ids    map[string]*held
	closed bool
}

var _ txnstate.Store = (*Store)(nil)

// held is a transactional id this store writes.
type held struct {
	mu      sync.Mutex // serializes the id's writes; before Store.mu
	rev     uint64     // of the key as last read or written; 0: no key
	epoch   uint64     // this store's term of the id
	dropped bool       // Drop, or fenced: writes are refused
}

// value is a key's JSON.
type value struct {
	Version int          `json:"v"`
	Epoch   uint64       `json:"e"`
	Txn     txnstate.Txn `json:"t"`
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
	bucket := sljs.TxnsBucket(o.Prefix)
	kv, err := sljs.OpenKV(octx, js, bucket, "sharelog Kafka transaction coordinator state", o.Replicas)
	if err != nil {
		return nil, sljs.Wrap(ctx, "open the transaction bucket "+bucket, err, ErrStorage)
	}
	return &Store{kv: kv, bucket: bucket, o: o, ids: map[string]*held{}}, nil
}

func (s *Store) String() string { return "KV bucket " + s.bucket }

// key is a transactional id's key: t.<hex(id)>.
func key(id string) string { return "t." + sljs.HexKey(id) }

// idOf is the transactional id a key names (false: not an id's key).
func idOf(k string) (string, bool) {
	tok, ok := strings.CutPrefix(k, "t.")
	if !ok || strings.Contains(tok, ".") {
		return "", false
	}
	id, err := sljs.UnhexKey(tok)
	return id, err == nil
}

var errClosed = fmt.Errorf("the transaction store is closed (%w)", ErrStorage)

func decode(id string, raw []byte) (value, error) {
	var v value
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("transactional id %q: its state in the bucket is damaged: %w (%w)", id, err, ErrStorage)
	}
	if v.Version != version {
		return v, fmt.Errorf("transactional id %q: its state has version %d, this server reads %d (%w)", id, v.Version, version, ErrStorage)
	}
	if v.Txn.ID != id {
		return v, fmt.Errorf("transactional id %q: its key holds the state of %q (%w)", id, v.Txn.ID, ErrStorage)
	}
	return v, nil
}

// Load implements txnstate.Store: every id of the bucket, fenced with
// Options.Epoch (doc.go "Fencing"), unless the store is scoped (none).
func (s *Store) Load() ([]txnstate.Txn, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	out := []txnstate.Txn{}
	if s.o.Scoped {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*s.o.Timeout)
	defer cancel()
	keys, err := s.read(ctx, "t.*")
	if err != nil {
		return nil, sljs.Wrap(ctx, "read "+s.String(), err, ErrStorage)
	}
	for k, e := range keys {
		id, ok := idOf(k)
		if !ok {
			continue
		}
		h, t, ok, err := s.fence(ctx, id, s.o.Epoch, e)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.ids[id] = h
		s.mu.Unlock()
		if ok {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Adopt reads the id's key, fences it with epoch (the id's lease
// revision) and holds the id: its writes are this store's from now on
// (doc.go "Scoped mode"). ok is false when the bucket holds nothing of
// the id. txnstate.ErrFenced: a newer term wrote it.
func (s *Store) Adopt(ctx context.Context, id string, epoch uint64) (t txnstate.Txn, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*s.o.Timeout)
	defer cancel()
	keys, err := s.read(ctx, key(id))
	if err != nil {
		return t, false, sljs.Wrap(ctx, "read "+s.String(), err, ErrStorage)
	}
	h, t, ok, err := s.fence(ctx, id, epoch, keys[key(id)])
	if err != nil {
		return t, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return t, false, errClosed
	}
	if old := s.ids[id]; old != nil {
		old.mu.Lock()
		old.dropped = true
		old.mu.Unlock()
	}
	s.ids[id] = h
	return t, ok, nil
}

// Drop stops holding the id (its coordination moves): later writes of it
// are refused, after those running.
func (s *Store) Drop(id string) {
	s.mu.Lock()
	h := s.ids[id]
	delete(s.ids, id)
	s.mu.Unlock()
	if h != nil {
		h.mu.Lock()
		h.dropped = true
		h.mu.Unlock()
	}
}

// fence makes the id's key this term's: a key of an older term (or of
// this one) is written again unchanged with epoch, on condition of the
// revision read, so that a write of the term before, which holds that
// revision, fails (doc.go "Fencing"). A key absent is left absent.
func (s *Store) fence(ctx context.Context, id string, epoch uint64, e njs.KeyValueEntry) (*held, txnstate.Txn, bool, error) {
	k := key(id)
	for range 5 {
		h := &held{epoch: epoch}
		if e == nil || e.Operation() != njs.KeyValuePut {
			if e != nil {
				h.rev = e.Revision() // a delete marker: written over by revision
			}
			return h, txnstate.Txn{}, false, nil
		}
		v, err := decode(id, e.Value())
		if err != nil {
			return nil, txnstate.Txn{}, false, err
		}
		if v.Epoch > epoch {
			return nil, txnstate.Txn{}, false, fmt.Errorf("transactional id %q: written at term %d, after this instance's %d: %w", id, v.Epoch, epoch, txnstate.ErrFenced)
		}
		raw, err := json.Marshal(value{Version: version, Epoch: epoch, Txn: v.Txn})
		if err != nil {
			return nil, txnstate.Txn{}, false, err
		}
		rev, err := s.kv.Update(ctx, k, raw, e.Revision())
		if err == nil {
			h.rev = rev
			return h, v.Txn, true, nil
		}
		if !conflict(err) {
			return nil, txnstate.Txn{}, false, sljs.Wrap(ctx, "fence "+s.String(), err, ErrStorage)
		}
		// Written since the read: read it again.
		keys, err := s.read(ctx, k)
		if err != nil {
			return nil, txnstate.Txn{}, false, sljs.Wrap(ctx, "read "+s.String(), err, ErrStorage)
		}
		e = keys[k]
	}
	return nil, txnstate.Txn{}, false, fmt.Errorf("transactional id %q keeps being written by another instance (%w)", id, ErrStorage)
}

func conflict(err error) bool {
	return errors.Is(err, njs.ErrKeyExists) || errors.Is(err, njs.ErrKeyRevisionMismatch) || sljs.IsWrongLastSequence(err)
}

// heldOf returns the id's held state; an unscoped store holds an id it
// has not seen from its first write (a new id: no key).
func (s *Store) heldOf(id string) (*held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	h := s.ids[id]
	if h == nil {
		if s.o.Scoped {
			return nil, fmt.Errorf("transactional id %q is not adopted by this instance: %w", id, txnstate.ErrFenced)
		}
		h = &held{epoch: s.o.Epoch}
		s.ids[id] = h
	}
	return h, nil
}

// Put implements txnstate.Store: t written as its id's key on condition
// of the revision held (doc.go "Writes").
func (s *Store) Put(t txnstate.Txn) error {
	h, err := s.heldOf(t.ID)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dropped {
		return fmt.Errorf("transactional id %q is no longer held by this instance: %w", t.ID, txnstate.ErrFenced)
	}
	raw, err := json.Marshal(value{Version: version, Epoch: h.epoch, Txn: t})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	k := key(t.ID)
	for range 2 {
		var rev uint64
		if h.rev == 0 {
			rev, err = s.kv.Create(ctx, k, raw)
		} else {
			rev, err = s.kv.Update(ctx, k, raw, h.rev)
		}
		if err == nil {
			h.rev = rev
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
		h.rev = 0
		if cur != nil {
			h.rev = cur.Revision()
			if cur.Operation() == njs.KeyValuePut {
				var v value
				if json.Unmarshal(cur.Value(), &v) == nil && v.Epoch > h.epoch {
					h.dropped = true
					if s.o.OnFenced != nil {
						go s.o.OnFenced(t.ID)
					}
					return fmt.Errorf("transactional id %q: written at term %d, after this instance's %d: %w", t.ID, v.Epoch, h.epoch, txnstate.ErrFenced)
				}
			}
		}
		// This term's own write whose answer was lost, or one of an older
		// term after this one read the key: this term's record wins.
	}
	return fmt.Errorf("transactional id %q keeps being written by another instance (%w)", t.ID, ErrStorage)
}

// Delete implements txnstate.Store: the id's key deleted on condition of
// the revision held, as Put writes it (an expired transactional id). A
// later Put of the id creates the key again.
func (s *Store) Delete(id string) error {
	h, err := s.heldOf(id)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dropped {
		return fmt.Errorf("transactional id %q is no longer held by this instance: %w", id, txnstate.ErrFenced)
	}
	if h.rev == 0 {
		return nil // never written by this term: nothing of it to delete
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.Timeout)
	defer cancel()
	if err := s.kv.Delete(ctx, key(id), njs.LastRevision(h.rev)); err != nil {
		if conflict(err) {
			// Written since: by another term (which now coordinates it)
			// or by a write of ours whose answer was lost. Either way the
			// id is not idle as this term knew it; keep it.
			return fmt.Errorf("transactional id %q was written since this instance last did: %w", id, txnstate.ErrFenced)
		}
		return sljs.Wrap(ctx, "delete in "+s.String(), err, ErrStorage)
	}
	h.rev = 0 // the next Put creates the key again
	return nil
}

// Close makes later calls fail; every write has been acknowledged already.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// HasState reports whether the bucket of prefix holds the state of any
// transactional id, without creating the bucket, holding or fencing
// anything: a view a moment behind (not read through a mark), for an
// instance that coordinates no ids but reads a log that transactional
// producers may have written (the change streams' read-committed checks).
func HasState(ctx context.Context, nc *nats.Conn, prefix string) (bool, error) {
	if prefix == "" {
		prefix = sljs.DefaultPrefix
	}
	js, err := njs.New(nc)
	if err != nil {
		return false, fmt.Errorf("jetstream: %w (%w)", err, ErrStorage)
	}
	kv, err := js.KeyValue(ctx, sljs.TxnsBucket(prefix))
	if errors.Is(err, njs.ErrBucketNotFound) {
		return false, nil
	}
	if err != nil {
		return false, sljs.Wrap(ctx, "open the transaction bucket", err, ErrStorage)
	}
	kl, err := kv.ListKeysFiltered(ctx, "t.*")
	if errors.Is(err, njs.ErrNoKeysFound) {
		return false, nil
	}
	if err != nil {
		return false, sljs.Wrap(ctx, "list the transaction bucket", err, ErrStorage)
	}
	found := false
	for range kl.Keys() {
		found = true
	}
	if err := ctx.Err(); err != nil {
		return false, sljs.Wrap(ctx, "list the transaction bucket", err, ErrStorage)
	}
	return found, nil
}
