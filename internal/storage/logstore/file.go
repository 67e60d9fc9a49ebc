package logstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/datadir"
)

// FsyncMode says when appended data is forced to stable storage (--fsync). The zero value is FsyncAlways, the safe default.
type FsyncMode int

const (
	// FsyncAlways: Append returns after its data is fsynced. Concurrent
	// appends to a partition share one write and one fsync (group commit).
	FsyncAlways FsyncMode = iota
	// FsyncInterval: a background fsync every Options.FsyncInterval.
	FsyncInterval
	// FsyncNever: the operating system decides when data reaches the disk.
	FsyncNever
)

// String returns the flag spelling of m.
func (m FsyncMode) String() string {
	switch m {
	case FsyncAlways:
		return "always"
	case FsyncInterval:
		return "interval"
	case FsyncNever:
		return "never"
	}
	return "FsyncMode(" + strconv.Itoa(int(m)) + ")"
}

// ParseFsyncMode parses the --fsync flag: "always", "interval" or "never".
func ParseFsyncMode(s string) (FsyncMode, error) {
	switch s {
	case "always":
		return FsyncAlways, nil
	case "interval":
		return FsyncInterval, nil
	case "never":
		return FsyncNever, nil
	}
	return 0, fmt.Errorf("%w: fsync mode %q, must be always, interval or never", ErrInvalidArgument, s)
}

// Options configures a FileStore. The zero value is usable.
type Options struct {
	Fsync         FsyncMode
	FsyncInterval time.Duration    // FsyncInterval mode period; default 1s
	Logger        *slog.Logger     // default slog.Default()
	Now           func() time.Time // clock for time retention; default time.Now
	// ReclaimInterval is the period of the background task that applies
	// time retention and deletes purged segments; default 200ms. A purge
	// also wakes it at once.
	ReclaimInterval time.Duration
	// ReclaimPause spaces out the deletion of consecutive segments so that a
	// large purge does not delete them all in one burst; default 3ms (a
	// hundred segments in about 0.3 s), shortened so that one pass pauses
	// at most 0.5 s in all. Negative: no pause.
	ReclaimPause time.Duration
	// CompactionInterval is how often the cleaner looks for compacted
	// partitions whose dirty ratio exceeds their min_cleanable_dirty_ratio;
	// default DefaultCompactionInterval. Negative: no background cleaning.
	CompactionInterval time.Duration
	// CompactionMaxBytesPerSec caps the cleaner's disk I/O (bytes read plus
	// written per second, --compaction-max-bytes-per-sec); 0 = unlimited.
	CompactionMaxBytesPerSec int64
	// OnStorageError, if set, is called on every failed write, fsync,
	// create, rename, open or truncate of the store's files, with the
	// operation's name ("write", "fsync", "create", "rename", "open",
	// "mkdir", "truncate") and the error (errors.As finds the errno). It
	// must not block or call back into the store.
	OnStorageError func(op string, err error)
	// Manifest is the data directory's manifest (manifest.go); nil: none
	// (no topic or high watermark is checked against one).
	Manifest *datadir.Manifest
	// AcceptLoss (--repair-accept-loss) accepts at Open what the manifest
	// shows lost instead of taking it offline (manifest.go).
	AcceptLoss bool
	// MaxOpenSegments bounds the segment log files held open at once
	// (--max-open-segments): beyond it the least recently used files not in
	// use are closed and opened again when next needed (fdcache.go). 0: no
	// bound; negative is invalid.
	MaxOpenSegments int
}

// FileStore is the on-disk Store: one directory per topic, one per
// partition, segmented logs with sparse indexes. See doc.go.
//
// Lock order: the catalog's lock (topics), then partition locks (see
// partition). The catalog's lock is never held during I/O.
type FileStore struct {
	dir       string
	topicsDir string
	opts      Options
	log       *slog.Logger
	lockFile  *os.File

	topics *Catalog[*topic] // the topic map, the names being created, closed
	// alterMu serialises AlterTopic and DeleteTopic (held during their
	// I/O; above the catalog's lock).
	alterMu sync.Mutex

	wake chan struct{} // nudges the reclaimer (buffered 1)
	keys keyRebuilder  // rebuilds missing key-index runs (keyindex_file.go)
	stop chan struct{} // closed by Close
	wg   sync.WaitGroup

	fs  storageFS
	fds *fdCache // the open segment files (fdcache.go)

	// The cleaner (compact.go): one pass at a time, cancelled by Close.
	cleanMu      sync.Mutex
	cleanCtx     context.Context
	cleanCancel  context.CancelFunc
	limiter      *rate.Limiter // nil: unthrottled
	compactStats compactionCounters

	// unclean is set by Open when the clean-shutdown marker was missing.
	unclean bool
	// quarantineStamp names this Open's quarantine directory (set on first use).
	quarantineStamp string
	// manifestFailing is set while writing the manifest fails (logged once).
	manifestFailing atomic.Bool
}

