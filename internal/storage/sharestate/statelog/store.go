package statelog

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// Options configures a Store.
type Options struct {
	Dir           string             // state directory (<data-dir>/sharegroups); required
	Fsync         logstore.FsyncMode // as the log: always = an acknowledgement waits for its fsync
	FsyncInterval time.Duration      // period of FsyncInterval; default 1s
	Logger        *slog.Logger       // default slog.Default()
	// CompactBytes: the log is compacted once its newest file exceeds
	// max(CompactBytes, 4 × the last snapshot). Default 16 MiB.
	CompactBytes int64
	// RepairShareState (--repair-share-state) accepts lost share state at
	// Open: what is readable is kept, the loss is logged at WARN per
	// share-partition, damaged files go to <Dir>/quarantine/<timestamp>/,
	// and no share-partition is recovered offline. Without it, those whose
	// acknowledged state was lost are recovered Offline.
	RepairShareState bool
	// CheckpointBytes is how much log may follow the manifest's last
	// checkpoint before the next is written. Default 1 MiB.
	CheckpointBytes int64
	// Expected, if set, is what the data directory's manifest recorded:
	// share state existed, with these share-partitions. If Dir then holds
	// neither a state log nor a manifest (sharegroups/ deleted, or its
	// manifest with the log), the loss is reported at ERROR and those
	// share-partitions are recovered Offline (with RepairShareState: logged
	// at WARN and started afresh).
	Expected *Expected
	// OnManifest, if set, is called after each manifest write with the
	// share-partitions it lists (for the data directory's manifest). It
	// runs on the state log's fsync path: it must be quick and rare work
	// only when the list changed.
	OnManifest func(parts []sharestate.PartitionKey)
	// Hooks replace the data system calls (fault injection; tests only).
	Hooks *IOHooks
	// OnStorageError, if set, is called with every failed write or fsync
	// of the state log (for metrics). It must not block.
	OnStorageError func(op string, err error)
}

// Expected is the share state the data directory's manifest recorded.
type Expected struct {
	SharePartitions []sharestate.PartitionKey
}

// Bounds and defaults of Options.
const (
	defaultCompactBytes  = 16 << 20
	defaultFsyncInterval = time.Second
)

func (o *Options) normalize() error {
	if o.FsyncInterval == 0 {
		o.FsyncInterval = defaultFsyncInterval
	}
	if o.CompactBytes <= 0 {
		o.CompactBytes = defaultCompactBytes
	}
	if o.CheckpointBytes <= 0 {
		o.CheckpointBytes = defaultCheckpointBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("state directory not set"))
	}
	if o.Fsync < logstore.FsyncAlways || o.Fsync > logstore.FsyncNever {
		errs = append(errs, fmt.Errorf("fsync mode %d", o.Fsync))
	}
	if o.FsyncInterval < 0 {
		errs = append(errs, fmt.Errorf("fsync interval %v is negative", o.FsyncInterval))
	}
	return errors.Join(errs...)
}

// Store is the file implementation of sharestate.Store: the state log in
// Options.Dir (see doc.go for the format, recovery and compaction).
type Store struct {
	opts Options
	log  *slog.Logger
	l    *stateLog

	state      *sharestate.State // recovered (offline marks applied)
	gen        uint64            // the generation Open started
	damaged    []string          // damaged files, to quarantine after the startup snapshot
	qdir       string            // quarantine directory of this start
	snap       func() error      // Start's: writes the full state
	started    bool
	compactCh  chan struct{}
	snapBytes  atomic.Int64 // size of the last snapshot
	closing    chan struct{}
	closeOnce  sync.Once
	closeErr   error
	bg         sync.WaitGroup // the compactor
	manWrite   sync.Mutex     // serialises manifest writes
	manMu      sync.Mutex     // guards man (leaf)
	man        manState
	lifeMu     sync.Mutex // guards started against Close
	closedFlag bool
}

var _ sharestate.Store = (*Store)(nil)

