package statelog

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// The manifest is a small file beside the state log, replaced atomically
// (temp, fsync, rename, fsync of the directory), that says what the log
// must contain: the generation recovery starts from, each generation file
// with a size it is known to have reached durably (a checkpoint), and the
// share-partitions that have durable state. With it, recovery tells a torn
// tail (damage after the newest file's checkpoint: entries never
// acknowledged) from lost acknowledged state (a file missing, shorter than
// its checkpoint, or damaged before it), and knows which share-partitions
// a lost file held. It is rewritten after the fsync that makes a new
// share-partition durable (before the initialisation is reported), after
// every CheckpointBytes of log, after each snapshot and at Close.
const manifestName = "share-state.manifest"

// defaultCheckpointBytes is how much log may follow the last manifest
// checkpoint before the next.
const defaultCheckpointBytes = 1 << 20

// Manifest is the manifest's content (ReadManifest).
type Manifest struct {
	Version int            `json:"version"`
	Base    uint64         `json:"base"`  // oldest generation recovery reads
	Files   []ManifestFile `json:"files"` // generations >= Base, ascending
	Parts   []manPart      `json:"share_partitions"`
}

type ManifestFile struct {
	Gen  uint64 `json:"generation"`
	Size int64  `json:"size"` // durable at least this long
}

type manPart struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
}

func (p manPart) String() string {
	return fmt.Sprintf("group %q share-partition %s/%d", p.Group, p.Topic, p.Partition)
}

const manifestCRCPrefix = "crc32c="

// encode renders the manifest: indented JSON, then a line with the
// CRC32C of the JSON.
func (mf *Manifest) encode() []byte {
	b, _ := json.MarshalIndent(mf, "", " ")
	b = append(b, '\n')
	return fmt.Appendf(b, "%s%08x\n", manifestCRCPrefix, crc32.Checksum(b, castagnoli))
}

var errNoManifest = errors.New("no manifest")

// readManifest reads the manifest; errNoManifest if there is none, another
// error if it is damaged.
func readManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoManifest
	}
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndex(b, []byte("\n"+manifestCRCPrefix))
	if i < 0 {
		return nil, errors.New("no checksum line")
	}
	body, sum := b[:i+1], strings.TrimSpace(string(b[i+1+len(manifestCRCPrefix):]))
	if fmt.Sprintf("%08x", crc32.Checksum(body, castagnoli)) != sum {
		return nil, errors.New("checksum mismatch")
	}
	var mf Manifest
	if err := json.Unmarshal(body, &mf); err != nil {
		return nil, err
	}
	if mf.Version != 1 {
		return nil, fmt.Errorf("unknown version %d", mf.Version)
	}
	return &mf, nil
}

// size returns the checkpoint of generation gen (0 if not listed).
func (mf *Manifest) size(gen uint64) int64 {
	if mf == nil {
		return 0
	}
	for _, f := range mf.Files {
		if f.Gen == gen {
			return f.Size
		}
	}
	return 0
}

// manState is what the Manager keeps to write the manifest; guarded by
// Manager.manMu (a leaf lock).
type manState struct {
	parts map[manPart]struct{}
	dirty bool   // parts changed since the last manifest
	base  uint64 // generation recovery starts from
	gen   uint64 // newest generation in the last manifest
	size  int64  // its size in the last manifest
}

// noteDurable records that k has (or is getting) durable state.
func (s *Store) noteDurable(k sharestate.PartitionKey) {
	mp := manPart(k)
	s.manMu.Lock()
	if _, ok := s.man.parts[mp]; !ok {
		s.man.parts[mp] = struct{}{}
		s.man.dirty = true
	}
	s.manMu.Unlock()
}

// noteDeleted records that k's durable state is being deleted.
func (s *Store) noteDeleted(k sharestate.PartitionKey) {
	mp := manPart(k)
	s.manMu.Lock()
	if _, ok := s.man.parts[mp]; ok {
		delete(s.man.parts, mp)
		s.man.dirty = true
	}
	s.manMu.Unlock()
}

// noteGroupDeleted records that a group's durable state is being deleted.
func (s *Store) noteGroupDeleted(group string) {
	s.manMu.Lock()
	for mp := range s.man.parts {
		if mp.Group == group {
			delete(s.man.parts, mp)
			s.man.dirty = true
		}
	}
	s.manMu.Unlock()
}

// onSynced is the state log's fsync callback: it writes the manifest when
// share-partitions changed, the file changed, or CheckpointBytes of log
// followed the last checkpoint. It runs before the fsynced entries are
// reported durable, so an initialisation is in the manifest before its
// share-partition is used.
func (s *Store) onSynced(gen uint64, size int64) {
	s.manMu.Lock()
	due := s.man.dirty || gen != s.man.gen || size-s.man.size >= s.opts.CheckpointBytes
	s.manMu.Unlock()
	if due {
		s.writeManifest(gen, size)
	}
}

// writeManifest writes the manifest with gen at size as the newest file.
// A failure is logged: the previous manifest stays, a conservative (older)
// checkpoint.
func (s *Store) writeManifest(gen uint64, size int64) {
	s.manWrite.Lock()
	defer s.manWrite.Unlock()
	s.manMu.Lock()
	if gen < s.man.gen || gen == s.man.gen && size < s.man.size && !s.man.dirty {
		s.manMu.Unlock()
		return // a newer checkpoint is already written
	}
	mf := Manifest{Version: 1, Base: s.man.base}
	for k := range s.man.parts {
		mf.Parts = append(mf.Parts, k)
	}
	s.man.dirty = false
	base := s.man.base
	s.manMu.Unlock()
	slices.SortFunc(mf.Parts, func(a, b manPart) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
	})
	for g, sz := range s.l.sealedSizes() {
		if g >= base && g < gen {
			mf.Files = append(mf.Files, ManifestFile{Gen: g, Size: sz})
		}
	}
	mf.Files = append(mf.Files, ManifestFile{Gen: gen, Size: size})
	slices.SortFunc(mf.Files, func(a, b ManifestFile) int { return cmp.Compare(a.Gen, b.Gen) })
	if err := fsutil.WriteFileAtomic(filepath.Join(s.opts.Dir, manifestName), mf.encode(), fsutil.SyncFileAndDir); err != nil {
		s.log.Warn("writing the share state manifest; the previous checkpoint stays", "err", err)
		s.manMu.Lock()
		s.man.dirty = true
		s.manMu.Unlock()
		return
	}
	s.manMu.Lock()
	s.man.gen, s.man.size = gen, size
	s.manMu.Unlock()
	if s.opts.OnManifest != nil {
		parts := make([]sharestate.PartitionKey, len(mf.Parts))
		for i, k := range mf.Parts {
			parts[i] = sharestate.PartitionKey(k)
		}
		s.opts.OnManifest(parts)
	}
}
