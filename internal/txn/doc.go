// Package txn is the Kafka transaction coordinator (docs/kafka.md
// "Transactions"): transactional ids with their producer id and epoch
// (InitProducer, which fences the id's older producers by bumping the
// epoch and aborts their open transaction), the partitions and groups of
// each id's open transaction (AddPartitions, AddOffsets), the offsets it
// commits (TxnOffsetCommit, held here until the commit), its end
// (EndTxn: the state is made durable as PrepareCommit or PrepareAbort,
// then the broker writes a marker on every partition of the transaction,
// then the offsets are committed to the consumer groups, then the state
// is CompleteCommit or CompleteAbort), and the abort of a transaction open
// longer than its timeout.
//
// The state lives in a txnstate.Store: the data directory's
// transactions.json on a single node, the cluster KV (jstxn) in
// active-standby cluster mode, where the active instance coordinates every
// id and a write the store refuses as fenced (txnstate.ErrFenced: a newer
// active took over) answers NOT_OWNER. After a crash or a failover, New
// completes every transaction that was being ended (writing a marker is
// idempotent: a partition without an open transaction of the producer
// gets none, and committing the same offsets twice changes nothing), and
// an open one is aborted when its timeout passes, counted from its
// durable start time.
// So a transaction is never half-visible to a read-committed reader: its
// records are behind the partition's last stable offset until its marker
// is written, and a commit marker is written only once the commit was
// durably decided.
//
// # Concurrency and lock order
//
// Each transactional id's calls are serialised by its entry's op lock,
// held across the state's writes and the broker's marker writes;
// Coordinator.mu guards the id table and each entry's state and is a leaf
// (never held during I/O). So: entry.op -> the broker's and the
// consumer-group coordinator's locks, and entry.op -> Coordinator.mu.
// Neither the broker nor the consumer groups call into this package.
package txn