// Open opens the state log in opts.Dir, creating the directory if needed,
// recovers it and starts the writer: writes are accepted at once, the
// startup snapshot and compaction wait for Start. Damage never fails Open:
// the share-partitions whose acknowledged state was lost are recovered
// Offline (logged at ERROR), or, with RepairShareState, online with what
// was readable (logged at WARN).
func Open(opts Options) (*Store, error) {
	if err := opts.normalize(); err != nil {
		return nil, fmt.Errorf("share state: %w", err)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("share state: %w", err)
	}
	rec, err := recoverDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("share state: %w", err)
	}
	s := &Store{
		opts:      opts,
		log:       opts.Logger,
		compactCh: make(chan struct{}, 1),
		closing:   make(chan struct{}),
		man:       manState{parts: make(map[manPart]struct{})},
	}
	s.gen = rec.lastGen + 1
	s.l = &stateLog{dir: opts.Dir, mode: opts.Fsync, interval: opts.FsyncInterval, log: opts.Logger, hooks: hooksOr(opts.Hooks),
		onBatch: s.maybeCompact, onSynced: s.onSynced, onHealed: s.requestCompact,
		onError: opts.OnStorageError}
	// Until the startup snapshot is complete, recovery still needs what
	// it read this time, with the checkpoints known.
	s.man.base = s.gen
	if rec.baseGen != 0 {
		s.man.base = rec.baseGen
	}
	s.l.sealed = make(map[uint64]int64)
	if rec.man != nil {
		for _, f := range rec.man.Files {
			s.l.sealed[f.Gen] = f.Size
		}
	}
	s.damaged = s.assess(rec)
	s.state = rec.state
	if err := s.l.start(s.gen); err != nil {
		return nil, fmt.Errorf("share state: %w", err)
	}
	return s, nil
}

// Recovered implements sharestate.Store.
func (s *Store) Recovered() *sharestate.State { return s.state }

// Write implements sharestate.Store. The entry is encoded into the shared
// buffer at once (under the log's lock: the caller's order is the log's).
func (s *Store) Write(e sharestate.Entry) (uint64, error) {
	switch e.Kind {
	case sharestate.KindPartFull, sharestate.KindPartOffline:
		s.noteDurable(e.Key())
	case sharestate.KindPartDelete:
		s.noteDeleted(e.Key())
	case sharestate.KindGroupDelete:
		s.noteGroupDeleted(e.Group)
	case sharestate.KindGroup, sharestate.KindPartDelta:
	default:
		return 0, fmt.Errorf("share state: cannot write an entry of %v", e.Kind)
	}
	return s.l.write(func(b []byte) []byte { return appendEntry(b, &e) })
}

// Wait implements sharestate.Store: fsynced under FsyncAlways, written
// otherwise.
func (s *Store) Wait(ticket uint64) error { return s.l.ackWait(ticket) }

// Lost implements sharestate.Store.
func (s *Store) Lost(ticket uint64) bool { return s.l.lost(ticket) }

// Failures implements sharestate.Store.
func (s *Store) Failures() uint64 { return s.l.failures() }

// Start implements sharestate.Store: the startup snapshot makes the new
// file self-contained (what the owner settled since Open and the offline
// share-partitions included); then the old files go: damaged ones to
// quarantine, the others are removed; then the compactor starts.
func (s *Store) Start(snap func() error) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.closedFlag {
		return sharestate.ErrClosed
	}
	if s.started {
		return errors.New("share state: started twice")
	}
	s.snap = snap
	if err := s.snapshot(s.gen); err != nil {
		return fmt.Errorf("writing the startup snapshot: %w", err)
	}
	s.started = true
	keep := s.quarantine(s.damaged)
	s.manMu.Lock()
	s.man.base = s.gen
	s.manMu.Unlock()
	s.removeOldFiles(s.gen, keep)
	s.writeManifest(s.gen, s.l.currentSize())
	s.bg.Add(1)
	go s.compactLoop()
	return nil
}

// Close implements sharestate.Store: it stops the compactor (letting a
// compaction in progress finish), flushes and fsyncs the log, and writes
// the clean-shutdown manifest checkpoint (the whole file).
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.lifeMu.Lock()
		s.closedFlag = true
		started := s.started
		s.lifeMu.Unlock()
		close(s.closing)
		s.bg.Wait()
		s.closeErr = s.l.close()
		if s.closeErr == nil && started {
			s.writeManifest(s.l.finalFile())
		}
	})
	return s.closeErr
}

// --- compaction -------------------------------------------------------------

