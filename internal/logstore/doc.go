// Package logstore is sharelog's partitioned, segmented record log: the
// Store interface that the service and the domain packages depend on, a
// crash-safe file implementation (FileStore, Open) and an in-memory one
// (MemStore, NewMem) for tests and as the reference. Both pass the
// conformance suite in logstoretest.
//
// # Model
//
// A topic has a name, a random UUID (new on every creation) and N
// partitions. A partition is a log of records with dense offsets from 0, a
// high watermark (HW: the next offset; everything below it is durable per
// the fsync mode and readable) and a log start offset (LSO: the first
// readable offset, moved forward by purge and time retention).
//
// # Directory layout
//
//	<dir>/LOCK                                flock: one process per directory
//	<dir>/topics/<topic-id>/meta.json         name, id, partitions, config
//	<dir>/topics/<topic-id>/<p>/log-start-offset   decimal LSO (absent = 0)
//	<dir>/topics/<topic-id>/<p>/%020d.log          segment; name = base offset
//	<dir>/topics/<topic-id>/<p>/%020d.index        sparse offset index (sealed segments)
//	<dir>/topics/<topic-id>/<p>/%020d.timeindex    sparse time index (sealed segments)
//	<dir>/topics/<topic-id>/<p>/%020d.keys         key-index run (sealed segments; keyrun.go)
//
// Zero-padded names sort in offset order. meta.json and log-start-offset are
// replaced atomically: write <name>.tmp, fsync, rename, fsync the directory.
// The active segment's indexes live in memory and are written (temp file,
// fsync, rename) when it is sealed; an index that is missing or inconsistent
// is rebuilt from the log, so index files never need a directory fsync.
//
// # Record frame
//
// A segment is a sequence of frames. All integers are big-endian.
//
//	offset  size  field
//	0       4     body length B (u32; 29 <= B <= MaxRecordBytes-8)
//	4       4     CRC32C (Castagnoli) of the B body bytes
//	8       1     attributes: bit 0 = last record of its Append batch; other bits 0
//	9       8     offset (i64)
//	17      8     timestamp, ms since the Unix epoch (i64)
//	25      4     key length K (i32); -1 = nil key (keyless), 0 = empty key
//	29      K     key
//	        4     value length V (i32); -1 = nil value (tombstone), 0 = empty value
//	        V     value
//	        4     header count H (u32)
//	        H ×   { u32 key length, key bytes, i32 value length (-1 = nil), value bytes }
//
// The body must be consumed exactly. Every length is checked against what
// remains of the body (and the header count against the minimum header
// size) before anything is allocated, so damaged input cannot make the
// decoder allocate more than the frame's own size (FuzzDecodeFrame).
//
// An Append batch is encoded into one buffer and written with one write
// call, always into a single segment (segments roll only between batches,
// when the next batch would overflow segment_bytes). The last frame of each
// batch carries the batch-end bit, which makes batches atomic across
// crashes: recovery keeps only whole batches.
//
// # Indexes
//
// The offset index (.index) holds 8-byte entries {u32 offset - base, u32
// file position}, one per ~4 KiB of log (indexInterval). A lookup binary
// searches the last entry at or before the wanted offset and scans forward
// at most ~4 KiB. The time index (.timeindex) holds 12-byte entries {i64 ts,
// u32 offset - base} meaning "every record up to this offset has a timestamp
// <= ts" (a running maximum, so timestamps need not be monotonic), made when
// the maximum grows and ~4 KiB have passed; its last entry is the segment's
// newest timestamp, which time retention and timestamp search use to skip
// whole segments.
//
// # Key index (KeyIndexer, change-stream.md §7)
//
// Every keyed record's (key, offset, tombstone) is indexed, sorted by key:
// the active segment's entries in an in-memory B-tree (memIndex), filled
// by the append leader before it publishes the high watermark (and rebuilt
// from the frames by recoverActive, whole batches only); when the segment
// rolls, that tree is written as the segment's run file (<base>.keys:
// checksummed ~4 KiB blocks of key groups, then a block index holding each
// block's first key; format in keyrun.go) and the tree is dropped. Runs are
// not fsynced: a missing, torn or checksum-failing run is rebuilt from its
// segment in the background (keyLoop), and ScanKeys fails with
// ErrIndexNotReady until it is, so change streams fall back to ordered
// scans. ScanKeys(prefix, end) merges one iterator per segment not wholly
// below the log start (a block index seek, then only the blocks under the
// prefix; the active tree is read a batch of keys per read lock) and yields
// each key once with its greatest offset below end. The cursor holds a
// reference on each segment, so reclamation never pulls a run from under
// it; a reclaimed segment's run goes with its other files.
//
// # Recovery (Open)
//
//   - *.deleted and *.tmp files anywhere are removed (interrupted deletions
//     and metadata writes); a topic directory without meta.json is an
//     interrupted creation (meta.json is written last, before any append)
//     and is removed; index files without their log are removed.
//   - Sealed segments (all but the last of a partition) are trusted: they
//     were fsynced when sealed (unless fsync is never). Their indexes are
//     loaded lazily and rebuilt if missing or inconsistent.
//   - The active (last) segment is scanned frame by frame and truncated
//     after the last complete batch: at the first short frame, impossible
//     length, CRC mismatch or offset that does not follow, and after a
//     final batch that lacks its batch-end frame. The truncation is
//     fsynced and the segment's indexes are rebuilt in memory.
//   - LSO = max(persisted log-start-offset, base of the first segment);
//     HW = the offset after the last recovered record. If the LSO is above
//     the HW (records lost in fsync mode interval after a persisted purge),
//     a new active segment starts at the LSO so offsets are never reused.
//
// # Appends and group commit
//
// Appends to a partition queue up: each caller, under the partition's wmu,
// reserves its offsets and encodes its batch into the shared group buffer
// (no per-record allocation). The first caller that finds no commit in
// progress becomes the leader: it takes the whole queue, writes it with one
// write per segment touched, fsyncs once (fsync mode always), indexes the
// frames, publishes the segment size and then the HW, wakes watchers, and
// releases every caller of the group. Callers arriving meanwhile form the
// next group, so N concurrent producers share each fsync. In mode interval a
// background task fsyncs dirty partitions every FsyncInterval; in mode
// never the OS decides. A failed write or fsync disables appends to that
// partition (the file state is unknown and the kernel may have dropped the
// dirty pages); reopening the store recovers from disk.
//
// # Reads
//
// Readers use pread on the segment files, never the write path's locks.
// They load the HW atomically, find the segment under the partition's read
// lock, take a reference on it, look up the index and scan forward through
// a pooled buffer, returning records below the HW only. Frames before the
// wanted offset are skipped by their offset field; every returned frame's
// CRC is checked and a mismatch is reported as ErrCorrupt (records before
// the damage are returned first). Returned records are copied out of the
// pooled buffer, so the caller owns them.
//
// # Purge and reclamation
//
//  1. DeleteRecordsBefore(o): o <= LSO is a no-op returning the LSO;
//     o > HW is ErrOffsetOutOfRange; otherwise o is written to
//     log-start-offset durably (unless fsync is never), then the LSO moves
//     and watchers wake. The cost is O(1): no segment is touched. From then
//     on reads below the LSO fail with ErrOffsetOutOfRange and
//     OffsetForTimestamp never answers below it.
//  2. The reclaimer (every ReclaimInterval, and woken by each purge) first
//     applies time retention: for topics with retention_ms >= 0 and a
//     cleanup policy including delete, the LSO moves (through step 1) to the
//     base of the first segment whose newest record is younger than
//     now - retention_ms; only sealed segments expire.
//  3. It then removes from the partition's list every segment whose
//     successor's base is <= LSO (so never the active segment, and never
//     the segment holding the LSO), renames its files to *.deleted and
//     drops the list's reference. The last reader to release the segment
//     closes it and unlinks the files. A crash in between leaves *.deleted
//     files that Open removes.
//
// DeleteTopic waits for in-flight appends, renames the topic directory to
// <id>.deleted (fsyncing the parent), removes it and wakes watchers; the
// name can be re-created at once with a new id.
//
// # Locks
//
// In acquisition order (a lock may be taken while holding those above it,
// never the reverse):
//
//	FileStore.mu        RW; the topic map and closed flag. Never held during I/O.
//	partition.lsMu      log start moves (purge, retention) and their persistence
//	partition.wmu       the append queue; wcond waits on it
//	partition.mu        RW; the segment list
//	segment.mu          one segment's file handle, indexes and deleted flag
//	memIndex.mu         leaf; the active segment's key index (RW)
//	notifier.mu         leaf; Watch channels
//
// The append leader holds none of these during its write and fsync (the
// leader flag, set under wmu, is what makes it the only writer). The HW and
// LSO are atomics: Bounds and the read fast path take no lock, and a purge
// never waits for an append or the reverse.
package logstore
