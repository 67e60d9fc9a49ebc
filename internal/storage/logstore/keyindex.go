package logstore

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"math"
	"sync"

	"github.com/google/btree"
)

// ErrIndexNotReady: the partition's key index does not cover its log yet (a
// run is being rebuilt after a crash or an upgrade). Callers fall back to a
// scan in offset order.
var ErrIndexNotReady = errors.New("key index not ready")

// KeyEntry is one key yielded by a key-index scan: its latest record below the
// scan's end.
type KeyEntry struct {
	Key       []byte // valid until the cursor's next call to Next
	Offset    int64
	Tombstone bool // the record at Offset has no value
	// loc is where the file store keeps the record: its frame's position
	// in the segment holding Offset and its length (zero when unknown).
	// EntryReader.ReadEntry uses it to read the record with one pread.
	loc recLoc
	// seg is the segment version the entry was read from (nil when
	// unknown): while the cursor pins it, ReadEntry reads that version, so
	// a snapshot is not disturbed by compaction replacing the segment.
	seg *segment
}

// recLoc is a record frame's position in its segment file and its length.
// The zero value means unknown.
type recLoc struct {
	pos  uint32
	size uint32
}

// KeyCursor iterates a key-index scan in unsigned byte order of keys, each key
// once. It is not safe for concurrent use.
type KeyCursor interface {
	// Next advances to the next key; false at the end or on an error (Err).
	Next() bool
	// Entry is the current key.
	Entry() KeyEntry
	// Err is the error that stopped Next, if any.
	Err() error
	// Close releases what the cursor pins (segment files, index runs).
	Close() error
}

// KeyIndexer is a partition key index: every keyed
// record's (key, offset, tombstone), sorted by key, updated on append before
// the high watermark passes the record. Change streams use it for OSO
// snapshots. It is separate from Store so that a backend without an index
// still serves everything else, and it is handed to its users explicitly
// (changestream.New takes one) rather than discovered on a Store, so a
// wrapper (the tracing one) can wrap it too. The file store and the memory
// store implement it; logstoretest.RunKeyIndex is its conformance suite.
type KeyIndexer interface {
	// TopicID returns the id of the topic currently named name
	// (ErrUnknownTopic if there is none). It is cheap: streams call it to
	// notice a topic deleted and re-created under the same name.
	TopicID(name string) (string, error)
	// ScanKeys returns a cursor over the keys that start with prefix (every
	// non-empty key when prefix is empty) and have a record below end; each
	// comes once with its latest offset below end. Offsets below the log
	// start offset may be yielded (callers skip or reject them); memory is
	// bounded by the number of index runs, not by the number of keys. It
	// fails with ErrIndexNotReady while the index is being rebuilt.
	ScanKeys(ctx context.Context, topic string, partition int32, prefix []byte, end int64) (KeyCursor, error)
	// RangeStats estimates the records stored in [from, end) and their stored
	// (encoded) bytes without reading any record.
	RangeStats(topic string, partition int32, from, end int64) (records, bytes int64, err error)
	// SegmentEnd returns the offset after the last record of the segment
	// holding offset (the high watermark for the active segment), so readers
	// can cut work at segment boundaries. Offsets at or past the high
	// watermark give the high watermark.
	SegmentEnd(topic string, partition int32, offset int64) (int64, error)
	// PurgedTombstonesBelow returns P+1 as PartitionInfo has it (0: no
	// tombstone removed by compaction) with one atomic load, so streams
	// can re-check it at every change of the partition.
	PurgedTombstonesBelow(topic string, partition int32) (int64, error)
	EntryReader
	KeyCounter
}

// EntryReader reads the record a KeyEntry of the index's own cursor points
// at (part of KeyIndexer; the file store keeps each record's file position
// in its key index, so this is one pread instead of a Read).
type EntryReader interface {
	// ReadEntry returns the record at ent.Offset, as Read(ent.Offset, 1, 1)
	// would (same errors; offsets outside [log start, high watermark) are
	// ErrOffsetOutOfRange). A stale location (the segment was purged or
	// rewritten since the scan) or none (an entry built by hand) falls back
	// to the offset path.
	ReadEntry(ctx context.Context, topic string, partition int32, ent KeyEntry) (Record, error)
}

// KeyCounter bounds the number of keys a ScanKeys cursor would yield
// without iterating it (part of KeyIndexer; the auto estimate of
// change streams' auto backfill estimate).
type KeyCounter interface {
	// CountKeys returns lo <= M <= hi, where M is the number of keys
	// ScanKeys(prefix, end) would yield. It reads no record and only as
	// much index as it needs: once it knows lo >= limit it may stop, and then
	// hi is only >= lo. lo == hi < limit means the count is exact. An index
	// that cannot bound cheaply may return (0, math.MaxInt64).
	CountKeys(ctx context.Context, topic string, partition int32, prefix []byte, end, limit int64) (lo, hi int64, err error)
}

