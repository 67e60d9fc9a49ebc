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
// readable offset, moved forward by purge and time retention). On a
// compacted topic (cleanup policy compact or compact,delete) the cleaner
// removes superseded records from sealed segments, so offsets there have
// gaps (see Compaction); offsets are never reused or renumbered.
//
// The topics by name are a Catalog (catalog.go), the same type in the file
// store, the memory store and the JetStream log: it holds the rules of
// CreateTopic, DeleteTopic, the lookups and Close (validation, one topic
// per name, a new ID per creation, the errors of an unknown or deleted
// topic), while persisting the catalog stays each store's (meta.json here).
//
// # Directory layout
//
//	<dir>/LOCK                                flock: one process per directory
//	<dir>/clean-shutdown                      written by Close, removed by Open
//	<dir>/quarantine/<UTC time>/<path>        what an Open could not explain (never deleted)
//	<dir>/topics/<topic-id>.tmp/              a topic being created (removed at Open)
//	<dir>/topics/<topic-id>/meta.json         name, id, partitions, config, "compacted"
//	<dir>/topics/<topic-id>/<p>/log-start-offset   decimal LSO (absent = 0)
//	<dir>/topics/<topic-id>/<p>/checkpoint         recovery checkpoint (below)
//	<dir>/topics/<topic-id>/<p>/cleaner-state      compaction: P and the first dirty offset
//	<dir>/topics/<topic-id>/<p>/<base>-<end>.cleaned  a cleaned segment being written
//	<dir>/topics/<topic-id>/<p>/<base>-<end>.swap     a cleaned segment replacing [base, end)
//	<dir>/topics/<topic-id>/<p>/%020d.log          segment; name = base offset
//	<dir>/topics/<topic-id>/<p>/%020d.index        sparse offset index (sealed segments)
//	<dir>/topics/<topic-id>/<p>/%020d.timeindex    sparse time index (sealed segments)
//	<dir>/topics/<topic-id>/<p>/%020d.keys         key-index run (sealed segments; keyrun.go)
//
// Zero-padded names sort in offset order. meta.json, log-start-offset and
// checkpoint are replaced atomically: write <name>.tmp, fsync, rename, fsync
// the directory. The active segment's indexes live in memory and are written
// (temp file, fsync, rename) when it is sealed; an index file ends with a
// CRC32C of its entries, and one that is missing, fails its checksum or is
// inconsistent is rebuilt from the log, so index files never need a
// directory fsync.
//
// AlterTopic makes the new partition directories (fsyncing the topic
// directory), then replaces meta.json; Open removes empty partition
// directories beyond the count meta.json records (an interrupted
// alteration, never acknowledged). meta.json's "compacted" says that the
// cleanup policy included compact at some time: sealed segments may then
// have offset gaps even after compaction was turned off.
//
// CreateTopic builds the topic under <id>.tmp (partition directories, then
// meta.json) and renames it to <id> last. A topic directory without a valid
// meta.json is therefore never an interrupted creation: it is damage, and
// Open quarantines it, while an <id>.tmp leftover (never acknowledged,
// holding no records) is removed.
//
// # Recovery checkpoint
//
// Each partition's checkpoint file is text, ended by a CRC32C line:
//
//	sharelog-partition-checkpoint 1
//	log_start <LSO when written>
//	high_watermark <HW: every offset below was on disk when written>
//	segment <base> <end> <bytes> <synced 0|1> <newest timestamp>   one per sealed segment above the LSO
//	crc32c <8 hex digits>
//
// It is rewritten at every roll (HW = the new active segment's base) and at
// a clean Close (HW = the final HW, every segment synced), and at Open when
// recovery changed something. A failure to write it is logged only: the old
// checkpoint stays valid (it covers less, and Open rescans the rest).
//
// # Record frame
//
// A segment is a sequence of frames. All integers are big-endian.
//
//	offset  size  field
//	0       4     body length B (u32; 29 <= B <= MaxRecordBytes-8)
//	4       4     CRC32C (Castagnoli) of the B body bytes
//	8       1     attributes: bit 0 = last record of its Append batch;
//	              bit 1 = the producer fields follow the headers;
//	              bit 2 = a transactional record (only with bit 1);
//	              bit 3 = a transaction marker (only with bit 2); other bits 0
//	9       8     offset (i64)
//	17      8     timestamp, ms since the Unix epoch (i64)
//	25      4     key length K (i32); -1 = nil key (keyless), 0 = empty key
//	29      K     key
//	        4     value length V (i32); -1 = nil value (tombstone), 0 = empty value
//	        V     value
//	        4     header count H (u32)
//	        H ×   { u32 key length, key bytes, i32 value length (-1 = nil), value bytes }
//	        8     with bit 1: producer id (i64, never 0)
//	        2     with bit 1: producer epoch (i16)
//	        4     with bit 1: the record's sequence number (i32)
//
// The producer fields are those of an idempotent producer's batch
// (Record.ProducerID, ProducerEpoch, Sequence; docs/produce.md): the log
// carries them so that the broker can rebuild each producer's last batches
// from the log after a crash or on another instance. A record without a
// producer has no such bytes, so frames written before they existed read
// the same. Bits 2 and 3 (Record.Transactional, Record.Control;
// docs/kafka.md "Transactions") are never set by a data directory that
// has seen no transaction, so older data directories read the same; a
// directory with them is not readable by a version without them (its
// frames would be judged damaged).
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
// # Key index (KeyIndexer)
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
// KeyIndexer is the whole index contract (scan, stats, segment ends,
// ReadEntry by the file position a cursor entry carries, CountKeys from the
// block indexes); FileStore and MemStore implement it and pass
// logstoretest.RunKeyIndex. Users receive the index explicitly
// (changestream.New), never by asserting it on a Store, so the server can
// hand them a wrapped (traced) index.
//
// # Recovery (Open)
//
// Open never deletes what it cannot explain. Only what sharelog itself
// marked disposable is removed: *.deleted and *.tmp files and directories
// (interrupted deletions, metadata writes and topic creations) and index
// files whose log is gone. Anything else unexpected — a topic directory
// without a valid meta.json or whose meta.json names another id, a file
// among the topics, an unknown file or badly named segment in a partition
// directory — is moved to <dir>/quarantine/<UTC time of the Open>/<its path
// relative to dir> with an ERROR naming both paths and what to do (see
// docs/operations.md).
//
// Open notes whether <dir>/clean-shutdown exists (the last run ended with
// Close) and removes it, durably, before anything is written. Then, per
// partition, it first finishes what compaction left: *.cleaned files are
// removed and *.swap files completed (see Compaction); then, before any
// other file is changed:
//
//   - A missing partition directory is not recreated (that would restart
//     offsets at 0): the partition is offline.
//   - The log-start-offset file must parse to 0 <= LSO <= 2^62, and must
//     not be missing or below the checkpoint's log start.
//   - Every segment in the checkpoint that is not wholly below the LSO
//     (reclamation may have removed those) must exist with the recorded
//     size; each segment must end where the next begins (the checkpoint's
//     end, or the scan's); the first segment must start at or below the
//     LSO. A missing first, middle or last segment, or a truncated one, is
//     caught here. (A sealed segment of a compacted topic may end before
//     the next one starts: its last records were superseded.)
//   - Sealed segments (all but the last) the checkpoint lists are trusted:
//     they were fsynced when sealed or at a clean Close. Their indexes are
//     loaded lazily, checked against the checkpoint's newest timestamp, and
//     rebuilt if missing or damaged. Sealed segments the checkpoint does
//     not list (sealed since it was written, or a store written before
//     checkpoints existed) and, after an unclean shutdown, those it lists
//     as not synced are rescanned: every frame's length, CRC and offset.
//     Damage with valid frames after it is logged (ERROR, with the
//     offsets) and left to reads to report; a segment whose valid frames
//     stop before the next segment's base has lost records, and the
//     partition goes offline.
//   - The active (last) segment is scanned frame by frame and truncated
//     after the last complete batch: at the first short frame, impossible
//     length, CRC mismatch or offset that does not follow, and after a
//     final batch that lacks its batch-end frame — unless that would cut
//     below the checkpoint's high watermark (records known to be on disk):
//     then the partition goes offline instead. The truncation is fsynced
//     and the segment's indexes are rebuilt in memory.
//   - HW = the offset after the last recovered record. If the LSO is above
//     the HW, that is damage after a clean shutdown or in fsync mode
//     always (offline); after a crash in mode interval or never it is
//     records lost after a persisted purge, and a new active segment (file
//     created at once) starts at the LSO so offsets are never reused.
//
// Fsync modes never and interval: sealed segments are fsynced at roll in
// mode interval (as in always), not in mode never; instead, never-mode
// segments are marked not synced in the checkpoint and rescanned after an
// unclean shutdown, and a clean Close fsyncs them before writing the
// checkpoint and the clean-shutdown marker.
//
// # Offline partitions
//
// A partition whose files fail the checks above is offline: its files are
// left exactly as they are, it holds no open file, and every call on it
// (Append, Read, Bounds, OffsetForTimestamp, Watch, DeleteRecordsBefore,
// key scans) fails with an error wrapping ErrOffline whose message names the
// file and the problem. The rest of the store, including the other
// partitions of the same topic, works normally; DeleteTopic still removes
// it. FileStore.Offline lists offline partitions (and failing ones, below)
// for readiness. An operator repairs the named file (or deletes the topic)
// and restarts; a damaged checkpoint can be moved away, which makes the
// next Open rescan every segment and write a new one.
//
// # Damaged records
//
// A read that meets a damaged frame (impossible length, CRC mismatch,
// malformed body, or an offset that does not follow) resynchronises: it
// searches forward, byte by byte, for the next frame that is whole, passes
// its CRC and carries an offset between the expected one and the segment's
// end. The frames in between are unreadable: the read fails with a
// *CorruptError (errors.Is ErrCorrupt) whose From and To are the first and
// last unreadable offsets (To is the segment's last offset if no valid
// frame follows), after returning the records before the damage. A read
// starting after To skips the damage and succeeds. Share groups archive
// From..To; an operator can purge to To+1. Sealed segments remember the
// damaged stretches they found; index and key-index rebuilds step over
// them the same way, so later records stay indexed.
//
// segment_ms: the append leader rolls a non-empty active segment before
// its group when the segment was made (or found at Open) segment_ms ago
// or more, by the store's clock.
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
// never the OS decides.
//
// Writes and fsyncs do not overlap, on purpose. A pipelined commit (the
// next group written to the page cache while the previous group's
// fdatasync runs, acknowledged after an fsync started after its write) was
// built and measured on the 2-core development VM: a group's write there
// takes a tenth to a quarter of its fdatasync, so there was little to hide,
// while the pipeline made more and smaller fsync groups and more handoffs
// between goroutines. Durable produce through gRPC came out within the
// run-to-run noise (throughput and ack p99 at 1, 4 and 16 producers) and
// the store alone was slower at 16 producers, so the simpler commit stays.
// Measure again before reviving it on a disk whose writes are slow next to
// its flushes.
//
// # Storage errors
//
// Every write, fsync, create, rename, open and truncate of the store's files
// goes through one seam (storageFS in storage.go): a failure is returned
// wrapping ErrStorage (the *os.PathError and errno stay reachable with
// errors.As) and reported to Options.OnStorageError. Tests inject faults
// through the same seam.
//
// A commit's pieces become visible in order: a piece is indexed and the HW
// moved past it only once it is written (and, per the fsync mode, synced),
// and the active segment's write position only moves then. When a write,
// fsync or roll fails, the requests already committed succeed, the rest of
// the group — and the requests queued behind it, whose frames were encoded
// at the following offsets — fail with ErrStorage, and offsets are reserved
// again from the HW, so they stay dense. The partition is marked failing
// (FileStore.Offline) and the next leader first repairs: it truncates the
// active segment to its write position (reopening the file if its handle
// is what failed) and syncs it, then writes. A roll creates the new segment
// first and seals the old one only after, so a failed roll leaves the old
// segment active and intact. Once space or descriptors are back the next
// append succeeds without a restart; the reclaimer also probes failing
// partitions (repair, then write and sync a small probe.tmp file), so that
// readiness recovers even if no client retries. A failed log start write
// (purge) leaves the LSO unchanged; a failed CreateTopic removes its <id>.tmp
// directory. Reads do not take the write path and keep working.
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
//     now - retention_ms; only sealed segments expire. Then size
//     retention (retention_bytes > 0, same policies): the LSO moves past
//     the oldest sealed segments while the partition, without the next
//     one, would still hold at least retention_bytes.
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
// # Compaction (compact.go; docs/compaction.md)
//
// A background cleaner (one goroutine, every Options.CompactionInterval,
// throttled to Options.CompactionMaxBytesPerSec of reads plus writes)
// visits each partition of each compacted topic. Its cleanable range is
// every sealed segment not wholly below the LSO, never the active one; the
// dirty part is what lies past the first dirty offset (cleaned_through).
// When dirty bytes / cleanable bytes exceed min_cleanable_dirty_ratio, or
// a tombstone the last full pass kept has become removable (tombsDue, in
// memory only), it builds a map key → latest offset from the dirty part (bounded: the part
// is cut at a segment boundary past maxCleanerKeys keys), then rewrites the
// range in offset order, in groups of consecutive segments whose current
// sizes add up to at most segment_bytes (merging small cleaned segments).
// A rewritten group keeps the raw frames of the records it keeps, at their
// offsets, and drops a record when the map holds a later offset for its key,
// and a tombstone that is the latest of its key when its segment's newest
// timestamp is older than now - delete_retention_ms. Keyless records
// (refused on append, but possibly older than the policy) are kept. After
// the last group, cleaned_through moves to the end of the dirty part:
// moving it earlier would, after a crash between two groups, let a later
// pass drop a tombstone while an uncleaned older value of its key
// survives. A range holding damaged records is not rewritten (the
// partition is skipped until restart).
//
// P, the greatest offset of a tombstone dropped while it was the latest
// of its key (-1: none), is persisted in cleaner-state, then published
// (PartitionInfo.PurgedTombstonesBelow = P+1) and watchers woken, before
// the group without it is listed, so a change stream that needed it always
// learns of it. Superseded tombstones do not count: their key's later
// record is still there.
//
// Swap protocol for a group replacing the segments based in [base, end):
//
//  1. write <base>-<end>.cleaned, fsync it (durable modes);
//  2. persist P if it rises (cleaner-state, atomically);
//  3. rename to <base>-<end>.swap, fsync the directory;
//  4. under partition.mu, replace the group in the segment list by the new
//     segment (aborting if reclamation or shutdown changed the list), then
//     rewrite the checkpoint, which now lists [base, end) with the new size
//     (if that fails the old segments go back and the swap is dropped);
//  5. rename the old segments' files to *.deleted (unlinked when their last
//     reader lets go) and the swap file to <base>.log, fsync the directory;
//  6. write the new segment's index files and key-index run.
//
// Recovery: a *.cleaned file was never visible and is removed (the old
// segments are intact). A *.swap file is complete: every segment file
// based in [base, end) is removed and it is renamed to <base>.log.
// Checkpoint entries in [base, end) are then dropped (and the segment
// rescanned) unless the checkpoint was written after step 4 and names the
// new segment with its size. Reads, index rebuilds and rescans accept
// increasing offsets with gaps in every sealed segment of a compacted
// topic (segment.sparse) and in segments the cleaner wrote. A reader
// holding an old segment keeps reading it; a key-index cursor pins the
// versions it opened, and ReadEntry reads the version the entry came from,
// so an OSO snapshot is unaffected by a swap during it.
//
// # Locks
//
// In acquisition order (a lock may be taken while holding those above it,
// never the reverse):
//
//	FileStore.alterMu   AlterTopic and DeleteTopic, one at a time (held during
//	                    their I/O; never taken by a background task)
//	FileStore.cleanMu   one cleaning pass at a time (held during its I/O)
//	Catalog.mu          RW; FileStore.topics: the topic map, the names being
//	                    created and the closed flag. Never held during I/O.
//	partition.lsMu      log start moves (purge, retention) and their persistence
//	partition.ckMu      checkpoint writes (append leader at roll, cleaner, Close)
//	partition.wmu       the append queue; wcond waits on it
//	partition.mu        RW; the segment list
//	segment.mu          one segment's indexes and deleted flag; serialises
//	                    the opening of its file
//	memIndex.mu         leaf; the active segment's key index (RW)
//	notifier.mu         leaf; Watch channels
//	fdCache.mu          leaf; the open segment files (fdcache.go), never
//	                    held while a file is opened or closed
//
// # Open files
//
// Segment log files are opened on demand and kept in an LRU cache bounded
// by Options.MaxOpenSegments (fdcache.go): each use pins the file (a read
// of one segment, one group commit's write and fsync, one compaction
// step), idle files beyond the bound are closed and opened again, by path,
// when next used. An opener that finds every cached file pinned waits for
// one to be released, at most maxSlotWait, and then opens beyond the
// bound. A cleaned segment stays pinned until it is renamed to its final
// name, since until then its path names the segment it replaces.
//
// The append leader holds none of these during its write and fsync (the
// leader flag, set under wmu, is what makes it the only writer). The HW and
// LSO are atomics: Bounds and the read fast path take no lock, and a purge
// never waits for an append or the reverse.
package logstore
