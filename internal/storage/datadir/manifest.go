package datadir

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// FileName is the manifest's name at the root of the data directory.
const FileName = "manifest.json"

const version = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Topic is a topic as the manifest records it.
type Topic struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Partitions int32  `json:"partitions"`
	// HighWatermarks[i] is partition i's last known high watermark: every
	// offset below it was durable when it was recorded.
	HighWatermarks []int64 `json:"high_watermarks"`
}

// SharePartition is a share-partition with durable share state.
type SharePartition struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
}

// ShareState is the share state the manifest records.
type ShareState struct {
	SharePartitions []SharePartition `json:"share_partitions"`
}

// content is the file.
type content struct {
	Version    int         `json:"version"`
	Created    string      `json:"created"`
	Topics     []Topic     `json:"topics"`
	ShareState *ShareState `json:"share_state,omitempty"`
	CRC        string      `json:"crc32c"`
}

// Status is what Open found.
type Status int

const (
	// Found: a valid manifest; the stores check the directory against it.
	Found Status = iota
	// Missing: none (a new data directory, or one from an older version).
	Missing
	// Damaged: unreadable, moved to quarantine.
	Damaged
)

// Manifest is the data directory's manifest, in memory; Save writes it.
type Manifest struct {
	path   string
	dir    string
	log    *slog.Logger
	status Status

	saveMu sync.Mutex // serialises Save (taken before mu)

	mu     sync.Mutex // guards the fields below (leaf)
	c      content
	topics map[string]*Topic // by ID, pointing into nothing else
	dirty  bool
}

// Open reads the manifest of the data directory dir. A missing manifest
// is logged at INFO and a damaged one is moved to
// <dir>/quarantine/<timestamp>/manifest.json with an ERROR; in both cases
// the manifest starts empty, Status says which, and the first Save writes
// what the stores found.
func Open(dir string, log *slog.Logger) (*Manifest, error) {
	if log == nil {
		log = slog.Default()
	}
	m := &Manifest{path: filepath.Join(dir, FileName), dir: dir, log: log, topics: map[string]*Topic{}}
	b, err := os.ReadFile(m.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		m.status = Missing
		m.c = content{Version: version, Created: time.Now().UTC().Format(time.RFC3339)}
		m.dirty = true
		log.Info("data directory manifest missing (a new data directory, or one from an older version); writing one: from now on a deleted topics/ or sharegroups/ directory, or lost last segments, are detected at start",
			"file", m.path)
		return m, nil
	case err != nil:
		return nil, fmt.Errorf("data directory manifest: %w", err)
	}
	c, perr := parse(b)
	if perr != nil {
		m.status = Damaged
		m.c = content{Version: version, Created: time.Now().UTC().Format(time.RFC3339)}
		m.dirty = true
		moved, qerr := m.quarantine()
		log.Error("data directory manifest damaged: lost topics, share state or last segments cannot be detected at this start; a new manifest is written from what is found",
			"file", m.path, "err", perr, "moved_to", moved, "quarantine_err", qerr,
			"action", "check that topics/ and sharegroups/ are complete (see docs/operations.md)")
		return m, nil
	}
	m.status = Found
	m.c = c
	for i := range c.Topics {
		t := c.Topics[i]
		m.topics[t.ID] = &t
	}
	m.c.Topics = nil
	return m, nil
}

func parse(b []byte) (content, error) {
	var c content
	if err := json.Unmarshal(b, &c); err != nil {
		return c, err
	}
	if c.Version != version {
		return c, fmt.Errorf("unknown version %d", c.Version)
	}
	want := c.CRC
	c.CRC = ""
	body, err := json.Marshal(c)
	if err != nil {
		return c, err
	}
	if sum := fmt.Sprintf("%08x", crc32.Checksum(body, castagnoli)); sum != want {
		return c, fmt.Errorf("checksum mismatch (recorded %q, computed %s)", want, sum)
	}
	for _, t := range c.Topics {
		if t.ID == "" || t.Partitions < 0 || int(t.Partitions) != len(t.HighWatermarks) {
			return c, fmt.Errorf("topic %q (id %q): %d partitions but %d high watermarks", t.Name, t.ID, t.Partitions, len(t.HighWatermarks))
		}
		for _, hw := range t.HighWatermarks {
			if hw < 0 {
				return c, fmt.Errorf("topic %q: negative high watermark %d", t.Name, hw)
			}
		}
	}
	return c, nil
}

func (m *Manifest) quarantine() (string, error) {
	dst := filepath.Join(m.dir, "quarantine", time.Now().UTC().Format("20060102T150405.000000000Z"), FileName)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(m.path, dst); err != nil {
		return "", err
	}
	return dst, fsutil.SyncDir(m.dir)
}

// Status says what Open found. The stores check the directory against the
// manifest only when it is Found.
func (m *Manifest) Status() Status { return m.status }

// Path is the manifest's file.
func (m *Manifest) Path() string { return m.path }

// Topics returns the recorded topics, sorted by name.
func (m *Manifest) Topics() []Topic {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Topic, 0, len(m.topics))
	for _, t := range m.topics {
		c := *t
		c.HighWatermarks = slices.Clone(t.HighWatermarks)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Topic) int { return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID)) })
	return out
}