// An index entry packs an offset and the tombstone flag: off<<1 | tomb.
func packEntry(off int64, tomb bool) uint64 {
	v := uint64(off) << 1
	if tomb {
		v |= 1
	}
	return v
}

func unpackEntry(v uint64) (int64, bool) { return int64(v >> 1), v&1 != 0 }

// memEnt is one indexed record: its packEntry value and its location.
type memEnt struct {
	v   uint64
	loc recLoc
}

// memKey is one key of a memIndex with every offset it has in the indexed
// range, ascending.
type memKey struct {
	key  []byte
	offs []memEnt
}

func memKeyLess(a, b *memKey) bool { return bytes.Compare(a.key, b.key) < 0 }

// memIndex is an in-memory key index: the active segment's entries in the
// file store (written as a run when the segment is sealed), a whole
// partition's in the memory store. Appends add under mu; cursors seek under
// the read lock a few keys at a time, so they never copy the key set and
// never block an append for long.
type memIndex struct {
	mu      sync.RWMutex
	tree    *btree.BTreeG[*memKey]
	entries int
	probe   memKey // reused lookup key; guarded by mu (write lock)
}

func newMemIndex() *memIndex {
	return &memIndex{tree: btree.NewG(32, memKeyLess)}
}

// addLocked records key at off, stored at loc (zero if unknown). Offsets of
// one key must be added in increasing order. mu must be held for writing.
func (m *memIndex) addLocked(key []byte, off int64, tomb bool, loc recLoc) {
	e := memEnt{v: packEntry(off, tomb), loc: loc}
	m.probe.key = key
	if it, ok := m.tree.Get(&m.probe); ok {
		it.offs = append(it.offs, e)
	} else {
		m.tree.ReplaceOrInsert(&memKey{key: bytes.Clone(key), offs: []memEnt{e}})
	}
	m.probe.key = nil
	m.entries++
}

func (m *memIndex) add(key []byte, off int64, tomb bool, loc recLoc) {
	m.mu.Lock()
	m.addLocked(key, off, tomb, loc)
	m.mu.Unlock()
}

// frameLoc is the location of a frame at file position pos of length n
// (zero, unknown, if either does not fit).
func frameLoc(pos int64, n int) recLoc {
	if pos < 0 || pos > math.MaxUint32 || n <= 0 || int64(n) > math.MaxUint32 {
		return recLoc{}
	}
	return recLoc{pos: uint32(pos), size: uint32(n)}
}

