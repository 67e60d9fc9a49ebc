// Package jstxn is a txnstate.Store on a NATS JetStream KV bucket: the
// Kafka transaction coordinator's state in cluster mode (docs/kafka.md
// "Transactions"). It follows the layout, reads and fencing of jsoffsets
// (the consumer groups' committed offsets), one key per transactional id
// instead of one per group.
//
// # Layout
//
// The bucket <prefix>_TXNS (history 1, file storage, Options.Replicas
// replicas: --nats-replicas) holds
//
//	t.<hex(transactional id)>   {"v": 1, "e": term, "t": {the id's record}}
//	sync                        empty: each read's mark (see Reads)
//
// where term is the lease revision of the instance that wrote it and the
// record is txnstate.Txn as JSON. A value of another version fails the
// read: the server refuses to guess which transactions were in flight.
//
// # Reads
//
// Load and Adopt first write the key sync, then watch their keys and sync,
// and end once the watch has delivered its initial values and sync at
// that revision or later, so that every acknowledged write is seen
// (jsoffsets' doc.go "Reads").
//
// # Writes
//
// The store keeps each held id's revision as last read or written; Put
// writes the record on condition of that revision (create-if-absent for
// no key) and returns once JetStream acknowledged it (a quorum of the
// bucket's replicas). A Put that returns an error changed nothing the
// coordinator sees; one that timed out may still have landed: the next
// Put of the id conflicts with it, finds it of this store's term and
// writes over it.
//
// # Fencing
//
// Load (unscoped) and Adopt (scoped) rewrite every key they read,
// unchanged but stamped with the reader's term, on condition of the
// revision read. So an instance that lost the id (the active instance
// before a failover, the id's previous lease holder) holds a stale
// revision, and its next Put conflicts; reading the key it finds a newer
// term and fails with txnstate.ErrFenced, forgets the id and tells
// Options.OnFenced. A key of a newer term than the reader's fails Load
// and Adopt the same way. Two instances can therefore never both write an
// id's state: every write is a compare-and-set, and an older term never
// overwrites a newer one.
//
// # Scoped mode
//
// In partitioned mode each instance coordinates the ids whose lease it
// holds: a store opened with Options.Scoped loads nothing and writes only
// ids adopted (Adopt, with the lease's revision as the term) and not
// dropped (Drop); a Put of another id fails with txnstate.ErrFenced.
//
// # Locks
//
// held.mu (one id's writes, held across its bucket write) -> Store.mu (the
// id table, a leaf). The coordinator already writes each id under its own
// lock, so held.mu is uncontended there.
package jstxn
