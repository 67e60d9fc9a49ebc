package app

import (
	"log/slog"

	"github.com/sharelog/sharelog/internal/storage/datadir"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
	"github.com/sharelog/sharelog/internal/storage/sharestate/statelog"
)

// expectedShareState is the share state the data directory's manifest
// recorded, for the state log to detect sharegroups/ deleted (nil: the
// manifest was missing or damaged at this start, or never recorded any).
func expectedShareState(man *datadir.Manifest) *statelog.Expected {
	if man.Status() != datadir.Found {
		return nil
	}
	ss := man.ShareState()
	if ss == nil {
		return nil
	}
	exp := &statelog.Expected{SharePartitions: make([]sharestate.PartitionKey, len(ss.SharePartitions))}
	for i, p := range ss.SharePartitions {
		exp.SharePartitions[i] = sharestate.PartitionKey{Group: p.Group, Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition}
	}
	return exp
}

// recordShareState records the share-partitions the state log's manifest
// lists in the data directory's manifest, writing it when they changed (a
// share-partition got durable state or was deleted: rare).
func recordShareState(man *datadir.Manifest, parts []sharestate.PartitionKey, log *slog.Logger) {
	sp := make([]datadir.SharePartition, len(parts))
	for i, k := range parts {
		sp[i] = datadir.SharePartition{Group: k.Group, Topic: k.Topic, TopicID: k.TopicID, Partition: k.Partition}
	}
	if !man.SetShareState(sp) {
		return
	}
	if err := man.Save(); err != nil {
		log.Warn("recording the share-partitions in the data directory manifest; retried in the background", "err", err)
	}
}
