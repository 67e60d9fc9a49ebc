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
package cluster
