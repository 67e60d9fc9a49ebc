package logstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
)

// MemStore is an in-memory Store, for tests and as a reference
// implementation: it has the FileStore's semantics (validation, purge,
// Watch, errors) without segments. SizeBytes is the sum of the retained
// records' Size, SegmentCount is always 1, and time retention is not
// applied (it works on whole segments).
//
// Locks: the catalog's lock (topics), then memPartition.mu; notifier locks
// are leaves.
type MemStore struct {
	topics  *Catalog[*memTopic]
	alterMu sync.Mutex // one AlterTopic at a time
}

var _ Store = (*MemStore)(nil)

type memTopic struct {
	info  TopicInfo
	parts []*memPartition
}

// Info implements CatalogTopic.
func (t *memTopic) Info() TopicInfo { return t.info }

type memPartition struct {
	topic string
	id    int32

	mu       sync.RWMutex
	recs     []Record // offsets logStart..hw-1 (recs[i].Offset == logStart+i)
	logStart int64
	hw       int64
	size     int64     // sum of recs[i].Size()
	keys     *memIndex // every keyed record ever appended (purged entries stay; scans skip nothing)
	gone     error     // non-nil after deletion or Close
	watch    notifier
}

// NewMem returns an empty MemStore.
func NewMem() *MemStore {
	return &MemStore{topics: NewCatalog[*memTopic]()}
}

func (s *MemStore) partition(name string, part int32) (*memPartition, error) {
	t, err := s.topics.LookupPartition(name, part)
	if err != nil {
		return nil, err
	}
	return t.parts[part], nil
}

// CreateTopic implements Store.
func (s *MemStore) CreateTopic(ctx context.Context, name string, partitions int32, cfg TopicConfig) (TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return TopicInfo{}, err
	}
	info, err := s.topics.Reserve(name, partitions, cfg)
	if err != nil {
		return TopicInfo{}, err
	}
	t := &memTopic{info: info}
	t.parts = make([]*memPartition, partitions)
	for i := range t.parts {
		t.parts[i] = &memPartition{topic: name, id: int32(i), keys: newMemIndex()}
	}
	if err := s.topics.Install(t); err != nil {
		t.shutdown(ErrClosed)
		return TopicInfo{}, err
	}
	return t.info, nil
}

// DeleteTopic implements Store.
func (s *MemStore) DeleteTopic(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := s.topics.Remove(name)
	if err != nil {
		return err
	}
	t.shutdown(TopicDeletedError(name))
	return nil
}

func (t *memTopic) shutdown(err error) {
	for _, p := range t.parts {
		p.mu.Lock()
		p.gone, p.recs = err, nil
		p.mu.Unlock()
		p.watch.shutdown(err)
	}
}

// AlterTopic implements Store: new partitions are added empty and the
// watchers of the others woken.
func (s *MemStore) AlterTopic(ctx context.Context, name string, fn func(cur TopicInfo) (TopicInfo, error)) (TopicInfo, error) {
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
	nt := &memTopic{info: next, parts: slices.Clone(cur.parts)}
	for i := cur.info.Partitions; i < next.Partitions; i++ {
		nt.parts = append(nt.parts, &memPartition{topic: name, id: i, keys: newMemIndex()})
	}
	if err := s.topics.Replace(name, cur, nt); err != nil {
		(&memTopic{parts: nt.parts[cur.info.Partitions:]}).shutdown(err)
		return TopicInfo{}, err
	}
	for _, p := range cur.parts {
		p.watch.notify()
	}
	return next, nil
}

// Topics implements Store.
func (s *MemStore) Topics(ctx context.Context) ([]TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.topics.Infos()
}

// TopicInfo implements Store.
func (s *MemStore) TopicInfo(ctx context.Context, name string) (TopicInfo, error) {
	t, err := s.lookupTopic(ctx, name)
	if err != nil {
		return TopicInfo{}, err
	}
	return t.info, nil
}

