// Package txnstate keeps the Kafka transaction coordinator's state
// (internal/txn; docs/kafka.md "Transactions") durable: one record per
// transactional id, its producer id and epoch, its timeout, the status of
// its current transaction, the partitions and groups in it and the
// offsets it will commit.
//
// # On disk
//
// <data dir>/transactions.json holds every transactional id's record as a
// JSON object keyed by transactional id, under {"version": 1, "ids": ...}.
// Each change rewrites the file with an atomic replacement (temp file,
// fsync, rename, fsync of the directory, as --fsync says), so a crash
// leaves the state before or after the change, never half of it. A
// missing file is an empty state; a damaged one is an error (the server
// refuses to guess which transactions were in flight).
package txnstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// FileName is the state's file in the data directory.
const FileName = "transactions.json"

// Status is where a transactional id's current transaction is.
type Status string

// The statuses, as Kafka's coordinator's.
const (
	Empty          Status = "Empty"          // no transaction open
	Ongoing        Status = "Ongoing"        // partitions or groups added
	PrepareCommit  Status = "PrepareCommit"  // EndTxn commit accepted, markers being written
	PrepareAbort   Status = "PrepareAbort"   // abort accepted (EndTxn, timeout, fencing)
	CompleteCommit Status = "CompleteCommit" // markers written, offsets committed
	CompleteAbort  Status = "CompleteAbort"  // abort markers written
)

// Partition is a topic partition of a transaction.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// Offset is an offset a transaction commits for a group when it commits.
type Offset struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	LeaderEpoch int32  `json:"leader_epoch"`
	Metadata    string `json:"metadata,omitempty"`
}

// Txn is one transactional id's record.
type Txn struct {
	ID         string              `json:"id"`
	ProducerID int64               `json:"producer_id"`
	Epoch      int16               `json:"epoch"`
	TimeoutMs  int32               `json:"timeout_ms"`
	Status     Status              `json:"status"`
	StartMs    int64               `json:"start_ms,omitempty"` // when the current transaction began
	UpdateMs   int64               `json:"update_ms"`
	Partitions []Partition         `json:"partitions,omitempty"`
	Groups     []string            `json:"groups,omitempty"`
	Offsets    map[string][]Offset `json:"offsets,omitempty"` // group -> pending offsets
}

// Clone returns a deep copy of t.
func (t Txn) Clone() Txn {
	t.Partitions = slices.Clone(t.Partitions)
	t.Groups = slices.Clone(t.Groups)
	if t.Offsets != nil {
		m := make(map[string][]Offset, len(t.Offsets))
		for g, o := range t.Offsets {
			m[g] = slices.Clone(o)
		}
		t.Offsets = m
	}
	return t
}

// Store keeps the records.
type Store interface {
	// Load returns every record, as last written.
	Load() ([]Txn, error)
	// Put writes t (replacing the record of its id), durable when it
	// returns. ErrFenced: another coordinator holds the id now (cluster
	// mode), nothing was written.
	Put(t Txn) error
	// Delete removes id's record (an expired transactional id), durable
	// when it returns; deleting a missing id is no error. ErrFenced as
	// Put.
	Delete(id string) error
}

// ErrFenced is a write refused because another instance coordinates the
// transactional id now (a newer term wrote it, or this instance no longer
// holds it): the caller is no longer its coordinator.
var ErrFenced = errors.New("the transactional id is coordinated by another instance")

type fileDoc struct {
	Version int            `json:"version"`
	IDs     map[string]Txn `json:"ids"`
}

// File is the state in one data directory; safe for concurrent use.
type File struct {
	path string
	sync fsutil.Sync

	mu  sync.Mutex
	ids map[string]Txn // nil until loaded
}

// Open returns the state of dir.
func Open(dir string, sync fsutil.Sync) *File {
	return &File{path: filepath.Join(dir, FileName), sync: sync}
}

func (f *File) load() error {
	if f.ids != nil {
		return nil
	}
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		f.ids = map[string]Txn{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the transaction state: %w", err)
	}
	var doc fileDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("the transaction state %s is damaged: %w", f.path, err)
	}
	if doc.Version != 1 {
		return fmt.Errorf("the transaction state %s has version %d, this server reads 1", f.path, doc.Version)
	}
	if doc.IDs == nil {
		doc.IDs = map[string]Txn{}
	}
	f.ids = doc.IDs
	return nil
}

// Load implements Store.
func (f *File) Load() ([]Txn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(); err != nil {
		return nil, err
	}
	out := make([]Txn, 0, len(f.ids))
	for _, id := range slices.Sorted(maps.Keys(f.ids)) {
		out = append(out, f.ids[id].Clone())
	}
	return out, nil
}

// Put implements Store.
func (f *File) Put(t Txn) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(); err != nil {
		return err
	}
	next := maps.Clone(f.ids)
	next[t.ID] = t.Clone()
	b, err := json.Marshal(fileDoc{Version: 1, IDs: next})
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(f.path, b, f.sync); err != nil {
		return fmt.Errorf("write the transaction state: %w", err)
	}
	f.ids = next
	return nil
}

// Delete implements Store.
func (f *File) Delete(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(); err != nil {
		return err
	}
	if _, ok := f.ids[id]; !ok {
		return nil
	}
	next := maps.Clone(f.ids)
	delete(next, id)
	b, err := json.Marshal(fileDoc{Version: 1, IDs: next})
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(f.path, b, f.sync); err != nil {
		return fmt.Errorf("write the transaction state: %w", err)
	}
	f.ids = next
	return nil
}

// Mem is a Store in memory (tests, and servers without a data directory).
type Mem struct {
	mu  sync.Mutex
	ids map[string]Txn
}

// NewMem returns an empty Mem.
func NewMem() *Mem { return &Mem{ids: map[string]Txn{}} }

// Load implements Store.
func (m *Mem) Load() ([]Txn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Txn, 0, len(m.ids))
	for _, id := range slices.Sorted(maps.Keys(m.ids)) {
		out = append(out, m.ids[id].Clone())
	}
	return out, nil
}

// Put implements Store.
func (m *Mem) Put(t Txn) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ids[t.ID] = t.Clone()
	return nil
}

// Delete implements Store.
func (m *Mem) Delete(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ids, id)
	return nil
}
