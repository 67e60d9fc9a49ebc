// Package sharegroup is the KIP-932 share-group domain of sharelog: share
// sessions and their epochs, the share-partition state machine, membership
// and admin, over a durable share-state store (sharestate.Store, given to
// Open). docs/share-sessions.md describes the client-visible behaviour and
// docs/errors.md the reasons; api.go holds the request and response types
// internal/transport/grpcapi translates protobuf to. Request-level errors are
// *apierr.Error values; per-partition outcomes are apierr.Reasons
// (apierr.None for success), whose Kafka codes the protos' ErrorCode numbers.
//
// # Files
//
//	manager.go          Manager, groups, Open/load/Close, topic identity, config, snapshot
//	partition.go        the share-partition: durable writes, time and the log, initialisation, session end
//	acquisition.go      acquisition: scan, take, commit
//	keyorder.go         key ordering's index, redelivery backoff and delayed delivery (docs/queues.md)
//	acknowledgement.go  acknowledgement: check, apply, roll back
//	runs.go             the range representation
//	fetch.go            ShareFetch: sessionStep, steps 3–7, long-poll
//	ack.go              ShareAcknowledge and the acknowledgement step with its group-committed wait
//	waiters.go          waiting fetches
//	deadletter.go       dead-letter topics: the copy worker and its recovery
//	membership.go, assignor.go, admin.go, config.go, validate.go, reliability.go
//	metrics.go          per-share-partition counters and the scrape-time Metrics snapshot
//	inflight.go         DescribePartitionState: the in-flight ranges, for admins and the console
//	owners.go           share-partitions at their partition's owner; owned-only admin answers
//	route.go            a cluster's routing: calls at the group's coordinator, the owners' answers merged
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
// # State machine
//
// A share-partition has SPSO (first non-terminal offset) and SPEO (last
// offset with state). Offsets in [SPSO, SPEO] are AVAILABLE, ACQUIRED,
// ACKNOWLEDGED, ARCHIVING or ARCHIVED with a delivery count; offsets after SPEO are
// implicitly AVAILABLE with count 0. Transitions:
//
//	AVAILABLE -> ACQUIRED      acquisition (count+1, owner, deadline)
//	AVAILABLE -> ARCHIVED      scan finds count >= limit (*), or no record there (compaction)
//	ACQUIRED  -> ACKNOWLEDGED  ACCEPT
//	ACQUIRED  -> ARCHIVED      REJECT (*), GAP; RELEASE or expiry at the limit (*)
//	ACQUIRED  -> AVAILABLE     RELEASE or expiry below the limit (count kept)
//	ACQUIRED  -> AVAILABLE     the owner session ends (count-1: not charged)
//	ACQUIRED  -> ACQUIRED      RENEW (new deadline)
//	ARCHIVING -> ARCHIVED      the dead-letter copy was made (or cannot be)
//
// (*) In a group with a dead-letter topic these go to ARCHIVING instead
// (count kept), see "Dead-letter topics".
//
// After every change SPSO moves past leading terminal offsets and their
// state is dropped. Acknowledgements of one partition entry are checked in
// full before any applies (atomic per partition). A log start offset
// passing SPSO makes SPSO jump to it; AVAILABLE and terminal state
// below is dropped, ACQUIRED records move to a "below" list, still owned,
// until acknowledged (ARCHIVED) or expired. Log start moves and lock
// expiry are applied lazily at the start of every operation (prepare), so
// a deadline is authoritative the instant it passes; a timer per
// share-partition also fires at the earliest deadline, so expired records
// become acquirable and waiting fetches wake without any request.
//
// # Dead-letter topics (KIP-1191; docs/dead-letter-topics.md)
//
// ARCHIVING is durable (sharestate.Archiving, with its count), not
// terminal (SPSO stops at it, lag counts it), never acquired or
// acknowledged. Whoever creates ARCHIVING records hands the share-partition
// to the Manager's dlqWorker (add; a leaf lock and a non-blocking kick),
// whose goroutine makes the copies with no lock of this package held:
//
//  1. under mu: collect up to 500 ARCHIVING offsets, the dead-letter topic
//     and the last ticket; release mu; Wait(ticket) — the ARCHIVING state
//     is durable before any copy exists, so a crash before this point
//     redelivers the record (durably AVAILABLE) and nothing was copied;
//  2. read the source records and append their copies to partition
//     (source partition mod N) of the dead-letter topic in one Append;
//  3. under mu: the offsets still ARCHIVING become ARCHIVED (a background
//     delta), SPSO advances.
//
// A crash between 2 and 3 leaves the records ARCHIVING at Open, and a
// failed Append leaves its outcome unknown: both set dlqCheck, and the next
// pass first reads the whole dead-letter partition for copies of the
// group's records (their dlq.group and dlq.source.* headers) and appends
// only the missing ones; so every record is copied exactly once. A failed
// pass is retried with backoff and the records stay ARCHIVING (nothing
// lost). As Kafka, a dead-letter topic that does not exist (without
// --dlq-auto-create-topics), a dead-letter topic cleared from the config,
// or a source record that is gone make the pass archive without a copy,
// logged and counted (Stats().DeadLetterSkipped). One worker pass runs at
// a time (dlqWorker.pass), so no two passes copy the same records.
//
// # Range representation
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
// # Fetch
//
// ShareFetch runs its steps in order (see Manager.ShareFetch). The long-poll
// evaluates; when short of min_bytes it registers a waiter on each of the
// session's share-partitions and re-evaluates on every signal (appends and
// log-start moves via logstore.Watch, releases, expiry, SPSO advance, config
// change, topic deletion) until max_wait. A min_bytes of 0 or 1 needs no
// dry run: it acquires directly and waits only if nothing came. Waiters
// are woken one at a time in arrival order (a baton, see waiters.go), so
// the oldest one chooses first. A record counts at least one byte toward
// min_bytes.
//
// # Durable state
//
// The Manager persists through a sharestate.Store (the file state log,
// internal/storage/sharestate/statelog, in the server; sharestate.Mem in tests):
// per group its existence, explicitly set config and group_epoch; per
// share-partition its topic, topic ID, SPSO and the durable image of
// [SPSO, SPEO] as ranges: ACKNOWLEDGED, ARCHIVED, ARCHIVING (with its
// count) and AVAILABLE with count > 0. ACQUIRED is stored as AVAILABLE with the count before the
// acquisition, so sessions, locks and deadlines are never written, and a
// session's end or a restart returns records to their durable state with
// no write. Nothing here knows how or where the store keeps it.
//
// Each acknowledged partition entry is one delta entry with the SPSO after
// the advance; expiry, scan archivals and log-start moves write deltas
// without waiting; initialisation writes a full state and waits. Entries
// are written under the share-partition's lock (so a partition's entries
// are in the order they took effect); the store group-commits them, and a
// call waits once for its last ticket (Store.Wait), so concurrent
// acknowledgements share an fsync. With the file store in fsync=always an
// acknowledgement reports NONE only after its entry is durable.
//
// Write failures are scoped and not sticky: a failed entry (Store.Lost)
// rolls its acknowledgements back with KAFKA_STORAGE_ERROR; UpdateConfig
// and DeleteGroup fail with reason KAFKA_STORAGE_ERROR. A share-partition
// whose last entry was lost has an unknown durable state (a later delta's
// SPSO could presume the lost one): it is listed by Offline() and its next
// operation first writes and waits for a full-state entry
// (KAFKA_STORAGE_ERROR while that fails); other share-partitions are
// unaffected.
//
// Snapshots: Open loads Store.Recovered(), settles it against the log
// (share-partitions of deleted topics dropped, SPSO clamped to the log
// start, records that were ACQUIRED AVAILABLE with their durable count),
// then Store.Start(writeSnapshot); the store calls writeSnapshot again
// whenever it compacts. writeSnapshot writes every group and live
// share-partition in full, and the offline mark of offline ones, taking
// the same locks as the writers, so it never misses an entry written
// before it.
//
// Offline share-partitions: a share-partition the store recovered Offline
// (its acknowledged state lost; see statelog for how damage is found and
// --repair-share-state) answers KAFKA_STORAGE_ERROR to ShareFetch,
// ShareAcknowledge and the offsets admin calls with the store's message
// (naming the problem and the repair), is listed by Offline(), and nothing
// is redelivered from the lost state.
//
// Unreadable records: when acquisition reads the log and gets a corrupt
// record error, the unreadable offsets (the range the error names through
// a CorruptRange() (first, last int64) method, else the single offset
// being read) are ARCHIVED, logged at ERROR and counted
// (Stats().UnreadableArchived); acquisition continues after them, so a
// damaged segment never wedges a share group.
//
// # Concurrency and lock order
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
//	share-state store           (Store.Write; its locks are leaves)
//	Manager.topicsMu            (leaf)
//	dlqWorker.mu                (leaf; dlqWorker.pass is taken with no lock held)
//
// The store calls writeSnapshot from its own goroutine with none of its
// locks held; writeSnapshot takes group.mu and sharePartition.mu as the
// writers do.
//
// Only group.op holders lock several share-partitions at once (the
// assignor's initialisation, offsets alter/delete, group deletion), one
// group at a time, sorted; no other path holds two.
//
// Log-store calls happen under sharePartition.mu; the store's locks are
// leaves for this package. Durability waits (Store.Wait) are made with
// no lock held, except initialisation (sharePartition.mu) and
// UpdateConfig and DeleteGroup (group.mu, share-partition locks), which
// keep others from seeing an effect that may still fail; the store's
// writer takes no lock of this package.
//
// # Membership and admin
//
// membership.go: a group's members, group_epoch and target assignment live
// under group.op. Every change (join, leave, expiry, subscription change, a
// subscribed topic created, deleted or grown — looked up lazily at each
// heartbeat and describe) increments group_epoch once per call (persisted
// without waiting) and recomputes the target with the simple assignor
// (assignor.go), initialising its share-partitions durably first; members
// take the target and its epoch at their next heartbeat. A member id is
// bound to the principal that first used it (by heartbeat or session),
// in the session cache, while the member or its session exists; another
// principal gets UNKNOWN_MEMBER_ID (heartbeat) or SHARE_SESSION_NOT_FOUND
// (ShareFetch, ShareAcknowledge) and changes nothing. A per-group timer
// removes members at their session deadline; every call of the group also
// applies passed deadlines first. Members, epochs of members and
// assignments are not persisted.
//
// admin.go: list, describe, offsets describe/alter/delete and group
// deletion. DeleteShareGroup marks the group DEAD (no new share-partitions),
// writes its delete entry while holding every share-partition lock of the
// group (so no entry of the group can follow it in the log), then drops the
// share-partitions, unregisters the group and ends the sessions bound to it.
//
// # Lifecycle
//
// Open normalises Options (refusing defaults outside their bounds), loads
// the store's recovered state, has the store write its startup snapshot
// and start its background work, and starts the session sweeper; it owns
// the store from then on (a failed Open closes it). Calls register with
// enter/leave. Close stops new calls, wakes waiting fetches (they answer
// with no records), waits for calls in progress, ends every session
// (releasing their records), stops timers and watchers, and closes the
// store (flushed and durable).
package sharegroup