// Topic implements Store.
func (s *MemStore) Topic(ctx context.Context, name string) (TopicInfo, []PartitionInfo, error) {
	t, err := s.lookupTopic(ctx, name)
	if err != nil {
		return TopicInfo{}, nil, err
	}
	parts := make([]PartitionInfo, len(t.parts))
	for i, p := range t.parts {
		p.mu.RLock()
		parts[i] = PartitionInfo{Partition: p.id, LogStartOffset: p.logStart, HighWatermark: p.hw, SizeBytes: p.size, SegmentCount: 1}
		p.mu.RUnlock()
	}
	return t.info, parts, nil
}

// Append implements Store.
func (s *MemStore) Append(ctx context.Context, topic string, partition int32, recs []Record) (int64, error) {
	if _, err := validateBatch(recs); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	t, err := s.topics.LookupPartition(topic, partition)
	if err != nil {
		return 0, err
	}
	p := t.parts[partition]
	if err := validateKeys(t.info.Config, recs); err != nil {
		return 0, err
	}
	// Copy outside the lock: the caller may reuse its buffers afterwards.
	cp := make([]Record, len(recs))
	var size int64
	for i := range recs {
		cp[i] = cloneRecord(recs[i])
		size += int64(recs[i].Size())
	}
	p.mu.Lock()
	if p.gone != nil {
		p.mu.Unlock()
		return 0, p.gone
	}
	base := p.hw
	for i := range cp {
		cp[i].Offset = base + int64(i)
	}
	p.recs = append(p.recs, cp...)
	p.keys.mu.Lock()
	for i := range cp {
		if cp[i].Key != nil {
			p.keys.addLocked(cp[i].Key, cp[i].Offset, cp[i].Value == nil, recLoc{})
		}
	}
	p.keys.mu.Unlock()
	p.hw += int64(len(cp))
	p.size += size
	p.mu.Unlock()
	p.watch.notify()
	return base, nil
}

// Read implements Store.
func (s *MemStore) Read(ctx context.Context, topic string, partition int32, offset int64, maxRecords, maxBytes int) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := validateReadLimits(maxRecords, maxBytes); err != nil {
		return nil, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.gone != nil {
		return nil, p.gone
	}
	if offset < p.logStart || offset > p.hw {
		return nil, fmt.Errorf("topic %q partition %d: offset %d is outside [log start %d, high watermark %d]: %w",
			p.topic, p.id, offset, p.logStart, p.hw, ErrOffsetOutOfRange)
	}
	var out []Record
	bytes := 0
	for _, r := range p.recs[offset-p.logStart:] {
		sz := r.Size()
		if len(out) > 0 && bytes+sz > maxBytes {
			break
		}
		out = append(out, cloneRecord(r))
		bytes += sz
		if len(out) >= maxRecords || bytes >= maxBytes {
			break
		}
	}
	return out, nil
}

// Bounds implements Store.
func (s *MemStore) Bounds(topic string, partition int32) (int64, int64, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.gone != nil {
		return 0, 0, p.gone
	}
	return p.logStart, p.hw, nil
}

// OffsetForTimestamp implements Store.
func (s *MemStore) OffsetForTimestamp(ctx context.Context, topic string, partition int32, ts int64) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.gone != nil {
		return 0, 0, p.gone
	}
	for _, r := range p.recs {
		if r.Timestamp >= ts {
			return r.Offset, r.Timestamp, nil
		}
	}
	return -1, -1, nil
}

// Watch implements Store.
func (s *MemStore) Watch(topic string, partition int32) (<-chan struct{}, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return nil, err
	}
	return p.watch.wait()
}

