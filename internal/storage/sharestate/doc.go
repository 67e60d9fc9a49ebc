// Package sharestate is the storage-neutral contract of durable share-group
// state: the Store interface the share-group manager (internal/sharegroup)
// writes its state through, the entry and state types, and Image, the
// replay of an entry stream into a State that every implementation uses.
//
// # Model
//
// Persisted per group: its existence, its explicitly set config and its
// group_epoch; per share-partition (group, topic, topic ID, partition): its
// SPSO and the durable image of its in-flight window as ranges —
// ACKNOWLEDGED, ARCHIVED, and AVAILABLE with a delivery count > 0.
// ACQUIRED is never stored (it is AVAILABLE with the count before the
// acquisition), nor are sessions, members, locks or deadlines. A
// share-partition may also be marked offline: its durable state was found
// lost, and it must not serve until a repair.
//
// Entries (Kind): group, group delete, share-partition delta (SPSO and the
// ranges whose state to set), full share-partition state (replaces it),
// share-partition delete (uninitialised again) and share-partition
// offline. Replay: a delta applies on top of the live state (a delta with
// no live state before it starts one), SPSO only moves forward and drops
// what lies below it, a terminal range at SPSO moves SPSO past it, and a
// full entry replaces everything.
//
// # Contract
//
// See Store: tickets in write order, Wait with the durability an
// acknowledgement needs, Lost and Failures for scoped, non-sticky write
// failures, Recovered with offline marks, Start with a snapshot function
// the store calls for its startup snapshot and every compaction, Close.
// sharestatetest.Run checks every implementation against it.
//
// # Implementations
//
// internal/storage/sharestate/statelog: the file state log (the server's). Mem (this
// package): in memory, every write durable at once, with a medium that
// outlives its stores and can crash or fail writes; for tests and as the
// reference implementation, never for production.
package sharestate
