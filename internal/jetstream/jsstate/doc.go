// Package jsstate is a sharestate.Store on a NATS JetStream KV bucket: the
// durable share-group state of sharelog's cluster mode. It passes
// sharestatetest.Run on a real 3-node cluster.
//
// # Layout
//
// The bucket <prefix>_SHARE (history 1, file storage, Options.Replicas
// replicas) holds one snapshot per group and per share-partition, JSON:
//
//	g.<hex(group)>                               group epoch and config
//	p.<hex(group)>.<hex(topic id)>.<partition>   SPSO, the state ranges, offline mark
//
// Where the file state log keeps a stream of entries and compacts it, the
// bucket keeps only the latest snapshot of each key, so it never needs
// compaction: Start's snapshot function is called once, at Start, and what
// it does not write is deleted from the bucket.
//
// # Group commit
//
// Write gives a ticket and queues the entry. One committer goroutine takes
// everything queued as one round: it replays the touched groups'
// snapshots, applies the round's entries with the replay rules of
// sharestate.Image, and writes each snapshot that changed once — so many
// acknowledgements of one share-partition that arrive while a round is in
// flight share one write in the next. The writes of a round run in
// parallel; the round settles its tickets when all have answered.
//
// # Fencing
//
// Every snapshot write is conditional on the revision this instance last
// read or wrote (create-if-absent for a new key). If another instance
// wrote the key since, the write fails with ErrConflict: the round's
// tickets are lost and this instance must stop serving (its ownership is
// gone). Snapshots of the same round written before the failure stay.
//
// # Durability and failures
//
// Wait returns once every snapshot write of the ticket's round has been
// acknowledged by JetStream — stored by a quorum of the bucket's replicas,
// which is on disk only when the servers run with
// "jetstream { sync_interval: always }" (docs/cluster.md). That is the
// "acknowledged only after durable" contract of sharestate.Store.
//
// A failed round (the cluster unreachable, a timeout, a refused write:
// ErrStorage; or ErrConflict) makes its tickets Lost and counts one
// failure; it is not sticky, the next round is written afresh. A crash of
// the sharelog process loses the rounds not yet written, none that Wait
// confirmed. A snapshot that cannot be decoded does not fail the open: its
// share-partition is recovered offline (its state is lost) and does not
// serve until repaired.
//
// Each round's work is proportional to the state of the groups it touches
// (their snapshots are replayed), not to the whole store.
package jsstate
