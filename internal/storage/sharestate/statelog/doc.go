// Package statelog is the file implementation of sharestate.Store: the
// share-state log in <data-dir>/sharegroups (docs/on-disk-layout.md). Only
// the server's wiring opens it; the share-group manager sees a
// sharestate.Store.
//
// # Format
//
// Files <Dir>/state-<generation>.log hold the magic "SLSGLOG1" and frames:
//
//	frame   = u32 length | u32 CRC32C(length ‖ payload) | payload   (big-endian)
//	payload = u8 type | key | u32 CRC32C(type ‖ key) | body         (uvarints)
//
// Types are the sharestate entry kinds — group (key: group; body:
// group_epoch, bit mask, set fields), group delete, share-partition delta
// (key: group, topic, topic ID, partition; body: SPSO, then ranges whose
// durable state to set), full share-partition state (same; replaces it),
// share-partition delete, share-partition offline (same key; body: why its
// state is lost; follows its full entry in a snapshot) — and the snapshot
// marker of a generation (type 6, file-only). Ranges are encoded relative
// to the previous one. The key has its own checksum so that a damaged
// frame can still be attributed to its group and share-partition.
//
// # Group commit and durability
//
// Write encodes the entry into one shared buffer under the log's lock and
// returns its ticket (the stream position after it); the caller's order is
// the log's. A single writer goroutine writes and fsyncs whatever
// accumulated, so every acknowledgement that arrived during an fsync shares
// the next one. Wait returns once the ticket is fsynced with fsync=always
// (an acknowledgement is reported only after it is durable), once it is
// written otherwise (interval: fsynced within the period; never: at
// Close).
//
// Write failures are scoped and not sticky. A write or fsync failure (a
// full disk, EIO) fails the entries in flight (Lost, Wait's error). The
// writer cuts the file back to the last good position (the end of the last
// whole write; the last fsynced position after an fsync failure) and the
// next batch re-validates the file (truncate, reopen if needed) and writes
// again, so once space is back writes succeed without a restart. The first
// success after a failure also triggers a compaction, which rewrites every
// group and share-partition in full.
//
// # Compaction
//
// When the newest file exceeds max(Options.CompactBytes, 4 × the last
// snapshot), the writer switches to a new generation at the current stream
// position; the compactor calls the owner's snapshot function (Start),
// which writes a full entry for every group and share-partition, appends a
// marker, fsyncs, and deletes older files. Start does the same after
// recovery, so disk use is O(live state). Older files are fsynced whole
// before a newer one is created, so only the newest can have a torn tail.
//
// # Manifest
//
// <Dir>/share-state.manifest (JSON and a CRC32C line, replaced atomically:
// temp, fsync, rename, fsync of the directory) records the generation
// recovery starts from, for each file from it a size the file is known to
// have reached durably (a checkpoint), and every share-partition with
// durable state (derived from the entries written: full and offline entries
// add one, deletes remove). It is rewritten after the fsync that makes a
// new share-partition durable (before its initialisation is reported),
// after every Options.CheckpointBytes of log, after each snapshot and at
// Close (whose checkpoint is the whole file). A missing manifest (a
// directory from before it) or a damaged one (moved to quarantine, ERROR)
// only means truncation cannot be detected at that start: recovery then
// trusts the files' checksums and writes a new one.
//
// # Recovery (Open)
//
// Recovery replays (sharestate.Image) from the manifest's base generation
// (without a manifest: from the newest file holding its own marker)
// through the newest file. In the newest file, past its checkpoint, a
// truncated frame, a bad frame with nothing readable after it, or zeros to
// the end is a torn tail (never acknowledged) and ends the log. Anything
// else is lost acknowledged state: a listed file missing, a file shorter
// than its checkpoint, a bad file header, or a bad entry before the tail
// (the reader skips it and resynchronises on the next frame whose checksum
// holds). Open never refuses to start for it: it logs an ERROR naming the
// groups and share-partitions affected — the damaged entry's when its key
// checksum holds, otherwise every share-partition of the log (from the
// files and the manifest) — and recovers exactly those share-partitions
// Offline, with a reason naming the problem and the repair. The owner
// writes the offline mark into every snapshot, so it survives restarts;
// the damaged files move to <Dir>/quarantine/<timestamp>/ after the
// startup snapshot (never deleted). Options.RepairShareState
// (--repair-share-state) accepts the loss: each affected share-partition
// keeps what was readable (or nothing), the drop is logged at WARN per
// share-partition, and the startup snapshot brings them online. See
// docs/operations.md for the operator's side.
//
// # Lifecycle and locks
//
// Open recovers, assesses damage and starts the writer (writes are
// accepted at once); Start writes the startup snapshot, quarantines and
// removes old files, writes the manifest and starts the compactor; Close
// stops the compactor (a compaction in progress finishes), flushes, fsyncs
// and closes the file and writes the final manifest. The log's lock
// (stateLog.mu) and the manifest's (Store.manMu) are leaves for callers;
// Store.manWrite serialises manifest writes and is taken with neither
// held. The snapshot function runs on the compactor's goroutine with no
// lock of this package held.
package statelog
