// Package expect compares what Kafka clients consumed with what was
// produced: every record once, nothing missing, nothing extra, each at
// its offset with its key and value; and each consumer's records in
// offset order per partition.
package expect

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Record is one record as produced or consumed.
type Record struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
}

func (r Record) String() string {
	return fmt.Sprintf("%d/%d %s=%s", r.Partition, r.Offset, r.Key, r.Value)
}

type pos struct {
	partition int32
	offset    int64
}

// Exactly reports, as one error, every way got differs from want: a
// record consumed twice, one never consumed, one that was not produced or
// differs in key or value.
func Exactly(want, got []Record) error {
	wanted := map[pos]Record{}
	for _, r := range want {
		wanted[pos{r.Partition, r.Offset}] = r
	}
	var problems []string
	seen := map[pos]int{}
	for _, r := range got {
		p := pos{r.Partition, r.Offset}
		seen[p]++
		switch w, ok := wanted[p]; {
		case seen[p] > 1:
			problems = append(problems, "consumed twice: "+r.String())
		case !ok:
			problems = append(problems, "consumed but not produced (or from before the commits): "+r.String())
		case w != r:
			problems = append(problems, fmt.Sprintf("consumed %s, produced %s", r, w))
		}
	}
	for _, p := range slices.SortedFunc(maps.Keys(wanted), func(a, b pos) int {
		if a.partition != b.partition {
			return int(a.partition - b.partition)
		}
		return int(a.offset - b.offset)
	}) {
		if seen[p] == 0 {
			problems = append(problems, "never consumed: "+wanted[p].String())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d produced, %d consumed:\n  %s", len(want), len(got), strings.Join(problems, "\n  "))
	}
	return nil
}

// InOrder reports a record that one consumer got after a record of the
// same partition at the same or a higher offset.
func InOrder(who string, got []Record) error {
	last := map[int32]int64{}
	for _, r := range got {
		if l, ok := last[r.Partition]; ok && r.Offset <= l {
			return fmt.Errorf("%s: partition %d: offset %d consumed after %d", who, r.Partition, r.Offset, l)
		}
		last[r.Partition] = r.Offset
	}
	return nil
}

// Log collects the records consumed by several goroutines.
type Log struct {
	mu      sync.Mutex
	records map[string][]Record // by consumer
}

// Add records r as consumed by who.
func (l *Log) Add(who string, r Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records == nil {
		l.records = map[string][]Record{}
	}
	l.records[who] = append(l.records[who], r)
}

// Of returns what who consumed, in the order it consumed it.
func (l *Log) Of(who string) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.records[who])
}

// All returns what every consumer consumed, consumer by consumer.
func (l *Log) All() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []Record
	for _, who := range slices.Sorted(maps.Keys(l.records)) {
		all = append(all, l.records[who]...)
	}
	return all
}

// Len returns how many records were consumed in all.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rs := range l.records {
		n += len(rs)
	}
	return n
}

// Eventually polls cond every 20ms until it holds or d passes.
func Eventually(d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
