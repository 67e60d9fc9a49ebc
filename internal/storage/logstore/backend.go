package logstore

import (
	"fmt"
)

// Hooks for Store implementations outside this package (the JetStream log
// store, internal/storage/jetstream/jslog): the record frame, the shared request
// validation and the in-memory key index, so every backend stores the same
// bytes and answers bad input with the same errors as the file store. The
// topic catalog's rules are a type of their own, Catalog (catalog.go).

// EncodeRecord appends r's record frame (the layout doc.go describes) with
// the given offset to dst. last marks the final record of an Append batch.
func EncodeRecord(dst []byte, r *Record, offset int64, last bool) []byte {
	return appendFrame(dst, r, offset, last)
}

// RecordFrameSize is the encoded size of r's frame.
func RecordFrameSize(r *Record) int { return frameSize(r) }

// DecodeRecord checks and decodes one whole record frame. The record's key,
// value and header values alias b. A damaged or truncated frame, or bytes
// after it, is ErrCorrupt.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	n, _, err := decodeFrame(b, &r)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if n != len(b) {
		return Record{}, fmt.Errorf("%w: %d bytes after the frame", ErrCorrupt, len(b)-n)
	}
	return r, nil
}

// ValidateBatch checks an Append batch (not empty, records and batch within
// the size limits) and returns its encoded size.
func ValidateBatch(recs []Record) (int, error) { return validateBatch(recs) }

// ValidateKeys refuses a keyless record for a topic whose cleanup policy
// compacts (cfg's), as every store does.
func ValidateKeys(cfg TopicConfig, recs []Record) error { return validateKeys(cfg, recs) }

// ValidateReadLimits checks Read's limits.
func ValidateReadLimits(maxRecords, maxBytes int) error {
	return validateReadLimits(maxRecords, maxBytes)
}

// MemKeyIndex is one partition's key index held in memory, as the memory
// store keeps it, for backends that index records themselves. Keys of one
// record must be added in increasing offset order. Safe for concurrent use;
// cursors see appends made after they were opened only below their end.
type MemKeyIndex struct{ m *memIndex }

// NewMemKeyIndex returns an empty index.
func NewMemKeyIndex() *MemKeyIndex { return &MemKeyIndex{m: newMemIndex()} }

// Add indexes key at off; tomb marks a record without a value.
func (x *MemKeyIndex) Add(key []byte, off int64, tomb bool) { x.m.add(key, off, tomb, recLoc{}) }

// Scan returns a cursor as KeyIndexer.ScanKeys describes it.
func (x *MemKeyIndex) Scan(prefix []byte, end int64) KeyCursor {
	return newMergeCursor([]keyIter{newMemIter(x.m, cloneBytes(prefix), end)}, nil)
}

// Count returns the exact number of keys Scan(prefix, end) would yield,
// stopping at limit.
func (x *MemKeyIndex) Count(prefix []byte, end, limit int64) int64 {
	return x.m.count(prefix, end, limit)
}

// Notifier is the broadcast-by-close signal behind Watch, for other Store
// implementations: Wait returns a channel the next Notify closes; after
// Shutdown, Wait fails with its error. The zero value is ready to use.
type Notifier struct{ n notifier }

// Wait returns the channel closed by the next Notify, or the shutdown error.
func (n *Notifier) Wait() (<-chan struct{}, error) { return n.n.wait() }

// Notify wakes every current waiter.
func (n *Notifier) Notify() { n.n.notify() }

// Shutdown wakes every waiter for the last time; later waits return err.
func (n *Notifier) Shutdown(err error) { n.n.shutdown(err) }
