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
//	sync                                         empty: each read's mark (see Reads)
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
// # Reads
//
// Open's load, AdoptGroup and AdoptPartition read snapshots through a KV
// watch: an ordered consumer, R1, which nats-server places on any replica
// of the bucket's stream — a follower that has not yet applied writes a
// quorum acknowledged included — and whose initial values are that
// replica's. So each read first writes the key sync (its mark), then
// watches its keys and sync, and ends only once the watch has delivered
// the end of its initial values and sync at the mark's revision or later,
// applying what it delivers until then (a key deleted there is absent). A
// write acknowledged before the read precedes the mark in the stream, and
// a replica applies the stream in order, so the read holds every such
// write, at its latest revision or a later one. The cost is one write per
// read, and waiting for the watch's replica to catch up with the mark; a
// read that asked the stream's leader for the keys instead would cost one
// request per key. LiveGroup and GroupIDs read without a mark: a view
// milliseconds behind, not fenced.
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
// # Partition owners
//
// With Options.PartitionOwners (a scoped store only) a share-partition's
// state is held by the owner of its partition, whoever coordinates its
// group, as in Kafka; the group's coordinator holds only the group's key.
// Two scopes, adopted and dropped apart:
//
//   - AdoptGroup reads, fences and holds only g.<hex(group)>: the group's
//     epoch and config. DropGroup forgets only that revision and reports
//     the losses of the group's group-level entries (KindGroup,
//     KindGroupDelete).
//   - AdoptPartition reads, fences and holds p.*.<hex(topic id)>.<partition>:
//     that partition's share-partition of every group, returned without
//     the groups' configs. DropPartition forgets them and reports the
//     losses of the partition's share-partition entries.
//
// A key held is written on condition of its revision (create-if-absent
// when the bucket has none). A share-partition key of a partition not
// adopted is written create-if-absent and not held; a group key is
// written only when its group is adopted, or when the round has a
// group-level entry of the group (then, not adopted, create-if-absent and
// not held). So a round of share-partition entries alone writes no group
// key: the image makes their group up with no config, which would
// overwrite the coordinator's, or conflict with it. A KindGroupDelete of an
// adopted group deletes its key and the share-partition keys this store
// holds; the others are their owners'. Start deletes only keys held.
//
// A partition's handover is DropPartition on the old owner, then
// AdoptPartition on the new one, which sees everything the old one wrote;
// a group's is DropGroup, then AdoptGroup. The fence works both ways, key
// by key: a late write of the old owner after its DropPartition is a
// create, which fails with ErrConflict once the key exists; an owner that
// lost the partition without DropPartition holds old revisions, which the
// new owner's AdoptPartition made stale by rewriting every key it read.
// Unlike a group's handover, no group key is created first: a late write
// of a share-partition the bucket has no key of creates it (nobody read it).
// The new owner's own write of that key is then refused (ErrConflict), and
// Options.OnFenced tells it: it gives the partition up and adopts it again,
// reading the key the late write made.
//
// LiveGroup gives any instance a group's epoch and config from the group
// keys' watch, for the share-partitions it serves of groups it does not
// coordinate.
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
