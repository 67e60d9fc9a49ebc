package shareconsumer

import (
	"maps"
	"slices"

	sharelogv1 "github.com/sharelog/sharelog/gen/sharelog/v1"
)

// ackSet holds acknowledgements by partition and offset. Sent, it becomes one
// batch per run of consecutive offsets with the same type, so what the
// server processes is O(ranges), not O(records).
type ackSet map[TopicPartition]map[int64]AckType

func (s ackSet) add(tp TopicPartition, offset int64, t AckType) {
	m := s[tp]
	if m == nil {
		m = make(map[int64]AckType)
		s[tp] = m
	}
	m[offset] = t
}

func (s ackSet) empty() bool { return len(s) == 0 }

func (s ackSet) hasRenew() bool {
	for _, m := range s {
		for _, t := range m {
			if t == Renew {
				return true
			}
		}
	}
	return false
}

// merge moves every acknowledgement of o into s (o's type wins on overlap).
func (s ackSet) merge(o ackSet) {
	for tp, m := range o {
		for off, t := range m {
			s.add(tp, off, t)
		}
	}
}

// without returns the acknowledgements of s whose type is not t.
func (s ackSet) without(t AckType) ackSet {
	out := ackSet{}
	for tp, m := range s {
		for off, at := range m {
			if at != t {
				out.add(tp, off, at)
			}
		}
	}
	return out
}

// partitions returns the partitions of s, sorted.
func (s ackSet) partitions() []TopicPartition {
	tps := slices.Collect(maps.Keys(s))
	slices.SortFunc(tps, compareTP)
	return tps
}

func compareTP(a, b TopicPartition) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

// rangesOf groups offsets into maximal runs of consecutive offsets with the
// same type, ascending.
func rangesOf(m map[int64]AckType) []AckRange {
	offs := slices.Collect(maps.Keys(m))
	slices.Sort(offs)
	var out []AckRange
	for _, off := range offs {
		t := m[off]
		if n := len(out); n > 0 && out[n-1].LastOffset == off-1 && out[n-1].Type == t {
			out[n-1].LastOffset = off
			continue
		}
		out = append(out, AckRange{FirstOffset: off, LastOffset: off, Type: t})
	}
	return out
}

// batchesOf turns ranges into acknowledgement batches: one type per batch.
func batchesOf(rs []AckRange) []*sharelogv1.AcknowledgementBatch {
	out := make([]*sharelogv1.AcknowledgementBatch, len(rs))
	for i, r := range rs {
		out[i] = &sharelogv1.AcknowledgementBatch{
			FirstOffset:      r.FirstOffset,
			LastOffset:       r.LastOffset,
			AcknowledgeTypes: []sharelogv1.AcknowledgeType{r.Type.proto()},
		}
	}
	return out
}

// split partitions the ranges of tp's acknowledgements into those that were
// in u (uncertain: sent before in a request whose outcome is unknown) and
// the others.
func split(all map[int64]AckType, u map[int64]AckType) (certain, uncertain []AckRange) {
	if len(u) == 0 {
		return rangesOf(all), nil
	}
	c, un := map[int64]AckType{}, map[int64]AckType{}
	for off, t := range all {
		if _, ok := u[off]; ok {
			un[off] = t
		} else {
			c[off] = t
		}
	}
	return rangesOf(c), rangesOf(un)
}
