// Package sharegroup is the KIP-932 share-group domain of sharelog: share
// sessions and their epochs, the share-partition state machine, and the
// durable share state. The normative behaviour is
// /work/shared/spec/share-groups.md (section numbers below refer to it);
// api.go is the contract with internal/service, which translates protobuf
// to these types and maps Error.Reason and the per-partition ErrorCodes.
//
// # Model
//
// A Manager holds groups. A group has its config (fields explicitly set,
// persisted; the rest follow the server defaults in Options, also across
// restarts), its members and its share-partitions, one per (topic_id,
// partition) — bound to the topic ID, so a topic deleted and re-created
// under the same name starts afresh. Share sessions live in internal/sessioncache, keyed by
// (group, member); a session's State is its ordered fetch set and the
// share-partitions where it may hold records.
//
// # State machine (§1, §4, §5)
//
// A share-partition has SPSO (first non-terminal offset) and SPEO (last
// offset with state). Offsets in [SPSO, SPEO] are AVAILABLE, ACQUIRED,
// ACKNOWLEDGED or ARCHIVED with a delivery count; offsets after SPEO are
// implicitly AVAILABLE with count 0. Transitions:
//
//	AVAILABLE -> ACQUIRED      acquisition (count+1, owner, deadline)
//	AVAILABLE -> ARCHIVED      scan finds count >= limit, or no record there (compaction)
//	ACQUIRED  -> ACKNOWLEDGED  ACCEPT
//	ACQUIRED  -> ARCHIVED      REJECT, GAP; RELEASE or expiry at the limit
//	ACQUIRED  -> AVAILABLE     RELEASE or expiry below the limit (count kept)
//	ACQUIRED  -> AVAILABLE     the owner session ends (count-1: not charged)
//	ACQUIRED  -> ACQUIRED      RENEW (new deadline)
//
// After every change SPSO moves past leading terminal offsets and their
// state is dropped. Acknowledgements of one partition entry are checked in
// full before any applies (atomic per partition). A log start offset
// passing SPSO (§6.1) makes SPSO jump to it; AVAILABLE and terminal state
// below is dropped, ACQUIRED records move to a "below" list, still owned,
// until acknowledged (ARCHIVED) or expired. Log start moves and lock
// expiry are applied lazily at the start of every operation (prepare), so
// a deadline is authoritative the instant it passes; a timer per
// share-partition also fires at the earliest deadline, so expired records
// become acquirable and waiting fetches wake without any request.
//
// # Range representation (§12)
//
// [SPSO, SPEO] is a sorted, gap-free slice of runs; a run is a span of
// offsets with one state, count, owner and deadline (40 bytes). Operations
// split runs at the boundaries they touch, rewrite the runs in between in
// place, and merge equal neighbours, so acknowledging a uniform range costs
// O(log runs) to find plus O(runs touched), whatever its length, and
// acquiring N new records appends one run. Memory is O(runs), bounded by
// partition_max_record_locks, never O(log size). Acquisition reads the
// records it takes (to size them) under the share-partition's lock; the
// only per-record allocations on the fetch path are the log store's.
//
// # Fetch (§3)
//
// ShareFetch runs the steps of §3.2 in order. The long-poll (§3.4)
// evaluates; when short of min_bytes it registers a waiter on each of the
// session's share-partitions and re-evaluates on every signal (appends and
// log-start moves via logstore.Watch, releases, expiry, SPSO advance, config
// change, topic deletion) until max_wait. A min_bytes of 0 or 1 needs no
// dry run: it acquires directly and waits only if nothing came. Waiters
// are woken one at a time in arrival order (a baton, see waiters.go), so
// the oldest one chooses first. A record counts at least one byte toward
// min_bytes.
//
// # State log (§4.4, §7)
//
// Persisted: per group its existence, explicitly set config and
// group_epoch; per share-partition its topic, topic ID, SPSO and the
// durable image of [SPSO, SPEO] as ranges: ACKNOWLEDGED, ARCHIVED and
// AVAILABLE with count > 0. ACQUIRED is stored as AVAILABLE with the count
// before the acquisition, so sessions, locks and deadlines are never
// written, and a session's end or a restart returns records to their
// durable state with no write.
//
// Files <Dir>/state-<generation>.log hold the magic "SLSGLOG1" and frames:
//
//	frame   = u32 length | u32 CRC32C(length ‖ payload) | payload   (big-endian)
//	payload = u8 type | key | u32 CRC32C(type ‖ key) | body         (uvarints)
//
// Types: group (key: group; body: group_epoch, bit mask, set fields),
// group delete, share-partition delta (key: group, topic, topic ID,
// partition; body: SPSO, then ranges whose durable state to set), full
// share-partition state (same; replaces it), share-partition delete,
// share-partition offline (same key; body: why its state is lost; follows
// its full entry in a snapshot) and the snapshot marker of a generation.
// Ranges are encoded relative to the previous one. Each acknowledged
// partition entry is one delta with the SPSO after the advance; expiry,
// scan archivals and log-start moves write deltas without waiting;
// initialisation writes a full state and waits.
//
// Group commit: entries are encoded under the share-partition's lock (so a
// partition's entries are in the order they took effect) into one buffer; a
// single writer goroutine writes and fsyncs whatever accumulated, so every
// ack that arrived during an fsync shares the next one. With FsyncAlways an
// acknowledgement reports NONE only after its entry is fsynced; otherwise
// after it is written.
//
// Write failures are scoped and not sticky. A write or fsync failure (a
// full disk, EIO) fails the entries in flight: the waiting
// acknowledgements roll back and report KAFKA_STORAGE_ERROR, UpdateConfig
// and DeleteGroup fail with reason KAFKA_STORAGE_ERROR. The writer cuts
// the file back to the last good position (the end of the last whole
// write; the last fsynced position after an fsync failure) and the next
// batch re-validates the file (truncate, reopen if needed) and writes
// again, so once space is back writes succeed without a restart. A
// share-partition whose last entry was lost has an unknown durable state
// (a later delta's SPSO could presume the lost one): it is listed by
// Offline() and its next operation first writes and waits for a full-state
// entry (KAFKA_STORAGE_ERROR while that fails); other share-partitions
// are unaffected. The first success after a failure also triggers a
// compaction, which rewrites every group entry in full.
//
// Compaction: when the newest file exceeds max(Options.CompactBytes, 4 ×
// the last snapshot), the writer switches to a new generation at the
// current stream position; the compactor appends a full entry for every
// group and share-partition and a marker, fsyncs, and deletes older files.
// Open does the same after recovery, so disk use is O(live state). Older
// files are fsynced whole before a newer one is created, so only the
// newest can have a torn tail.
//
// Manifest: <Dir>/share-state.manifest (JSON and a CRC32C line, replaced
// atomically: temp, fsync, rename, fsync of the directory) records the
// generation recovery starts from, for each file from it a size the file
// is known to have reached durably (a checkpoint), and every
// share-partition with durable state. It is rewritten after the fsync that
// makes a new share-partition durable (before the initialisation is
// reported), after every 1 MiB of log, after each snapshot and at Close
// (whose checkpoint is the whole file). A missing manifest (a directory
// from before it) or a damaged one (moved to quarantine, ERROR) only
// means truncation cannot be detected at that start: recovery then trusts
// the files' checksums, as before, and writes a new one.
//
// Recovery replays from the manifest's base generation (without a
// manifest: from the newest file holding its own marker) through the
// newest file. In the newest file, past its checkpoint, a truncated frame,
// a bad frame with nothing readable after it, or zeros to the end is a
// torn tail (never acknowledged) and ends the log. Anything else is lost
// acknowledged state: a listed file missing, a file shorter than its
// checkpoint, a bad file header, or a bad entry before the tail (the
// reader skips it and resynchronises on the next frame whose checksum
// holds). Open never refuses to start for it: it logs an ERROR naming the
// groups and share-partitions affected — the damaged entry's when its key
// checksum holds, otherwise every share-partition of the log (from the
// files and the manifest) — and puts exactly those share-partitions
// offline: ShareFetch, ShareAcknowledge and the offsets admin calls answer
// KAFKA_STORAGE_ERROR on them with a message naming the problem and the
// repair, Offline() lists them, and nothing is redelivered from the lost
// state. The offline mark is written into the snapshot, so it survives
// restarts, and the damaged files move to <Dir>/quarantine/<timestamp>/
// (never deleted). Options.RepairShareState (--repair-share-state) accepts
// the loss: each affected share-partition keeps what was readable (or, if
// nothing was, starts afresh from auto_offset_reset), the drop is logged
// at WARN per share-partition, and a fresh snapshot brings them online.
// After replay, records that were ACQUIRED are AVAILABLE with their
// durable count, SPSO is clamped to the log start and share-partitions of
// deleted topics dropped.
//
// Unreadable records: when acquisition reads the log and gets a corrupt
// record error, the unreadable offsets (the range the error names through
// a CorruptRange() (first, last int64) method, else the single offset
// being read) are ARCHIVED, logged at ERROR and counted
// (Stats().UnreadableArchived); acquisition continues after them, so a
// damaged segment never wedges a share group.
//
// # Concurrency (§11) and lock order
//
// Each share-partition operation (an acquisition for one response, one
// partition entry's acks, an expiry, a session-end release, a log-start
// move, an initialisation) runs under sharePartition.mu, which makes it
// linearizable. Epoch admission is atomic in the session cache. A session
// end is ordered after any acquisition it raced with: an acquisition
// registers the share-partition in the session's held set under Session.Mu
// together with the "not ended" check, and the cache marks a session ended
// under Session.Mu before OnEnd releases its held share-partitions.
//
// Locks are taken in this order (a lock may be taken while holding those
// above it, never the reverse):
//
//	Manager.life (only to register calls; never held across work)
//	group.op                    (heartbeats, expiry, config, admin of one group)
//	sessioncache Cache.mu       (never held while calling out)
//	Manager.mu                  (group map)
//	group.mu
//	sharePartition.mu           (several at once only in (topic ID, partition) order)
//	Session.Mu                  (leaf, except below)
//	sharePartition.wmu          (waiters; may call logstore.Watch)
//	stateLog.mu                 (leaf)
//	Manager.topicsMu            (leaf)
//	Manager.manMu               (leaf; manifest bookkeeping)
//
// Manager.manWrite serialises manifest writes; it is taken with no lock
// held (the writer goroutine after an fsync, Open, the compactor, Close)
// and only stateLog.mu and manMu are taken under it.
//
// Only group.op holders lock several share-partitions at once (the
// assignor's initialisation, offsets alter/delete, group deletion), one
// group at a time, sorted; no other path holds two.
//
// Log-store calls happen under sharePartition.mu; the store's locks are
// leaves for this package. Durability waits (stateLog.wait) are made with
// no lock held, except initialisation (sharePartition.mu) and
// UpdateConfig (group.mu), which keep others from seeing an effect that
// may still fail; the writer needs no lock but stateLog.mu.
//
// # Membership and admin (§8, §9)
//
// membership.go: a group's members, group_epoch and target assignment live
// under group.op. Every change (join, leave, expiry, subscription change, a
// subscribed topic created, deleted or grown — looked up lazily at each
// heartbeat and describe) increments group_epoch once per call (persisted
// without waiting) and recomputes the target with the simple assignor
// (assignor.go), initialising its share-partitions durably first; members
// take the target and its epoch at their next heartbeat. A per-group timer
// removes members at their session deadline; every call of the group also
// applies passed deadlines first. Members, epochs of members and
// assignments are not persisted (§7).
//
// admin.go: list, describe, offsets describe/alter/delete and group
// deletion. DeleteShareGroup marks the group DEAD (no new share-partitions),
// writes its delete entry while holding every share-partition lock of the
// group (so no entry of the group can follow it in the log), then drops the
// share-partitions, unregisters the group and ends the sessions bound to it.
//
// # Lifecycle
//
// Open normalises Options (refusing defaults outside their bounds),
// recovers the state log, writes the startup snapshot and starts the
// writer, the compactor and the session sweeper. Calls register with
// enter/leave. Close stops new calls, wakes waiting fetches (they answer
// with no records), waits for calls in progress, ends every session
// (releasing their records), stops timers and watchers, and flushes,
// fsyncs and closes the state log.
package sharegroup
