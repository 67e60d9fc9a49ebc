package sharegroup

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

type manifest struct {
	Version int       `json:"version"`
	Base    uint64    `json:"base"`  // oldest generation recovery reads
	Files   []manFile `json:"files"` // generations >= Base, ascending
	Parts   []manPart `json:"share_partitions"`
}

type manFile struct {
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
func (mf *manifest) encode() []byte {
	b, _ := json.MarshalIndent(mf, "", " ")
	b = append(b, '\n')
	return fmt.Appendf(b, "%s%08x\n", manifestCRCPrefix, crc32.Checksum(b, castagnoli))
}

var errNoManifest = errors.New("no manifest")

// readManifest reads the manifest; errNoManifest if there is none, another
// error if it is damaged.
func readManifest(dir string) (*manifest, error) {
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
	var mf manifest
	if err := json.Unmarshal(body, &mf); err != nil {
		return nil, err
	}
	if mf.Version != 1 {
		return nil, fmt.Errorf("unknown version %d", mf.Version)
	}
	return &mf, nil
}

// size returns the checkpoint of generation gen (0 if not listed).
func (mf *manifest) size(gen uint64) int64 {
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

func partOf(group string, sp *sharePartition) manPart {
	return manPart{Group: group, Topic: sp.topic, TopicID: sp.topicID, Partition: sp.part}
}

// noteDurable records that sp has (or is getting) durable state.
func (m *Manager) noteDurable(sp *sharePartition) {
	k := partOf(sp.g.id, sp)
	m.manMu.Lock()
	if _, ok := m.man.parts[k]; !ok {
		m.man.parts[k] = struct{}{}
		m.man.dirty = true
	}
	m.manMu.Unlock()
}

// noteDeleted records that sp's durable state is being deleted.
func (m *Manager) noteDeleted(group string, sp *sharePartition) {
	k := partOf(group, sp)
	m.manMu.Lock()
	if _, ok := m.man.parts[k]; ok {
		delete(m.man.parts, k)
		m.man.dirty = true
	}
	m.manMu.Unlock()
}

// onSynced is the state log's fsync callback: it writes the manifest when
// share-partitions changed, the file changed, or CheckpointBytes of log
// followed the last checkpoint. It runs before the fsynced entries are
// reported durable, so an initialisation is in the manifest before its
// share-partition is used.
func (m *Manager) onSynced(gen uint64, size int64) {
	m.manMu.Lock()
	due := m.man.dirty || gen != m.man.gen || size-m.man.size >= m.opts.checkpointBytes
	m.manMu.Unlock()
	if due {
		m.writeManifest(gen, size)
	}
}

// writeManifest writes the manifest with gen at size as the newest file.
// A failure is logged: the previous manifest stays, a conservative (older)
// checkpoint.
func (m *Manager) writeManifest(gen uint64, size int64) {
	m.manWrite.Lock()
	defer m.manWrite.Unlock()
	m.manMu.Lock()
	if gen < m.man.gen || gen == m.man.gen && size < m.man.size && !m.man.dirty {
		m.manMu.Unlock()
		return // a newer checkpoint is already written
	}
	mf := manifest{Version: 1, Base: m.man.base}
	for k := range m.man.parts {
		mf.Parts = append(mf.Parts, k)
	}
	m.man.dirty = false
	base := m.man.base
	m.manMu.Unlock()
	slices.SortFunc(mf.Parts, func(a, b manPart) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
	})
	for g, s := range m.slog.sealedSizes() {
		if g >= base && g < gen {
			mf.Files = append(mf.Files, manFile{Gen: g, Size: s})
		}
	}
	mf.Files = append(mf.Files, manFile{Gen: gen, Size: size})
	slices.SortFunc(mf.Files, func(a, b manFile) int { return cmp.Compare(a.Gen, b.Gen) })
	if err := fsutil.WriteFileAtomic(filepath.Join(m.opts.Dir, manifestName), mf.encode(), fsutil.SyncFileAndDir); err != nil {
		m.log.Warn("writing the share state manifest; the previous checkpoint stays", "err", err)
		m.manMu.Lock()
		m.man.dirty = true
		m.manMu.Unlock()
		return
	}
	m.manMu.Lock()
	m.man.gen, m.man.size = gen, size
	m.manMu.Unlock()
}