// maybeCompact is the state log's onBatch: it asks for a compaction when
// the newest file outgrows max(CompactBytes, 4 × the last snapshot).
func (s *Store) maybeCompact(size int64) {
	if size > max(s.opts.CompactBytes, 4*s.snapBytes.Load()) {
		s.requestCompact()
	}
}

// requestCompact asks for a compaction whatever the size: after a state
// log failure, it rewrites every group and share-partition in full.
func (s *Store) requestCompact() {
	select {
	case s.compactCh <- struct{}{}:
	default:
	}
}

func (s *Store) compactLoop() {
	defer s.bg.Done()
	for {
		select {
		case <-s.closing:
			return
		case <-s.compactCh:
			gen, err := s.l.rotate()
			if err == nil {
				err = s.snapshot(gen)
			}
			if err != nil {
				s.log.Error("share state compaction failed", "err", err)
				continue
			}
			s.manMu.Lock()
			s.man.base = gen
			s.manMu.Unlock()
			s.writeManifest(gen, s.l.currentSize())
			s.removeOldFiles(gen, nil)
			s.l.forgetSealed(gen)
			// Requests made while the old file was still growing are moot.
			select {
			case <-s.compactCh:
			default:
			}
		}
	}
}

// snapshot has the owner write the full state of every group and
// share-partition, appends the marker of generation gen (the file entries
// now go to) and syncs it.
func (s *Store) snapshot(gen uint64) error {
	fails := s.l.failures()
	begin := s.l.position()
	if err := s.snap(); err != nil {
		return err
	}
	last, err := s.l.write(func(b []byte) []byte { return appendMarker(b, gen) })
	if err != nil {
		return err
	}
	if err := s.l.syncTo(last); err != nil {
		return err
	}
	// Every entry of the snapshot must have made it, in generation gen.
	if s.l.failures() != fails {
		return errors.New("a share state log write failed during the snapshot")
	}
	if cur := s.l.currentFile(); cur != gen {
		return fmt.Errorf("the snapshot went to generation %d, not %d (rotation failed)", cur, gen)
	}
	s.snapBytes.Store(int64(last - begin))
	return nil
}

// removeOldFiles deletes the generations before gen, whose content the
// snapshot in gen now covers, except those in keep (damaged files that
// could not be moved to quarantine: never deleted).
func (s *Store) removeOldFiles(gen uint64, keep map[string]bool) {
	files, err := listGenerations(s.opts.Dir)
	if err != nil {
		s.log.Warn("listing share state files", "err", err)
		return
	}
	removed := false
	for _, f := range files {
		if f.gen < gen && !keep[f.name] {
			if err := os.Remove(filepath.Join(s.opts.Dir, f.name)); err != nil {
				s.log.Warn("removing an old share state file", "file", f.name, "err", err)
			}
			removed = true
		}
	}
	if removed {
		if err := fsutil.SyncDir(s.opts.Dir); err != nil {
			s.log.Warn("syncing the share state directory", "err", err)
		}
	}
}

// --- damage, offline share-partitions and repair ------------------------------

// quarantineDir is <Dir>/quarantine/<UTC timestamp>, where damaged files
// are moved (never deleted).
func quarantineDir(dir string, now time.Time) string {
	return filepath.Join(dir, "quarantine", now.UTC().Format("20060102T150405.000Z"))
}

// maxReasonLen bounds an offline entry's reason.
const maxReasonLen = 4096

