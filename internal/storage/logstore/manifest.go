package logstore

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/sharelog/sharelog/internal/storage/datadir"
)

// The data directory's manifest (internal/storage/datadir, set as
// Options.Manifest) records every topic and each partition's last known
// high watermark. The file store keeps it a lower bound of what is on
// disk (docs/on-disk-layout.md, "The data directory manifest"):
//   - a topic is added once its directory is durable (CreateTopic; the
//     reclaimer writes it) and removed, with a synchronous write, before
//     its directory is renamed away (DeleteTopic);
//   - a partition's high watermark is raised after a roll (the sealed
//     segment is synced first in the durable modes), after its recovery
//     at Open and at a clean Close; the reclaimer writes the manifest (at
//     most once a second) when a roll changed it, so no append waits.
//
// At Open, a recorded topic whose directory is missing (topics/ deleted,
// the topic quarantined now or at an earlier start) is registered with
// every partition offline, so that its name stays taken, its share state
// is kept and nothing restarts at offset 0; a partition whose recovered
// log ends below its recorded high watermark is offline. With
// Options.AcceptLoss (--repair-accept-loss) both are accepted instead,
// logged at WARN: the topic is forgotten, the partition continues at the
// recorded high watermark (its log start moves there, so no offset is
// reused).

// manifest returns the data directory's manifest, or nil without one.
func (s *FileStore) manifest() *datadir.Manifest { return s.opts.Manifest }

// recordedHW is the high watermark the manifest recorded for p (0 if
// none, or without a manifest).
func (p *partition) recordedHW() int64 {
	m := p.st.manifest()
	if m == nil || m.Status() != datadir.Found {
		return 0
	}
	return m.HighWatermark(p.topicID, p.id)
}

// noteHW raises p's recorded high watermark to hw; the reclaimer writes it.
func (p *partition) noteHW(hw int64) {
	if m := p.st.manifest(); m != nil {
		m.RaiseHighWatermark(p.topicID, p.id, hw)
	}
}

// saveManifest writes the manifest if it changed; a failure is logged
// once per failing period (the next call retries).
func (s *FileStore) saveManifest() error {
	m := s.manifest()
	if m == nil {
		return nil
	}
	err := m.Save()
	if err != nil {
		if s.manifestFailing.CompareAndSwap(false, true) {
			s.log.Error("logstore: writing the data directory manifest failed; retried in the background", "file", m.Path(), "err", err,
				"action", "free space or fix the disk; until it is written, a topic created meanwhile is not protected against the loss of its directory")
		}
		return err
	}
	s.manifestFailing.Store(false)
	return nil
}