// latestBelow returns the last entry of offs below end.
func latestBelow(offs []memEnt, end int64) (memEnt, bool) {
	lim := packEntry(end, false)
	// offs ascend: binary search the first entry >= lim.
	lo, hi := 0, len(offs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if offs[m].v >= lim {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return memEnt{}, false
	}
	return offs[lo-1], true
}

// memCountBatch is how many keys count looks at per read lock.
const memCountBatch = 1024

// count returns the number of keys a memIter over prefix and end would
// yield, stopping at limit. It walks the tree under the read lock a batch at
// a time, so appends are never held up for long.
func (m *memIndex) count(prefix []byte, end, limit int64) int64 {
	lim := packEntry(end, false)
	var n int64
	from := prefix // the next key to look at
	for n < limit {
		var next []byte
		seen := 0
		m.mu.RLock()
		m.tree.AscendGreaterOrEqual(&memKey{key: from}, func(k *memKey) bool {
			if !bytes.HasPrefix(k.key, prefix) {
				return false
			}
			if seen == memCountBatch || n >= limit {
				next = bytes.Clone(k.key)
				return false
			}
			seen++
			if len(k.key) > 0 && k.offs[0].v < lim { // offs ascend
				n++
			}
			return true
		})
		m.mu.RUnlock()
		if next == nil {
			break
		}
		from = next
	}
	return n
}

// keyIter is one sorted source of a merged scan: it yields key groups in key
// order, each with its latest entry below the scan's end (keys without one
// are skipped by the source).
type keyIter interface {
	next() bool
	key() []byte
	entry() memEnt
	err() error
	close()
}

// memIter reads a memIndex a batch of keys per lock acquisition.
type memIter struct {
	m      *memIndex
	prefix []byte
	end    int64
	batch  []memHit
	i      int
	last   []byte // last key yielded; the next batch starts after it
	done   bool
}

type memHit struct {
	key []byte
	ent memEnt
}

const memIterBatch = 128

func newMemIter(m *memIndex, prefix []byte, end int64) *memIter {
	return &memIter{m: m, prefix: prefix, end: end, i: -1}
}

func (it *memIter) next() bool {
	it.i++
	if it.i < len(it.batch) {
		return true
	}
	if it.done {
		return false
	}
	it.fill()
	it.i = 0
	return len(it.batch) > 0
}

func (it *memIter) fill() {
	var pivot *memKey
	after := it.last != nil
	if after {
		pivot = &memKey{key: it.last}
	} else {
		pivot = &memKey{key: it.prefix}
	}
	// Reuse the batch's key buffers.
	old := it.batch
	it.batch = it.batch[:0]
	it.m.mu.RLock()
	it.m.tree.AscendGreaterOrEqual(pivot, func(k *memKey) bool {
		if after && bytes.Equal(k.key, it.last) {
			return true
		}
		if !bytes.HasPrefix(k.key, it.prefix) {
			it.done = true
			return false
		}
		if len(k.key) == 0 {
			return true // an empty key matches no prefix
		}
		ent, ok := latestBelow(k.offs, it.end)
		if !ok {
			return true
		}
		var buf []byte
		if n := len(it.batch); n < len(old) {
			buf = old[n].key[:0]
		}
		it.batch = append(it.batch, memHit{key: append(buf, k.key...), ent: ent})
		return len(it.batch) < memIterBatch
	})
	it.m.mu.RUnlock()
	if len(it.batch) < memIterBatch {
		it.done = true
	}
	if n := len(it.batch); n > 0 {
		it.last = append(it.last[:0], it.batch[n-1].key...)
	}
}

func (it *memIter) key() []byte   { return it.batch[it.i].key }
func (it *memIter) entry() memEnt { return it.batch[it.i].ent }
func (it *memIter) err() error    { return nil }
func (it *memIter) close()        {}

// mergeCursor merges sources (one per index run) into one KeyCursor: for a
// key present in several runs it yields the greatest entry, which is the
// latest offset below end. Its memory is one buffered block per run.
type mergeCursor struct {
	h       iterHeap
	cur     KeyEntry
	keyBuf  []byte
	err     error
	onClose func()
	closed  bool
}

type iterHeap []keyIter

func (h iterHeap) Len() int { return len(h) }
func (h iterHeap) Less(i, j int) bool {
	return bytes.Compare(h[i].key(), h[j].key()) < 0
}
func (h iterHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *iterHeap) Push(x any)   { *h = append(*h, x.(keyIter)) }
func (h *iterHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// newMergeCursor takes ownership of iters and calls onClose once when closed.
func newMergeCursor(iters []keyIter, onClose func()) *mergeCursor {
	c := &mergeCursor{onClose: onClose}
	for _, it := range iters {
		if it.next() {
			c.h = append(c.h, it)
			continue
		}
		if err := it.err(); err != nil && c.err == nil {
			c.err = err
		}
		it.close()
	}
	heap.Init(&c.h)
	return c
}

func (c *mergeCursor) Next() bool {
	if c.err != nil || c.closed || len(c.h) == 0 {
		return false
	}
	top := c.h[0]
	c.keyBuf = append(c.keyBuf[:0], top.key()...)
	best, bestSeg := top.entry(), iterSegment(top)
	for len(c.h) > 0 && bytes.Equal(c.h[0].key(), c.keyBuf) {
		it := c.h[0]
		if e := it.entry(); e.v > best.v {
			best, bestSeg = e, iterSegment(it)
		}
		if it.next() {
			heap.Fix(&c.h, 0)
			continue
		}
		heap.Pop(&c.h)
		if err := it.err(); err != nil {
			c.err = err
		}
		it.close()
	}
	if c.err != nil {
		return false
	}
	off, tomb := unpackEntry(best.v)
	c.cur = KeyEntry{Key: c.keyBuf, Offset: off, Tombstone: tomb, loc: best.loc, seg: bestSeg}
	return true
}

// segIter is a keyIter over one segment's index, naming that segment.
type segIter struct {
	keyIter
	seg *segment
}

func iterSegment(it keyIter) *segment {
	if si, ok := it.(*segIter); ok {
		return si.seg
	}
	return nil
}

func (c *mergeCursor) Entry() KeyEntry { return c.cur }
func (c *mergeCursor) Err() error      { return c.err }

func (c *mergeCursor) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	for _, it := range c.h {
		it.close()
	}
	c.h = nil
	if c.onClose != nil {
		c.onClose()
	}
	return nil
}

// indexFrameKey decodes the key and tombstone flag of an encoded frame
// (our own, so lengths are valid). ok is false for a keyless record.
func frameKey(fr []byte) (key []byte, tomb, ok bool) {
	body := fr[frameHeaderSize:]
	d := decoder{b: body, pos: 17}
	kl := d.u32()
	if kl == nilLen {
		return nil, false, false
	}
	key = d.bytes(int(kl))
	vl := d.u32()
	return key, vl == nilLen, !d.bad
}
