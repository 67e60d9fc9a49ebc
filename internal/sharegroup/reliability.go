package sharegroup

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// OfflineSharePartition is a share-partition that cannot serve: its durable
// state was found lost at Open (until --repair-share-state), or its last
// state write failed (until its state is rewritten, which the next request
// on it tries). Requests on it answer KAFKA_STORAGE_ERROR.
type OfflineSharePartition struct {
	Group     string
	Topic     string
	Partition int32
	Err       string
}

// Offline lists the offline share-partitions, sorted by group, topic and
// partition (for readiness reporting).
func (m *Manager) Offline() []OfflineSharePartition {
	var out []OfflineSharePartition
	for _, g := range m.groupList() {
		for _, sp := range g.partitions() {
			sp.mu.Lock()
			reason := sp.offline
			live := sp.status == spLive
			sp.mu.Unlock()
			if reason == "" && live && sp.lost() {
				reason = "the last share state write failed; rewritten on the next request"
			}
			if reason != "" {
				out = append(out, OfflineSharePartition{Group: g.id, Topic: sp.topic, Partition: sp.part, Err: reason})
			}
		}
	}
	slices.SortFunc(out, func(a, b OfflineSharePartition) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// Stats are counters for metrics.
type Stats struct {
	// UnreadableArchived counts offsets archived because the log could not
	// read them (corrupt records), over all groups since Open.
	UnreadableArchived uint64
	// StateWriteFailures counts failed state-log writes or fsyncs.
	StateWriteFailures uint64
	// OfflineSharePartitions is len(Offline()).
	OfflineSharePartitions int
}

// Stats returns the manager's counters.
func (m *Manager) Stats() Stats {
	return Stats{
		UnreadableArchived:     m.unreadable.Load(),
		StateWriteFailures:     m.slog.failures(),
		OfflineSharePartitions: len(m.Offline()),
	}
}

// corruptRange returns the unreadable offsets a log-store read error
// names: the log store's corruption error has a method
// CorruptRange() (first, last int64) giving the first and last unreadable
// offset. ok is false if err carries no such range.
func corruptRange(err error) (from, to int64, ok bool) {
	var cr interface{ CorruptRange() (int64, int64) }
	if !errors.As(err, &cr) {
		return 0, 0, false
	}
	from, to = cr.CorruptRange()
	if from < 0 || to < from {
		return 0, 0, false
	}
	return from, to, true
}

// unreadableMsg describes archived unreadable offsets.
func unreadableMsg(first, last int64) string {
	if first == last {
		return fmt.Sprintf("offset %d", first)
	}
	return fmt.Sprintf("offsets %d-%d", first, last)
}

// quarantineDir is <Dir>/quarantine/<UTC timestamp>, where damaged files
// are moved (never deleted).
func quarantineDir(dir string, now time.Time) string {
	return filepath.Join(dir, "quarantine", now.UTC().Format("20060102T150405.000Z"))
}

// assess turns the damage recovery found into offline share-partitions
// (or, with RepairShareState, into logged accepted losses) and returns the
// damaged files to move to quarantine once the startup snapshot is
// durable. Nothing here refuses to start.
func (m *Manager) assess(rec *recovered) []string {
	m.qdir = quarantineDir(m.opts.Dir, time.Now())
	switch {
	case rec.man == nil && errors.Is(rec.manErr, errNoManifest):
		if len(rec.files) > 0 {
			m.log.Warn("share state manifest missing: a truncated or deleted share state file cannot be detected at this start; a new manifest is written",
				"dir", m.opts.Dir)
		}
	case rec.man == nil:
		path := filepath.Join(m.opts.Dir, manifestName)
		moved := m.moveToQuarantine(path)
		m.log.Error("share state manifest damaged: a truncated or deleted share state file cannot be detected at this start; the state log's own checksums are trusted and a new manifest is written",
			"file", path, "err", rec.manErr, "moved_to", moved)
	}

	// Every share-partition recovery knows of, and its group's record.
	type located struct {
		g  *recGroup
		sp *sharePartition
	}
	all := map[manPart]located{}
	groups := map[string]*recGroup{}
	for _, g := range rec.groups {
		groups[g.id] = g
		for _, sp := range g.parts {
			all[partOf(g.id, sp)] = located{g, sp}
		}
	}
	ensure := func(k manPart) located {
		if l, ok := all[k]; ok {
			return l
		}
		g := groups[k.Group]
		if g == nil {
			g = &recGroup{id: k.Group}
			groups[k.Group] = g
			rec.groups = append(rec.groups, g)
		}
		sp := &sharePartition{topic: k.Topic, topicID: k.TopicID, part: k.Partition, status: spUninit, speo: -1, nextDeadline: never}
		g.parts = append(g.parts, sp)
		l := located{g, sp}
		all[k] = l
		return l
	}
	if len(rec.damage) > 0 && rec.man != nil {
		// Share-partitions whose every entry was lost are known from the
		// manifest.
		for _, k := range rec.man.Parts {
			ensure(k)
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
		var hit []manPart
		switch {
		case d.key == nil:
			for k := range all {
				hit = append(hit, k)
			}
		case d.key.typ == entGroup || d.key.typ == entGroupDelete:
			for k := range all {
				if k.Group == d.key.group {
					hit = append(hit, k)
				}
			}
		case d.key.typ == entMarker:
		default:
			k := manPart{Group: d.key.group, Topic: d.key.topic, TopicID: d.key.topicID, Partition: d.key.part}
			ensure(k)
			hit = append(hit, k)
		}
		slices.SortFunc(hit, func(a, b manPart) int {
			return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		names := make([]string, len(hit))
		groupSet := map[string]bool{}
		for j, k := range hit {
			names[j] = fmt.Sprintf("%s %s/%d", k.Group, k.Topic, k.Partition)
			groupSet[k.Group] = true
		}
		m.log.Error("share state log damaged: acknowledged share state lost",
			"problem", d.String(), "groups", slices.Sorted(maps.Keys(groupSet)), "share_partitions", names,
			"repairing", m.opts.RepairShareState)
		reason := fmt.Sprintf("share state lost (%s); the damaged file is kept in %s; restart with --repair-share-state to accept the loss and bring this share-partition online",
			d, m.qdir)
		if len(reason) > maxReasonLen {
			reason = reason[:maxReasonLen]
		}
		for _, k := range hit {
			l := all[k]
			if m.opts.RepairShareState {
				m.logRepair(k, l.sp, d.String())
				continue
			}
			if l.sp.offline == "" {
				l.sp.offline = reason
			}
		}
	}
	if m.opts.RepairShareState {
		// Share-partitions left offline by an earlier start come online.
		for k, l := range all {
			if l.sp.offline != "" {
				m.logRepair(k, l.sp, l.sp.offline)
				l.sp.offline = ""
			}
		}
	}
	return files
}

// logRepair logs at WARN what a repair drops for one share-partition.
func (m *Manager) logRepair(k manPart, sp *sharePartition, problem string) {
	kept := "nothing: it starts afresh from the group's auto_offset_reset"
	if sp.status == spLive {
		kept = fmt.Sprintf("the readable state (start offset %d); acknowledgements in the damaged part are lost and those records may be delivered again", sp.spso)
	}
	m.log.Warn("share state loss accepted (--repair-share-state): share-partition online",
		"group", k.Group, "topic", k.Topic, "partition", k.Partition, "problem", problem, "kept", kept)
}

// quarantine moves the damaged files into the quarantine directory and
// returns the names of those it could not move (to keep in place).
func (m *Manager) quarantine(files []string) map[string]bool {
	keep := map[string]bool{}
	for _, f := range files {
		if m.moveToQuarantine(f) == "" {
			keep[filepath.Base(f)] = true
		}
	}
	return keep
}

// moveToQuarantine moves path into the quarantine directory and returns
// its new path, or "" (logged) if it could not.
func (m *Manager) moveToQuarantine(path string) string {
	dst := filepath.Join(m.qdir, filepath.Base(path))
	err := os.MkdirAll(m.qdir, 0o755)
	if err == nil {
		err = os.Rename(path, dst)
	}
	if err == nil {
		err = fsutil.SyncDir(m.qdir)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		m.log.Error("moving a damaged share state file to quarantine; it stays in place", "file", path, "err", err)
		return ""
	}
	m.log.Warn("damaged share state file moved to quarantine", "file", path, "moved_to", dst)
	return dst
}
