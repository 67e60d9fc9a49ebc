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
// # Scoped mode
//
// When several sharelog instances serve one cluster, each share group is
// coordinated by one of them — the instance holding the group's lease —
// which must read and write only that group's snapshots. A store opened
// with Options.Scoped reads nothing at Open (Recovered is empty) and owns
// no group until it adopts one:
//
//   - AdoptGroup reads one group's keys (g.<hex(group)> and
//     p.<hex(group)>.>) with the decoding rules of Open, returns its state
//     and makes the group's writes conditional on the revisions read.
//   - DropGroup waits until the entries written before it are settled,
//     reports whether any of the group's was lost, and forgets the
//     group's revisions.
//   - GroupIDs lists every group of the bucket, whoever coordinates it.
//
// A handover is DropGroup on the old coordinator, then AdoptGroup on the
// new one, which sees everything the old one wrote. Fencing covers the
// rest: a write of the old coordinator after its DropGroup creates the
// group's keys if absent and fails with ErrConflict when they exist (the
// group key is created before any share-partition key of the round, so a
// fenced round adds no key either); an instance that lost the group without
// DropGroup is fenced key by key, as described under Fencing: AdoptGroup
// rewrites every key it read, unchanged and on condition of the revision
// read (reading again if one changed meanwhile), so no write of the
// previous coordinator can land after the adoption's read. Start deletes
// only snapshots of groups the store adopted or wrote: those of other
// instances' groups are never touched.
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
