package authz

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
	"sync"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// Store keeps the bindings durably. Save replaces the whole set; once it
// returns nil the set survives a crash. A second implementation (cluster
// mode's shared store) passes the same tests as FileStore.
type Store interface {
	// Load returns the stored bindings (none on first use). A store that
	// cannot be read or decoded is an error, never an empty set.
	Load(ctx context.Context) ([]Binding, error)
	// Save durably replaces the stored bindings with bs.
	Save(ctx context.Context, bs []Binding) error
	// String names the store in errors (a file path).
	String() string
}

// FileName is the name of FileStore's file in the data directory.
const FileName = "acls.json"

// fileFormat is the version of the file's layout.
const fileFormat = 1

// FileStore keeps the bindings in one JSON file, replaced atomically.
type FileStore struct {
	path string
}

// NewFileStore returns the store of the file FileName in dir, removing a
// temporary file left by a crash during a save.
func NewFileStore(dir string) (*FileStore, error) {
	path := filepath.Join(dir, FileName)
	if err := os.Remove(path + fsutil.TmpSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove %s: %w", path+fsutil.TmpSuffix, err)
	}
	return &FileStore{path: path}, nil
}

func (s *FileStore) String() string { return s.path }

// fileDoc is the file's JSON: {"format":1,"bindings":[...]}.
type fileDoc struct {
	Format   int           `json:"format"`
	Bindings []fileBinding `json:"bindings"`
}

// fileBinding uses the names of the API's JSON (principal, resourceType,
// patternType, resourceName, operation, permission) with Kafka's words as
// values.
type fileBinding struct {
	Principal    string `json:"principal"`
	ResourceType string `json:"resourceType"`
	PatternType  string `json:"patternType"`
	ResourceName string `json:"resourceName"`
	Operation    string `json:"operation"`
	Permission   string `json:"permission"`
}

func lookup(names []string, s string) (uint8, bool) {
	i := slices.Index(names, s)
	return uint8(i), i > 0 // index 0 is "ANY", never stored
}

// Load reads the file; a missing file is no bindings.
func (s *FileStore) Load(context.Context) ([]Binding, error) {
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ACL file %s: %w", s.path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var doc fileDoc
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("ACL file %s is damaged (restore it from a backup, or remove it to start without bindings): %w", s.path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("ACL file %s is damaged: data after the document", s.path)
	}
	if doc.Format != fileFormat {
		return nil, fmt.Errorf("ACL file %s: format %d, this version reads format %d", s.path, doc.Format, fileFormat)
	}
	out := make([]Binding, len(doc.Bindings))
	for i, fb := range doc.Bindings {
		rt, ok1 := lookup(resourceTypeNames[:], fb.ResourceType)
		pt, ok2 := lookup(patternTypeNames[:], fb.PatternType)
		op, ok3 := lookup(operationNames[:], fb.Operation)
		pm, ok4 := lookup(permissionNames[:], fb.Permission)
		b := Binding{Principal: fb.Principal, ResourceType: ResourceType(rt), PatternType: PatternType(pt),
			ResourceName: fb.ResourceName, Operation: Operation(op), Permission: Permission(pm)}
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, fmt.Errorf("ACL file %s is damaged: binding %d has an unknown value in %+v", s.path, i, fb)
		}
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("ACL file %s is damaged: binding %d: %w", s.path, i, err)
		}
		out[i] = b
	}
	return out, nil
}

// Save replaces the file: temporary file, fsync, rename, fsync of the
// directory (ACL changes are rare; they are always made durable).
func (s *FileStore) Save(_ context.Context, bs []Binding) error {
	doc := fileDoc{Format: fileFormat, Bindings: make([]fileBinding, len(bs))}
	for i, b := range bs {
		doc.Bindings[i] = fileBinding{Principal: b.Principal, ResourceType: b.ResourceType.String(), PatternType: b.PatternType.String(),
			ResourceName: b.ResourceName, Operation: b.Operation.String(), Permission: b.Permission.String()}
	}
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(s.path, append(raw, '\n'), fsutil.SyncFileAndDir); err != nil {
		return fmt.Errorf("save ACL file %s: %w", s.path, err)
	}
	return nil
}

// MemStore keeps bindings in memory: for tests only.
type MemStore struct {
	mu       sync.Mutex
	bindings []Binding
	// SaveErr, when set, fails every Save.
	SaveErr error
}

// Load returns what was last saved.
func (m *MemStore) Load(context.Context) ([]Binding, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.bindings), nil
}

// Save keeps bs, or fails with SaveErr.
func (m *MemStore) Save(_ context.Context, bs []Binding) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.SaveErr != nil {
		return m.SaveErr
	}
	m.bindings = slices.Clone(bs)
	return nil
}

func (m *MemStore) String() string { return "memory" }