// cleanShutdownFile is written by Close after everything is flushed and
// removed by Open: its absence at Open means the last run did not end with
// Close (a crash, a kill, a power loss).
const cleanShutdownFile = "clean-shutdown"

var _ Store = (*FileStore)(nil)

// topic is a topic's immutable description and its partitions. An
// alteration (AlterTopic) installs a new value that shares the partitions
// and conf.
type topic struct {
	info  TopicInfo
	dir   string
	parts []*partition
	conf  *topicConf
}

// Info implements CatalogTopic.
func (t *topic) Info() TopicInfo { return t.info }

// topicConf is a topic's config as its partitions read it, shared by every
// value of the topic (AlterTopic stores a new one).
type topicConf struct {
	cfg atomic.Pointer[TopicConfig]
	// sparse: the topic compacts or has compacted (meta.json's
	// "compacted"), so its sealed segments may have offset gaps.
	sparse atomic.Bool
}

func newTopicConf(cfg TopicConfig, compacted bool) *topicConf {
	c := &topicConf{}
	c.cfg.Store(&cfg)
	c.sparse.Store(compacted || cfg.Compacts())
	return c
}

// config is the partition's topic config now.
func (p *partition) config() TopicConfig { return *p.conf.cfg.Load() }

// topicMeta is meta.json.
type topicMeta struct {
	Version    int        `json:"version"`
	Name       string     `json:"name"`
	ID         string     `json:"id"`
	Partitions int32      `json:"partitions"`
	Config     metaConfig `json:"config"`
	// Compacted: the cleanup policy included compact at some time, so
	// sealed segments may have offset gaps even if it no longer does.
	Compacted bool `json:"compacted,omitempty"`
}

// metaConfig is TopicConfig in meta.json; the fields added later are
// absent in older files and take their defaults (their zero values).
type metaConfig struct {
	SegmentBytes  int64  `json:"segment_bytes"`
	RetentionMs   int64  `json:"retention_ms"`
	CleanupPolicy string `json:"cleanup_policy"`
	// Absent in topics created before compaction existed: the defaults.
	DeleteRetentionMs      int64    `json:"delete_retention_ms,omitempty"`
	MinCleanableDirtyRatio float64  `json:"min_cleanable_dirty_ratio,omitempty"`
	RetentionBytes         int64    `json:"retention_bytes,omitempty"`
	SegmentMs              int64    `json:"segment_ms,omitempty"`
	MaxMessageBytes        int64    `json:"max_message_bytes,omitempty"`
	CompressionType        string   `json:"compression_type,omitempty"`
	MessageTimestampType   string   `json:"message_timestamp_type,omitempty"`
	MinInsyncReplicas      int32    `json:"min_insync_replicas,omitempty"`
	Overrides              []string `json:"overrides,omitempty"`
}

func (c metaConfig) topicConfig() TopicConfig { return TopicConfig(c) }

const (
	metaFile    = "meta.json"
	metaVersion = 1
)

