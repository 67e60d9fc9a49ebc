// Package scramcreds stores the SCRAM credentials of the Kafka listener's
// users (docs/security.md "SCRAM users"): per user and mechanism the salt,
// the iteration count, StoredKey and ServerKey of RFC 5802 — never the
// password, nor the salted password, from which neither can be recovered
// without a brute-force search.
//
// Store is the interface the domain (internal/users) uses. FileStore keeps
// the credentials of a data directory in one JSON file, replaced atomically
// (internal/fsutil) with mode 0600; cluster mode keeps them in a NATS KV
// bucket (internal/storage/jetstream/jsusers) so that every instance sees
// the same users. Both pass the conformance suite in scramcredstest.
package scramcreds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// The mechanisms a credential may be for (RFC 7677 and RFC 6234 hashes).
const (
	SHA256 = "SCRAM-SHA-256"
	SHA512 = "SCRAM-SHA-512"
)

// ErrStorage wraps every failure to read or write the store: the caller
// cannot tell whether a write took effect.
var ErrStorage = errors.New("SCRAM credential store")

// Credential is one user's credential for one mechanism.
type Credential struct {
	User       string
	Mechanism  string // SHA256 or SHA512
	Salt       []byte
	Iterations int
	StoredKey  []byte // H(HMAC(SaltedPassword, "Client Key"))
	ServerKey  []byte // HMAC(SaltedPassword, "Server Key")
}

// Store keeps credentials durably: once Put or Delete returns nil the
// change survives a crash and a restart. Methods are safe for concurrent
// use.
type Store interface {
	// Get returns the credential of user for mechanism; ok is false when
	// there is none.
	Get(ctx context.Context, user, mechanism string) (c Credential, ok bool, err error)
	// List returns every credential, sorted by user, then mechanism.
	List(ctx context.Context) ([]Credential, error)
	// Put creates or replaces the credential of c.User for c.Mechanism.
	Put(ctx context.Context, c Credential) error
	// Delete removes the credential of user for mechanism; found is false
	// when there was none (nothing changed).
	Delete(ctx context.Context, user, mechanism string) (found bool, err error)
	// String names the store in errors (a file path, a bucket).
	String() string
}

// Sort orders cs by user, then mechanism (what List returns).
func Sort(cs []Credential) {
	slices.SortFunc(cs, func(a, b Credential) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Mechanism, b.Mechanism)
	})
}

// Record is a credential's stored JSON, shared by the file and the KV
// store: bytes are base64 (encoding/json's []byte).
type Record struct {
	User       string `json:"user"`
	Mechanism  string `json:"mechanism"`
	Salt       []byte `json:"salt"`
	Iterations int    `json:"iterations"`
	StoredKey  []byte `json:"storedKey"`
	ServerKey  []byte `json:"serverKey"`
}

// ToRecord is c as stored.
func ToRecord(c Credential) Record {
	return Record(c)
}

// Credential is r checked: a known mechanism, a user, a salt, a positive
// iteration count and keys of the mechanism's hash size.
func (r Record) Credential() (Credential, error) {
	c := Credential(r)
	size := map[string]int{SHA256: 32, SHA512: 64}[r.Mechanism]
	switch {
	case size == 0:
		return c, fmt.Errorf("unknown mechanism %q", r.Mechanism)
	case r.User == "":
		return c, errors.New("no user")
	case len(r.Salt) == 0 || r.Iterations <= 0:
		return c, fmt.Errorf("user %q %s: no salt or no iterations", r.User, r.Mechanism)
	case len(r.StoredKey) != size || len(r.ServerKey) != size:
		return c, fmt.Errorf("user %q %s: keys of the wrong size", r.User, r.Mechanism)
	}
	return c, nil
}

// FileName is the name of FileStore's file in the data directory.
const FileName = "scram-credentials.json"

// fileFormat is the version of the file's layout.
const fileFormat = 1

type fileDoc struct {
	Format      int      `json:"format"`
	Credentials []Record `json:"credentials"`
}

type key struct{ user, mech string }