// reconcileManifest runs at the end of load: loaded holds the ids of the
// topics loaded from their directories, quarantined why the topic
// directories quarantined by this Open were. Loaded topics the manifest
// does not know are added; recorded topics that were not loaded are
// registered offline (or, with AcceptLoss, forgotten).
func (s *FileStore) reconcileManifest(loaded map[string]bool, quarantined map[string]string) error {
	m := s.manifest()
	if m == nil {
		return nil
	}
	known := m.Status() == datadir.Found
	for _, t := range s.topics.All() {
		if _, ok := m.Topic(t.info.ID); !ok {
			if known {
				// Created just before a crash, before its manifest write.
				s.log.Info("logstore: topic not yet in the data directory manifest; added", "topic", t.info.Name, "id", t.info.ID)
			}
			m.PutTopic(datadir.Topic{ID: t.info.ID, Name: t.info.Name, Partitions: t.info.Partitions})
		}
		// Partitions added just before a crash, before the manifest
		// recorded them.
		m.GrowTopic(t.info.ID, t.info.Partitions)
	}
	if !known {
		return nil
	}
	for _, mt := range m.Topics() {
		if loaded[mt.ID] {
			continue
		}
		dir := filepath.Join(s.topicsDir, mt.ID)
		why, wasQuarantined := quarantined[mt.ID]
		problem := fmt.Sprintf("the topic directory %s is missing", dir)
		restore := "restore the directory from a backup (if an earlier start moved it to quarantine, from " + filepath.Join(s.dir, quarantineDir) + ")"
		if wasQuarantined {
			problem = fmt.Sprintf("the topic directory %s was moved to quarantine: %s", dir, why)
			restore = "repair the quarantined copy and move it back"
		}
		if s.opts.AcceptLoss {
			s.log.Warn("logstore: topic loss accepted (--repair-accept-loss): the topic is forgotten",
				"topic", mt.Name, "id", mt.ID, "problem", problem, "partitions", mt.Partitions, "high_watermarks", mt.HighWatermarks)
			m.RemoveTopic(mt.ID)
			continue
		}
		if other, err := s.topics.Lookup(mt.Name); err == nil {
			s.log.Error("logstore: topic recorded in the data directory manifest is missing, and its name is taken by another topic",
				"topic", mt.Name, "id", mt.ID, "other_id", other.info.ID, "problem", problem,
				"action", restore+" and delete the other topic, or restart once with --repair-accept-loss to forget it (see docs/operations.md)")
			continue
		}
		cfg, err := normalizeTopic(mt.Name, mt.Partitions, TopicConfig{})
		if err != nil {
			return fmt.Errorf("data directory manifest: topic %q: %w", mt.Name, err)
		}
		t := &topic{info: TopicInfo{Name: mt.Name, ID: mt.ID, Partitions: mt.Partitions, Config: cfg}, dir: dir, conf: newTopicConf(cfg, false)}
		t.parts = make([]*partition, mt.Partitions)
		err = fmt.Errorf("%s, but the data directory manifest %s records the topic (high watermarks %v); nothing is recreated empty, which would restart its offsets at 0",
			problem, m.Path(), mt.HighWatermarks)
		for i := range t.parts {
			p := newPartition(s, t, int32(i))
			t.parts[i] = p
			p.setOffline(err, false)
		}
		s.log.Error("logstore: topic missing: every partition is offline", "topic", mt.Name, "id", mt.ID, "problem", problem,
			"partitions", mt.Partitions, "high_watermarks", mt.HighWatermarks,
			"action", restore+" and restart; or delete the topic; or restart once with --repair-accept-loss to forget it (see docs/operations.md)")
		if err := s.topics.Add(t); err != nil {
			return err
		}
	}
	return nil
}

// checkRecordedHW compares the recovered high watermark hw with the one
// the manifest recorded. It returns the log start to continue from (ls,
// or with AcceptLoss the recorded high watermark), whether a loss was
// accepted, and an error (the partition goes offline) if the log ends
// below what was recorded.
func (p *partition) checkRecordedHW(ls, hw int64) (int64, bool, error) {
	rec := p.recordedHW()
	if rec <= hw {
		return ls, false, nil
	}
	if !p.st.opts.AcceptLoss {
		return ls, false, fmt.Errorf("the recovered log ends at offset %d, but the data directory manifest %s recorded high watermark %d: records %d to %d are missing (segment files or the checkpoint deleted or truncated); serving it would reuse their offsets",
			hw, p.st.manifest().Path(), rec, hw, rec-1)
	}
	p.st.log.Warn("logstore: partition loss accepted (--repair-accept-loss): it continues at the recorded high watermark; no offset is reused",
		"topic", p.topic, "partition", p.id, "recovered_high_watermark", hw, "recorded_high_watermark", rec,
		"lost_offsets", strconv.FormatInt(hw, 10)+"-"+strconv.FormatInt(rec-1, 10),
		"log_start", rec, "note", "the records still readable below the recorded high watermark are no longer served (the log start moves to it)")
	if err := p.st.fs.writeFileAtomic(filepath.Join(p.dir, logStartFile), strconv.AppendInt(nil, rec, 10), dirSync(p.st.durable())); err != nil {
		return ls, false, err
	}
	return rec, true, nil
}