// Open opens (creating if needed) the store in dir and recovers it: torn
// tails of active segments are truncated, missing indexes rebuilt and
// leftovers of interrupted deletions removed. It takes an exclusive lock on
// the directory until Close.
func Open(dir string, opts Options) (*FileStore, error) {
	if opts.Fsync < FsyncAlways || opts.Fsync > FsyncNever {
		return nil, fmt.Errorf("%w: fsync mode %d", ErrInvalidArgument, opts.Fsync)
	}
	if opts.FsyncInterval <= 0 {
		opts.FsyncInterval = time.Second
	}
	if opts.ReclaimInterval <= 0 {
		opts.ReclaimInterval = 200 * time.Millisecond
	}
	if opts.ReclaimPause == 0 {
		opts.ReclaimPause = 3 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CompactionInterval == 0 {
		opts.CompactionInterval = DefaultCompactionInterval
	}
	if opts.CompactionMaxBytesPerSec < 0 {
		return nil, fmt.Errorf("%w: compaction max bytes per second %d must not be negative", ErrInvalidArgument, opts.CompactionMaxBytesPerSec)
	}
	if opts.MaxOpenSegments < 0 {
		return nil, fmt.Errorf("%w: max open segments %d must not be negative", ErrInvalidArgument, opts.MaxOpenSegments)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &FileStore{
		dir:       dir,
		topicsDir: filepath.Join(dir, "topics"),
		opts:      opts,
		log:       opts.Logger,
		topics:    NewCatalog[*topic](),
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		keys:      keyRebuilder{wake: make(chan struct{}, 1)},
		limiter:   newLimiter(opts.CompactionMaxBytesPerSec),
		fds:       newFDCache(opts.MaxOpenSegments),
	}
	s.cleanCtx, s.cleanCancel = context.WithCancel(context.Background())
	if err := os.MkdirAll(s.topicsDir, 0o755); err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	lf, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("logstore: %w", err)
	}
	s.lockFile = lf
	s.fs.onError = opts.OnStorageError
	if err := s.takeCleanMarker(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("logstore: %w", err)
	}
	if err := s.load(); err != nil {
		for _, t := range s.topics.All() {
			t.shutdown(ErrClosed, false)
		}
		lf.Close()
		return nil, fmt.Errorf("logstore: open %s: %w", dir, err)
	}
	// What recovery found (an upgrade's first manifest, the topics and high
	// watermarks recovered); a failure is logged and retried by the
	// reclaimer.
	_ = s.saveManifest()
	s.wg.Add(2)
	go s.reclaimLoop()
	go s.keyLoop()
	if opts.Fsync == FsyncInterval {
		s.wg.Add(1)
		go s.syncLoop()
	}
	if opts.CompactionInterval > 0 {
		s.wg.Add(1)
		go s.cleanLoop()
	}
	return s, nil
}

func (s *FileStore) durable() bool { return s.opts.Fsync != FsyncNever }

// takeCleanMarker notes whether the last run shut down cleanly and removes
// the marker, durably, before anything can be written: a crash from now on
// must be seen as unclean by the next Open.
func (s *FileStore) takeCleanMarker() error {
	path := filepath.Join(s.dir, cleanShutdownFile)
	err := os.Remove(path)
	switch {
	case err == nil:
		return fsutil.SyncDir(s.dir)
	case errors.Is(err, fs.ErrNotExist):
		s.unclean = true
		return nil
	default:
		return err
	}
}

// Offline lists the partitions that cannot serve: those whose files failed
// validation at Open (Err wraps ErrOffline) and those whose last write
// failed and has not succeeded since (Err wraps ErrStorage). For readiness
// checks and metrics; sorted by topic and partition.
func (s *FileStore) Offline() []OfflinePartition {
	var out []OfflinePartition
	for _, t := range s.liveTopics() {
		for _, p := range t.parts {
			if err := p.offlineErr; err != nil {
				out = append(out, OfflinePartition{Topic: t.info.Name, Partition: p.id, Err: err})
			} else if e := p.failed.Load(); e != nil {
				out = append(out, OfflinePartition{Topic: t.info.Name, Partition: p.id, Err: *e})
			}
		}
	}
	slices.SortFunc(out, func(a, b OfflinePartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// partition returns a live partition or ErrClosed / ErrUnknownTopic.
func (s *FileStore) partition(name string, part int32) (*partition, error) {
	t, err := s.topics.LookupPartition(name, part)
	if err != nil {
		return nil, err
	}
	return t.parts[part], nil
}

func newPartition(s *FileStore, t *topic, id int32) *partition {
	p := &partition{
		st:      s,
		topic:   t.info.Name,
		id:      id,
		dir:     filepath.Join(t.dir, strconv.Itoa(int(id))),
		topicID: t.info.ID,
		conf:    t.conf,
	}
	p.purgedTombs.Store(-1)
	p.dirtyRatio.Store(math.Float64bits(-1)) // not measured yet
	p.cleaner.tombsDue = math.MaxInt64
	p.wcond.L = &p.wmu
	return p
}

// CreateTopic implements Store. The directory and meta.json are made
// durable before it returns (unless fsync is never).
func (s *FileStore) CreateTopic(ctx context.Context, name string, partitions int32, cfg TopicConfig) (TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return TopicInfo{}, err
	}
	info, err := s.topics.Reserve(name, partitions, cfg)
	if err != nil {
		return TopicInfo{}, err
	}
	// The I/O runs without the catalog's lock; the name stays reserved
	// meanwhile.
	t, err := s.createTopicFiles(info)
	if err != nil {
		s.topics.Release(name)
		return TopicInfo{}, err
	}
	if err := s.topics.Install(t); err != nil {
		t.shutdown(ErrClosed, false)
		return TopicInfo{}, err
	}
	// After its directory is durable: the manifest never records a topic
	// that is not on disk. The reclaimer writes it within about a second
	// (a synchronous write would cost every creation a rewrite of the
	// whole manifest); until then the topic is not protected against the
	// loss of its directory, and the next Open adds it all the same.
	if m := s.manifest(); m != nil {
		m.PutTopic(datadir.Topic{ID: info.ID, Name: info.Name, Partitions: info.Partitions})
	}
	return info, nil
}

func (s *FileStore) createTopicFiles(info TopicInfo) (*topic, error) {
	t := &topic{info: info, dir: filepath.Join(s.topicsDir, info.ID), conf: newTopicConf(info.Config, false)}
	// The topic is built under <id>.tmp and renamed into place once
	// complete, so a topic directory is never legitimately without its
	// meta.json or partitions: Open quarantines such a directory, and
	// removes <id>.tmp leftovers (never acknowledged, holding no records).
	building := t.dir + tmpSuffix
	err := func() error {
		if err := s.fs.mkdir(building); err != nil {
			return err
		}
		for i := range info.Partitions {
			if err := s.fs.mkdir(filepath.Join(building, strconv.Itoa(int(i)))); err != nil {
				return err
			}
		}
		meta, err := encodeMeta(t)
		if err != nil {
			return err
		}
		// One fsync of the directory (inside writeFileAtomic) covers the
		// partition directories too.
		if err := s.fs.writeFileAtomic(filepath.Join(building, metaFile), meta, dirSync(s.durable())); err != nil {
			return err
		}
		if err := s.fs.rename(building, t.dir); err != nil {
			return err
		}
		if s.durable() {
			return s.fs.syncDir(s.topicsDir)
		}
		return nil
	}()
	if err != nil {
		// Nothing was acknowledged: the half-built topic is ours to remove.
		// If even that fails, Open removes the <id>.tmp leftover.
		if rerr := os.RemoveAll(building); rerr != nil {
			s.log.Warn("logstore: removing a half-created topic", "dir", building, "err", rerr)
		}
		if _, serr := os.Stat(t.dir); serr == nil {
			// The rename happened but its directory fsync failed: the
			// topic may or may not survive a power loss, and it is not
			// registered. Keep the data for Open to judge.
			s.log.Warn("logstore: topic creation failed after its rename; Open will load it", "dir", t.dir, "err", err)
		}
		return nil, fmt.Errorf("create topic %q: %w", info.Name, err)
	}
	t.parts = make([]*partition, info.Partitions)
	for i := range t.parts {
		p := newPartition(s, t, int32(i))
		p.segs = []*segment{p.newSegment(0)} // its file is created by the first append
		t.parts[i] = p
	}
	return t, nil
}

// encodeMeta is t's meta.json.
func encodeMeta(t *topic) ([]byte, error) {
	return json.MarshalIndent(topicMeta{
		Version: metaVersion, Name: t.info.Name, ID: t.info.ID, Partitions: t.info.Partitions,
		Config: metaConfig(t.info.Config), Compacted: t.conf.sparse.Load() || t.info.Config.Compacts(),
	}, "", "  ")
}

// AlterTopic implements Store. The new partitions' directories are made
// first (their parent fsynced), then meta.json is replaced: a crash in
// between leaves empty partition directories beyond the count meta.json
// records, which Open removes (nothing in them was ever acknowledged).
// The partitions read the new config at once: segment_bytes and
// segment_ms from the next append, retention and compaction from the next
// pass of the reclaimer and the cleaner.
func (s *FileStore) AlterTopic(ctx context.Context, name string, fn func(cur TopicInfo) (TopicInfo, error)) (TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return TopicInfo{}, err
	}
	s.alterMu.Lock()
	defer s.alterMu.Unlock()
	cur, err := s.topics.Lookup(name)
	if err != nil {
		return TopicInfo{}, err
	}
	next, err := fn(cur.info)
	if err != nil {
		return TopicInfo{}, err
	}
	if next, err = ValidateAlter(cur.info, next); err != nil {
		return TopicInfo{}, err
	}
	nt := &topic{info: next, dir: cur.dir, parts: slices.Clone(cur.parts), conf: cur.conf}
	compacted := cur.conf.sparse.Load() || next.Config.Compacts()
	for i := cur.info.Partitions; i < next.Partitions; i++ {
		if err := s.mkPartitionDir(filepath.Join(cur.dir, strconv.Itoa(int(i)))); err != nil {
			return TopicInfo{}, fmt.Errorf("add partitions to topic %q: %w", name, err)
		}
	}
	if next.Partitions > cur.info.Partitions && s.durable() {
		if err := s.fs.syncDir(cur.dir); err != nil {
			return TopicInfo{}, fmt.Errorf("add partitions to topic %q: %w", name, err)
		}
	}
	meta, err := encodeMeta(nt) // compacted if cur was or nt is
	if err != nil {
		return TopicInfo{}, err
	}
	if err := s.fs.writeFileAtomic(filepath.Join(cur.dir, metaFile), meta, dirSync(s.durable())); err != nil {
		// The old meta.json stands (replaced atomically or not at all);
		// the new partition directories are empty leftovers.
		return TopicInfo{}, fmt.Errorf("alter topic %q: %w", name, err)
	}
	for i := cur.info.Partitions; i < next.Partitions; i++ {
		p := newPartition(s, nt, i)
		p.segs = []*segment{p.newSegment(0)} // its file is created by the first append
		nt.parts = append(nt.parts, p)
	}
	if err := s.topics.Replace(name, cur, nt); err != nil {
		nt.shutdownFrom(cur.info.Partitions, err)
		return TopicInfo{}, err
	}
	if compacted {
		cur.conf.sparse.Store(true)
	}
	cfg := next.Config
	cur.conf.cfg.Store(&cfg)
	if m := s.manifest(); m != nil {
		m.GrowTopic(next.ID, next.Partitions) // written by the reclaimer, as for a new topic
	}
	for _, p := range cur.parts {
		p.watch.notify()
	}
	s.wakeReclaimer() // retention may have changed
	return next, nil
}

// mkPartitionDir makes a new partition's directory; one left empty by an
// interrupted AlterTopic is taken as it is.
func (s *FileStore) mkPartitionDir(dir string) error {
	err := s.fs.mkdir(dir)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		return err
	}
	entries, rerr := os.ReadDir(dir)
	if rerr != nil {
		return rerr
	}
	if len(entries) > 0 {
		return fmt.Errorf("partition directory %s exists and is not empty", dir)
	}
	return nil
}

// shutdownFrom shuts the partitions from index from on down (the new ones
// of an alteration that could not be installed).
func (t *topic) shutdownFrom(from int32, err error) {
	for _, p := range t.parts[from:] {
		_ = p.shutdown(err, false)
	}
}

// DeleteTopic implements Store: in-flight appends finish, then the directory
// is renamed to <id>.deleted (durably, so a crash cannot bring the topic
// back) and removed; watchers are woken.
func (s *FileStore) DeleteTopic(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.alterMu.Lock()
	defer s.alterMu.Unlock()
	// The manifest forgets the topic before its directory goes, so that a
	// crash in between cannot make the next Open report it missing.
	if m := s.manifest(); m != nil {
		t, err := s.topics.Lookup(name)
		if err != nil {
			return err
		}
		if rec, ok := m.Topic(t.info.ID); ok {
			m.RemoveTopic(rec.ID)
			if err := s.saveManifest(); err != nil {
				m.PutTopic(rec)
				return fmt.Errorf("delete topic %q: %w: %w", name, ErrStorage, err)
			}
		}
	}
	t, err := s.topics.Remove(name)
	if err != nil {
		return err
	}
	t.shutdown(TopicDeletedError(name), false)
	gone := t.dir + deletedSuffix
	if err := s.fs.rename(t.dir, gone); errors.Is(err, fs.ErrNotExist) {
		return nil // a topic whose directory was missing at Open (manifest.go)
	} else if err != nil {
		return fmt.Errorf("delete topic %q: %w", name, err)
	}
	if s.durable() {
		if err := s.fs.syncDir(s.topicsDir); err != nil {
			return fmt.Errorf("delete topic %q: %w", name, err)
		}
	}
	if err := os.RemoveAll(gone); err != nil {
		// Open removes it; the topic is gone either way.
		s.log.Warn("logstore: removing deleted topic", "topic", name, "dir", gone, "err", err)
	}
	return nil
}

func (t *topic) shutdown(err error, flush bool) error {
	var errs []error
	for _, p := range t.parts {
		if p != nil {
			errs = append(errs, p.shutdown(err, flush))
		}
	}
	return errors.Join(errs...)
}

// Topics implements Store.
func (s *FileStore) Topics(ctx context.Context) ([]TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.topics.Infos()
}

// TopicInfo implements Store.
func (s *FileStore) TopicInfo(ctx context.Context, name string) (TopicInfo, error) {
	t, err := s.lookupTopic(ctx, name)
	if err != nil {
		return TopicInfo{}, err
	}
	return t.info, nil
}

// Topic implements Store.
func (s *FileStore) Topic(ctx context.Context, name string) (TopicInfo, []PartitionInfo, error) {
	t, err := s.lookupTopic(ctx, name)
	if err != nil {
		return TopicInfo{}, nil, err
	}
	parts := make([]PartitionInfo, len(t.parts))
	for i, p := range t.parts {
		parts[i] = p.info()
	}
	return t.info, parts, nil
}

// Append implements Store.
func (s *FileStore) Append(ctx context.Context, topic string, partition int32, recs []Record) (int64, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, err
	}
	return p.append(ctx, recs)
}