// Topic returns the recorded topic with the given id.
func (m *Manifest) Topic(id string) (Topic, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.topics[id]
	if !ok {
		return Topic{}, false
	}
	c := *t
	c.HighWatermarks = slices.Clone(t.HighWatermarks)
	return c, true
}

// HighWatermark returns partition part of topic id's recorded high
// watermark (0 if none is recorded).
func (m *Manifest) HighWatermark(id string, part int32) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.topics[id]; ok && part >= 0 && int(part) < len(t.HighWatermarks) {
		return t.HighWatermarks[part]
	}
	return 0
}

// PutTopic records t unless a topic with its id is recorded already. Nil
// HighWatermarks are all 0.
func (m *Manifest) PutTopic(t Topic) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.topics[t.ID]; ok {
		return
	}
	if len(t.HighWatermarks) != int(t.Partitions) {
		t.HighWatermarks = make([]int64, t.Partitions)
	} else {
		t.HighWatermarks = slices.Clone(t.HighWatermarks)
	}
	m.topics[t.ID] = &t
	m.changedLocked()
}

// GrowTopic records that the topic with id id now has partitions
// partitions (CreatePartitions): the new ones' high watermarks are 0. A
// smaller count, or an id not recorded, changes nothing.
func (m *Manifest) GrowTopic(id string, partitions int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.topics[id]
	if !ok || partitions <= t.Partitions {
		return
	}
	t.Partitions = partitions
	for len(t.HighWatermarks) < int(partitions) {
		t.HighWatermarks = append(t.HighWatermarks, 0)
	}
	m.changedLocked()
}

// RemoveTopic forgets a topic.
func (m *Manifest) RemoveTopic(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.topics[id]; ok {
		delete(m.topics, id)
		m.changedLocked()
	}
}

// RaiseHighWatermark records hw for a partition if it is above the
// recorded value (the recorded value never moves back). It reports
// whether it changed anything.
func (m *Manifest) RaiseHighWatermark(id string, part int32, hw int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.topics[id]
	if !ok || part < 0 || int(part) >= len(t.HighWatermarks) || hw <= t.HighWatermarks[part] {
		return false
	}
	t.HighWatermarks[part] = hw
	m.changedLocked()
	return true
}

// SetHighWatermark records hw for a partition even below the recorded
// value: only for a loss accepted explicitly (--repair-accept-loss).
func (m *Manifest) SetHighWatermark(id string, part int32, hw int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.topics[id]; ok && part >= 0 && int(part) < len(t.HighWatermarks) && t.HighWatermarks[part] != hw {
		t.HighWatermarks[part] = hw
		m.changedLocked()
	}
}

// ShareState returns the recorded share state (nil if none was ever
// recorded).
func (m *Manifest) ShareState() *ShareState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c.ShareState == nil {
		return nil
	}
	return &ShareState{SharePartitions: slices.Clone(m.c.ShareState.SharePartitions)}
}

// SetShareState records that share state exists, with these
// share-partitions. It reports whether that changed anything.
func (m *Manifest) SetShareState(parts []SharePartition) bool {
	parts = slices.Clone(parts)
	slices.SortFunc(parts, func(a, b SharePartition) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c.ShareState != nil && slices.Equal(m.c.ShareState.SharePartitions, parts) {
		return false
	}
	if parts == nil {
		parts = []SharePartition{}
	}
	m.c.ShareState = &ShareState{SharePartitions: parts}
	m.changedLocked()
	return true
}

func (m *Manifest) changedLocked() { m.dirty = true }

// Dirty reports whether something changed since the last Save.
func (m *Manifest) Dirty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dirty
}

// Save writes the manifest if anything changed since the last Save,
// atomically and durably. Concurrent Saves are serialised; one that finds
// its changes written by another returns at once.
func (m *Manifest) Save() error {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.mu.Lock()
	if !m.dirty {
		m.mu.Unlock()
		return nil
	}
	c := m.c
	for _, t := range m.topics {
		ct := *t
		ct.HighWatermarks = slices.Clone(t.HighWatermarks)
		c.Topics = append(c.Topics, ct)
	}
	if c.ShareState != nil {
		c.ShareState = &ShareState{SharePartitions: slices.Clone(c.ShareState.SharePartitions)}
	}
	m.dirty = false
	m.mu.Unlock()

	if c.Topics == nil {
		c.Topics = []Topic{}
	}
	slices.SortFunc(c.Topics, func(a, b Topic) int { return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID)) })
	c.CRC = ""
	body, err := json.Marshal(c)
	if err == nil {
		c.CRC = fmt.Sprintf("%08x", crc32.Checksum(body, castagnoli))
		body, err = json.MarshalIndent(c, "", " ")
	}
	if err == nil {
		err = fsutil.WriteFileAtomic(m.path, append(body, '\n'), fsutil.SyncFileAndDir)
	}
	if err != nil {
		m.mu.Lock()
		m.dirty = true // retried by the next Save
		m.mu.Unlock()
		return fmt.Errorf("writing the data directory manifest %s: %w", m.path, err)
	}
	return nil
}
