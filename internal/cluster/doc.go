// Package cluster holds the ownership of a sharelog cluster on NATS
// JetStream (phase 1: one active instance, hot standbys).
//
// # The lease
//
// One key, "active", in the KV bucket <prefix>_LEASE (created with
// subject delete markers, so that expiry is decided by the stream leader
// through RAFT rather than by each replica's clock). Its value names the
// holder: instance ID and advertised gRPC address. The holder created the
// key with a per-message TTL of Options.TTL and renews it every TTL/4 by
// a compare-and-set publish (expected last subject sequence = the
// revision it holds, TTL again). The revision of the key is the owner
// epoch.
//
// An instance that does not hold the lease reads the key every TTL/4: a
// holder there makes it a standby that forwards to the holder's address;
// no key (never created, expired, or released) makes it try to create the
// key, and the one create that succeeds makes its instance active.
// A key whose revision has not changed for twice the TTL (its holder stopped
// renewing, and the expiry did not come) is deleted at exactly that
// revision and taken.
//
// # What the lease does not decide
//
// The TTL is garbage collection, not correctness: clocks can drift and a
// paused process can wake up believing it still holds the lease. The
// holder stops serving on its own when it has not renewed for TTL minus a
// margin, but what keeps a deposed holder from damaging anything is the
// fencing of every write it would make: appends carry the expected last
// sequence of the partition stream and share-state writes are
// compare-and-set on the revision last read. A fenced write tells the
// lease (Fenced), which drops the active state at once.
//
// # Members and per-item leases (phase 2)
//
// Every instance writes a heartbeat key, member.<hex ID>, in the same
// bucket every TTL/4 with a TTL of Options.TTL (Heartbeat, RunHeartbeat):
// its ID and gRPC and HTTP addresses. The live set is the keys that have
// not expired (Members).
//
// Items (partitions: PartitionItem, share groups: GroupItem) each have a
// lease key, item.<hex item>, created with the TTL and renewed by
// compare-and-set as the phase-1 lease is. Its value names the owner and,
// from the first renewal on, the epoch: the revision its term began at.
// Place computes, from the live set and the current owners alone, a
// balanced placement that moves as little as it can; Items.Step renews
// the held leases, hands over the items the placement moved away (the
// Release hook stops serving and flushes the item's state, then the key
// is deleted at exactly the revision held) and creates the keys of the
// free items placed on this instance (then the Acquired hook loads their
// state). An item leaves the held set before its hook runs, so it is
// released once per term; a new owner can only create the key after the
// old one deleted it or it expired.
package cluster