// Read implements Store. maxRecords and maxBytes must be positive; maxBytes
// counts Record.Size, and the first record is returned even if larger.
// Records returned are the caller's (no buffer is shared with the store).
func (s *FileStore) Read(ctx context.Context, topic string, partition int32, offset int64, maxRecords, maxBytes int) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return nil, err
	}
	return p.read(offset, maxRecords, maxBytes)
}

// Bounds implements Store.
func (s *FileStore) Bounds(topic string, partition int32) (int64, int64, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	if err := p.closedErr(); err != nil {
		return 0, 0, err
	}
	return p.logStart.Load(), p.hw.Load(), nil
}

// OffsetForTimestamp implements Store.
func (s *FileStore) OffsetForTimestamp(ctx context.Context, topic string, partition int32, ts int64) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	return p.offsetForTimestamp(ts)
}

// Watch implements Store.
func (s *FileStore) Watch(topic string, partition int32) (<-chan struct{}, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return nil, err
	}
	return p.watch.wait()
}

// DeleteRecordsBefore implements Store. It persists the new log start offset
// (unless fsync is never) and returns; segments are deleted in the
// background, so its cost does not depend on how much is purged. A negative
// offset is a no-op like any offset at or below the log start (the service
// maps -1 to the high watermark before calling).
func (s *FileStore) DeleteRecordsBefore(ctx context.Context, topic string, partition int32, offset int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, err
	}
	return p.moveLogStart(offset)
}

