// Package jsoffsets is a groupoffsets.Store on a NATS JetStream KV bucket:
// the committed offsets of the Kafka listener's consumer groups in cluster
// mode (docs/consumer-groups.md "Cluster mode"). It passes
// groupoffsetstest.Run on a real 3-node cluster.
//
// # Layout
//
// The bucket <prefix>_OFFSETS (history 1, file storage, Options.Replicas
// replicas: --nats-replicas) holds one key per group,
//
//	g.<hex(group)>   {"e": term, "o": [offsets], "m": meta}
//	sync             empty: each read's mark (see Reads)
//
// where term is the lease revision of the instance that wrote it. A
// group's whole state is one value, so a Commit of many partitions is
// written all or none; a group left with no offsets and no meta has its
// key deleted. A value is bounded by the NATS max_payload (1 MiB by
// default: some ten thousand partitions per group); a write over it fails.
//
// # Reads
//
// Load and Adopt first write the key sync, then watch their keys and
// sync, and end once the watch has delivered its initial values and sync
// at that revision or later: the watch's consumer may sit on a follower
// that has not applied every acknowledged write yet, and the mark is
// where it has (jsstate's doc.go "Reads" tells the same argument).
//
// # Writes
//
// The store keeps each held group's image and the revision of its key as
// last read or written. A write computes the new image on a copy and
// writes it on condition of that revision (create-if-absent for no key);
// only once JetStream acknowledged it — stored by a quorum of the
// bucket's replicas, on disk with "jetstream { sync_interval: always }" —
// does the image change, so a write that returns an error changed nothing
// the store or its coordinator sees. A write that timed out may still
// have landed in the bucket: the next write of the group conflicts with
// it, finds it of this store's term and writes its image over it (the
// image the coordinator holds).
//
// # Fencing
//
// Load (unscoped) and Adopt (scoped) rewrite every key they read,
// unchanged but stamped with the reader's term, on condition of the
// revision read (reading again if it moved). So a coordinator that lost
// the group — the active instance before a failover, the group's
// previous lease holder — holds a revision that is stale, and its next
// write conflicts; reading the key it finds a newer term and fails with
// groupoffsets.ErrFenced, forgets the group and tells Options.OnFenced.
// A key of a newer term than the reader's fails Load and Adopt the same
// way. A conflict with a key of an older or the same term (a write whose
// answer was lost, or a late write of an older term between this term's
// read and its first write) is written over: the newest term wins, an
// older one never overwrites it. A group absent at the read is not
// fenced (creating a key for it would give every share group, which
// shares the lease, an offsets key); a late create of the older term is
// then overwritten by this term's first write.
//
// # Scoped mode
//
// In partitioned mode each instance coordinates the groups whose lease it
// holds: a store opened with Options.Scoped loads nothing and writes only
// groups adopted (Adopt, with the group lease's revision as the term) and
// not dropped (Drop, when the lease goes); a write of another group fails
// with ErrFenced. GroupIDs lists every group of the bucket, unmarked, for
// the placement of the groups over the instances.
//
// # Locks
//
// held.mu (one group's writes, held across its bucket write) -> Store.mu
// (the group table, a leaf). The coordinator already writes each group
// under its own lock, so held.mu is uncontended there.
package jsoffsets