// assess turns the damage recovery found into offline share-partitions in
// rec.state (or, with RepairShareState, into logged accepted losses) and
// returns the damaged files to move to quarantine once the startup
// snapshot is durable. Nothing here refuses to start.
func (s *Store) assess(rec *recovered) []string {
	s.qdir = quarantineDir(s.opts.Dir, time.Now())
	switch {
	case rec.man == nil && errors.Is(rec.manErr, errNoManifest):
		if len(rec.files) > 0 {
			s.log.Warn("share state manifest missing: a truncated or deleted share state file cannot be detected at this start; a new manifest is written",
				"dir", s.opts.Dir)
		}
	case rec.man == nil:
		path := filepath.Join(s.opts.Dir, manifestName)
		moved := s.moveToQuarantine(path)
		s.log.Error("share state manifest damaged: a truncated or deleted share state file cannot be detected at this start; the state log's own checksums are trusted and a new manifest is written",
			"file", path, "err", rec.manErr, "moved_to", moved)
	}

	// sharegroups/ deleted, or its manifest with the state log: nothing
	// here, though the data directory's manifest recorded share state.
	lost := s.opts.Expected != nil && rec.man == nil && errors.Is(rec.manErr, errNoManifest) && len(rec.files) == 0

	// Every share-partition recovery knows of. Share-partitions known only
	// from damage or the manifest are added to rec.state at the end.
	all := map[sharestate.PartitionKey]*sharestate.PartitionState{}
	for gi := range rec.state.Groups {
		g := &rec.state.Groups[gi]
		for pi := range g.Partitions {
			all[g.Partitions[pi].Key(g.ID)] = &g.Partitions[pi]
		}
	}
	var still []string // offline since an earlier start
	for k, p := range all {
		if p.Offline != "" {
			still = append(still, fmt.Sprintf("%s %s/%d", k.Group, k.Topic, k.Partition))
		}
	}
	var added []sharestate.PartitionKey
	ensure := func(k sharestate.PartitionKey) {
		if _, ok := all[k]; !ok {
			all[k] = &sharestate.PartitionState{Topic: k.Topic, TopicID: k.TopicID, Partition: k.Partition}
			added = append(added, k)
		}
	}
	if len(rec.damage) > 0 && rec.man != nil {
		// Share-partitions whose every entry was lost are known from the
		// manifest.
		for _, k := range rec.man.Parts {
			ensure(sharestate.PartitionKey(k))
		}
	}

	if lost {
		names := make([]string, len(s.opts.Expected.SharePartitions))
		groupSet := map[string]bool{}
		for i, k := range s.opts.Expected.SharePartitions {
			ensure(k)
			names[i] = fmt.Sprintf("%s %s/%d", k.Group, k.Topic, k.Partition)
			groupSet[k.Group] = true
		}
		problem := fmt.Sprintf("%s holds no share state log and no %s, but the data directory manifest records share state", s.opts.Dir, manifestName)
		switch {
		case len(names) == 0:
			// No share-partition had durable state: nothing acknowledged is lost.
			s.log.Warn("share state missing; no share-partition had durable state, explicitly set group configurations may be lost",
				"problem", problem, "action", "restore "+s.opts.Dir+" from a backup if group configurations were set")
		case s.opts.RepairShareState:
			s.log.Warn("share state missing; loss accepted (--repair-share-state): every share group starts afresh",
				"problem", problem, "groups", slices.Sorted(maps.Keys(groupSet)), "share_partitions", names)
		default:
			s.log.Error("share state missing: acknowledged share state lost",
				"problem", problem, "groups", slices.Sorted(maps.Keys(groupSet)), "share_partitions", names,
				"action", "stop the server and restore "+s.opts.Dir+" from a backup, or restart once with --repair-share-state to accept the loss (the share-partitions then start again from each group's auto_offset_reset; group configs are lost)")
		}
		reason := fmt.Sprintf("share state lost (%s); restore it from a backup, or restart with --repair-share-state to accept the loss and bring this share-partition online", problem)
		for _, k := range s.opts.Expected.SharePartitions {
			p := all[k]
			if s.opts.RepairShareState {
				s.logRepair(k, p, problem)
				continue
			}
			p.Offline = reason
		}
	}

	var files []string
	seenFile := map[string]bool{}
	for i := range rec.damage {
		d := &rec.damage[i]
		if !seenFile[d.file] {
			seenFile[d.file] = true
			if _, err := os.Stat(d.file); err == nil {
				files = append(files, d.file)
			}
		}
		var hit []sharestate.PartitionKey
		switch {
		case d.key == nil:
			for k := range all {
				hit = append(hit, k)
			}
		case d.key.typ == entGroup || d.key.typ == entGroupDelete:
			for k := range all {
				if k.Group == d.key.Group {
					hit = append(hit, k)
				}
			}
		case d.key.typ == entMarker:
		default:
			ensure(d.key.PartitionKey)
			hit = append(hit, d.key.PartitionKey)
		}
		slices.SortFunc(hit, func(a, b sharestate.PartitionKey) int {
			return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		names := make([]string, len(hit))
		groupSet := map[string]bool{}
		for j, k := range hit {
			names[j] = fmt.Sprintf("%s %s/%d", k.Group, k.Topic, k.Partition)
			groupSet[k.Group] = true
		}
		s.log.Error("share state log damaged: acknowledged share state lost",
			"problem", d.String(), "groups", slices.Sorted(maps.Keys(groupSet)), "share_partitions", names,
			"repairing", s.opts.RepairShareState)
		reason := fmt.Sprintf("share state lost (%s); the damaged file is kept in %s; restart with --repair-share-state to accept the loss and bring this share-partition online",
			d, s.qdir)
		if len(reason) > maxReasonLen {
			reason = reason[:maxReasonLen]
		}
		for _, k := range hit {
			p := all[k]
			if s.opts.RepairShareState {
				s.logRepair(k, p, d.String())
				continue
			}
			if p.Offline == "" {
				p.Offline = reason
			}
		}
	}
	if !s.opts.RepairShareState {
		// Left offline by an earlier start: still loud at every start.
		if len(still) > 0 {
			slices.Sort(still)
			s.log.Error("share-partitions still offline: their acknowledged share state was found lost at an earlier start",
				"share_partitions", still,
				"action", "restart once with --repair-share-state to accept the loss (see docs/operations.md)")
		}
	}
	if s.opts.RepairShareState {
		// Share-partitions left offline by an earlier start come online.
		for k, p := range all {
			if p.Offline != "" {
				s.logRepair(k, p, p.Offline)
				p.Offline = ""
			}
		}
	}
	s.addPartitions(rec.state, all, added)
	return files
}

// addPartitions adds the share-partitions added (known only from damage
// or the manifest) to st, keeping its order.
func (s *Store) addPartitions(st *sharestate.State, all map[sharestate.PartitionKey]*sharestate.PartitionState, added []sharestate.PartitionKey) {
	if len(added) == 0 {
		return
	}
	idx := map[string]int{}
	for i := range st.Groups {
		idx[st.Groups[i].ID] = i
	}
	for _, k := range added {
		i, ok := idx[k.Group]
		if !ok {
			st.Groups = append(st.Groups, sharestate.GroupState{ID: k.Group})
			i = len(st.Groups) - 1
			idx[k.Group] = i
		}
		st.Groups[i].Partitions = append(st.Groups[i].Partitions, *all[k])
	}
	for i := range st.Groups {
		slices.SortFunc(st.Groups[i].Partitions, func(a, b sharestate.PartitionState) int {
			return cmp.Or(strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
		})
	}
	slices.SortFunc(st.Groups, func(a, b sharestate.GroupState) int { return strings.Compare(a.ID, b.ID) })
}

// logRepair logs at WARN what a repair drops for one share-partition.
func (s *Store) logRepair(k sharestate.PartitionKey, p *sharestate.PartitionState, problem string) {
	kept := "nothing: it starts afresh from the group's auto_offset_reset"
	if p.Initialized {
		kept = fmt.Sprintf("the readable state (start offset %d); acknowledgements in the damaged part are lost and those records may be delivered again", p.SPSO)
	}
	s.log.Warn("share state loss accepted (--repair-share-state): share-partition online",
		"group", k.Group, "topic", k.Topic, "partition", k.Partition, "problem", problem, "kept", kept)
}

// quarantine moves the damaged files into the quarantine directory and
// returns the names of those it could not move (to keep in place).
func (s *Store) quarantine(files []string) map[string]bool {
	keep := map[string]bool{}
	for _, f := range files {
		if s.moveToQuarantine(f) == "" {
			keep[filepath.Base(f)] = true
		}
	}
	return keep
}

// moveToQuarantine moves path into the quarantine directory and returns
// its new path, or "" (logged) if it could not.
func (s *Store) moveToQuarantine(path string) string {
	dst := filepath.Join(s.qdir, filepath.Base(path))
	err := os.MkdirAll(s.qdir, 0o755)
	if err == nil {
		err = os.Rename(path, dst)
	}
	if err == nil {
		err = fsutil.SyncDir(s.qdir)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		s.log.Error("moving a damaged share state file to quarantine; it stays in place", "file", path, "err", err)
		return ""
	}
	s.log.Warn("damaged share state file moved to quarantine", "file", path, "moved_to", dst)
	return dst
}