// Close implements Store: it waits for in-flight appends, fsyncs every
// active segment (in every fsync mode), stops the background tasks and
// releases the directory lock. Later calls return ErrClosed; a second Close
// returns nil.
func (s *FileStore) Close() error { return s.close(true) }

// close stops the store. Only a clean close (every partition flushed and
// checkpointed) writes the clean-shutdown marker; tests simulate a crash
// with clean false.
func (s *FileStore) close(clean bool) error {
	topics, first := s.topics.Close()
	if !first {
		return nil
	}

	close(s.stop)
	s.cleanCancel()
	s.wg.Wait()
	var errs []error
	for _, t := range topics {
		errs = append(errs, t.shutdown(ErrClosed, clean))
	}
	if clean && errors.Join(errs...) == nil {
		// Every partition is flushed: the manifest records the final high
		// watermarks.
		for _, t := range topics {
			for _, p := range t.parts {
				if p.offlineErr == nil && p.failed.Load() == nil {
					p.noteHW(p.hw.Load())
				}
			}
		}
		errs = append(errs, s.saveManifest())
	}
	if err := errors.Join(errs...); err == nil && clean {
		// Every partition is flushed and checkpointed: the next Open may
		// trust the checkpoints without rescanning.
		if err := s.fs.writeFileAtomic(filepath.Join(s.dir, cleanShutdownFile), nil, fsutil.SyncFileAndDir); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.lockFile.Close())
	return errors.Join(errs...)
}

// liveTopics returns the current topics (for background tasks).
func (s *FileStore) liveTopics() []*topic { return s.topics.All() }

// lookupTopic finds a live topic by name.
func (s *FileStore) lookupTopic(ctx context.Context, name string) (*topic, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.topics.Lookup(name)
}
