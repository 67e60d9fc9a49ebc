package logstore

import (
	"cmp"
	"slices"
	"strings"
)

// PartitionWatermarks are one partition's log start offset and high
// watermark, for metrics.
type PartitionWatermarks struct {
	Topic         string
	Partition     int32
	LogStart      int64
	HighWatermark int64
}

// Watermarks returns the log start offset and high watermark of every
// partition of every live topic, sorted by topic and partition. It is read
// at scrape time, so a deleted topic's partitions are simply absent.
func (s *FileStore) Watermarks() []PartitionWatermarks {
	var out []PartitionWatermarks
	for _, t := range s.liveTopics() {
		for _, p := range t.parts {
			out = append(out, PartitionWatermarks{Topic: t.info.Name, Partition: p.id,
				LogStart: p.logStart.Load(), HighWatermark: p.hw.Load()})
		}
	}
	slices.SortFunc(out, func(a, b PartitionWatermarks) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}