// FileStore keeps the credentials in one JSON file of the data directory,
// {"format":1,"credentials":[...]}, read once at open and replaced whole
// (temporary file, fsync, rename, fsync of the directory) by every change.
type FileStore struct {
	path string

	mu    sync.Mutex // held across a change's write, so changes apply in order
	creds map[key]Credential
}

// OpenFile opens the store of the file FileName in dir (removing a
// temporary file left by a crash during a save). A file that cannot be
// read or decoded is an error, never an empty store.
func OpenFile(dir string) (*FileStore, error) {
	path := filepath.Join(dir, FileName)
	if err := os.Remove(path + fsutil.TmpSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove %s: %w", path+fsutil.TmpSuffix, err)
	}
	s := &FileStore{path: path, creds: map[key]Credential{}}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read SCRAM credential file %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var doc fileDoc
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("SCRAM credential file %s is damaged (restore it from a backup, or remove it and set the users' credentials again): %w", path, err)
	}
	if doc.Format != fileFormat {
		return nil, fmt.Errorf("SCRAM credential file %s: format %d, this version reads format %d", path, doc.Format, fileFormat)
	}
	for i, r := range doc.Credentials {
		c, err := r.Credential()
		if err != nil {
			return nil, fmt.Errorf("SCRAM credential file %s is damaged: credential %d: %w", path, i, err)
		}
		s.creds[key{c.User, c.Mechanism}] = c
	}
	return s, nil
}

func (s *FileStore) String() string { return s.path }

// Get returns the credential from memory.
func (s *FileStore) Get(_ context.Context, user, mechanism string) (Credential, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.creds[key{user, mechanism}]
	return c, ok, nil
}

// List returns every credential from memory.
func (s *FileStore) List(context.Context) ([]Credential, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Credential, 0, len(s.creds))
	for _, c := range s.creds {
		out = append(out, c)
	}
	Sort(out)
	return out, nil
}

// Put writes the file with c in it; on failure nothing changed.
func (s *FileStore) Put(_ context.Context, c Credential) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{c.User, c.Mechanism}
	old, had := s.creds[k]
	s.creds[k] = c
	if err := s.save(); err != nil {
		if had {
			s.creds[k] = old
		} else {
			delete(s.creds, k)
		}
		return err
	}
	return nil
}

// Delete writes the file without the credential; on failure nothing
// changed.
func (s *FileStore) Delete(_ context.Context, user, mechanism string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{user, mechanism}
	old, had := s.creds[k]
	if !had {
		return false, nil
	}
	delete(s.creds, k)
	if err := s.save(); err != nil {
		s.creds[k] = old
		return false, err
	}
	return true, nil
}

// save replaces the file with s.creds. s.mu is held.
func (s *FileStore) save() error {
	doc := fileDoc{Format: fileFormat, Credentials: make([]Record, 0, len(s.creds))}
	cs := make([]Credential, 0, len(s.creds))
	for _, c := range s.creds {
		cs = append(cs, c)
	}
	Sort(cs)
	for _, c := range cs {
		doc.Credentials = append(doc.Credentials, ToRecord(c))
	}
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomicPerm(s.path, append(raw, '\n'), fsutil.SyncFileAndDir, 0o600); err != nil {
		return fmt.Errorf("%w: save %s: %w", ErrStorage, s.path, err)
	}
	return nil
}

// MemStore keeps credentials in memory: for tests only.
type MemStore struct {
	mu    sync.Mutex
	creds map[key]Credential
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{creds: map[key]Credential{}} }

func (m *MemStore) String() string { return "memory" }

// Get returns the credential.
func (m *MemStore) Get(_ context.Context, user, mechanism string) (Credential, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.creds[key{user, mechanism}]
	return c, ok, nil
}

// List returns every credential.
func (m *MemStore) List(context.Context) ([]Credential, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Credential, 0, len(m.creds))
	for _, c := range m.creds {
		out = append(out, c)
	}
	Sort(out)
	return out, nil
}

// Put keeps c.
func (m *MemStore) Put(_ context.Context, c Credential) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.creds[key{c.User, c.Mechanism}] = c
	return nil
}

// Delete removes the credential.
func (m *MemStore) Delete(_ context.Context, user, mechanism string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.creds[key{user, mechanism}]
	delete(m.creds, key{user, mechanism})
	return ok, nil
}