// DeleteRecordsBefore implements Store.
func (s *MemStore) DeleteRecordsBefore(ctx context.Context, topic string, partition int32, offset int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	if p.gone != nil {
		p.mu.Unlock()
		return 0, p.gone
	}
	if offset <= p.logStart {
		ls := p.logStart
		p.mu.Unlock()
		return ls, nil
	}
	if offset > p.hw {
		hw := p.hw
		p.mu.Unlock()
		return 0, fmt.Errorf("topic %q partition %d: purge to offset %d beyond the high watermark %d: %w",
			p.topic, p.id, offset, hw, ErrOffsetOutOfRange)
	}
	drop := p.recs[:offset-p.logStart]
	for i := range drop {
		p.size -= int64(drop[i].Size())
	}
	// Copy the rest so the dropped records' memory is released.
	p.recs = slices.Clone(p.recs[offset-p.logStart:])
	p.logStart = offset
	p.mu.Unlock()
	p.watch.notify()
	return offset, nil
}

// Close implements Store. Later calls return ErrClosed; a second Close
// returns nil.
func (s *MemStore) Close() error {
	topics, first := s.topics.Close()
	if !first {
		return nil
	}
	for _, t := range topics {
		t.shutdown(ErrClosed)
	}
	return nil
}

var _ KeyIndexer = (*MemStore)(nil)

// TopicID implements KeyIndexer.
func (s *MemStore) TopicID(name string) (string, error) { return s.topics.TopicID(name) }

// ScanKeys implements KeyIndexer over the partition's in-memory index. The
// memory store's index is always ready.
func (s *MemStore) ScanKeys(ctx context.Context, topic string, partition int32, prefix []byte, end int64) (KeyCursor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return nil, err
	}
	p.mu.RLock()
	gone, keys := p.gone, p.keys
	p.mu.RUnlock()
	if gone != nil {
		return nil, gone
	}
	return newMergeCursor([]keyIter{newMemIter(keys, bytes.Clone(prefix), end)}, nil), nil
}

// RangeStats implements KeyIndexer: records and their encoded frame sizes.
func (s *MemStore) RangeStats(topic string, partition int32, from, end int64) (int64, int64, error) {
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.gone != nil {
		return 0, 0, p.gone
	}
	from, end = max(from, p.logStart), min(end, p.hw)
	var size int64
	for i := from; i < end; i++ {
		size += int64(frameSize(&p.recs[i-p.logStart]))
	}
	return max(end-from, 0), size, nil
}

// PurgedTombstonesBelow implements KeyIndexer: the memory store never
// compacts.
func (s *MemStore) PurgedTombstonesBelow(topic string, partition int32) (int64, error) {
	_, _, err := s.Bounds(topic, partition)
	return 0, err
}

// SegmentEnd implements KeyIndexer: the memory store is one segment.
func (s *MemStore) SegmentEnd(topic string, partition int32, offset int64) (int64, error) {
	_, hw, err := s.Bounds(topic, partition)
	return hw, err
}

var (
	_ EntryReader = (*MemStore)(nil)
	_ KeyCounter  = (*MemStore)(nil)
)

// ReadEntry implements EntryReader: the memory store reads by offset.
func (s *MemStore) ReadEntry(ctx context.Context, topic string, partition int32, ent KeyEntry) (Record, error) {
	recs, err := s.Read(ctx, topic, partition, ent.Offset, 1, 1)
	if err != nil {
		return Record{}, err
	}
	if len(recs) == 0 {
		return Record{}, fmt.Errorf("topic %q partition %d: offset %d is at the high watermark: %w", topic, partition, ent.Offset, ErrOffsetOutOfRange)
	}
	return recs[0], nil
}

// CountKeys implements KeyCounter with an exact count (up to limit) of the
// partition's in-memory index.
func (s *MemStore) CountKeys(ctx context.Context, topic string, partition int32, prefix []byte, end, limit int64) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	p, err := s.partition(topic, partition)
	if err != nil {
		return 0, 0, err
	}
	p.mu.RLock()
	gone, keys := p.gone, p.keys
	p.mu.RUnlock()
	if gone != nil {
		return 0, 0, gone
	}
	n := keys.count(prefix, end, limit)
	return n, n, nil
}

// lookupTopic finds a live topic by name.
func (s *MemStore) lookupTopic(ctx context.Context, name string) (*memTopic, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.topics.Lookup(name)
}
