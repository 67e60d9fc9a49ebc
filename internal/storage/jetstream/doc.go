// Package jetstream holds what sharelog's NATS JetStream backends share:
// the names of streams, subjects and buckets, the classification of
// JetStream errors, and the few raw API requests the nats.go client does
// not offer in the form sharelog needs. The backends are in jslog (the
// partitioned log), jsstate (share-group state), jsoffsets (consumer
// groups' committed offsets) and jsusers (the SCRAM credentials of the
// Kafka listener), the three KV stores opening their buckets with
// BucketDefaults and OpenKV; jstest starts a real
// cluster for tests. docs/cluster.md is the operators' view.
//
// # Names
//
// Everything a sharelog deployment creates starts with its prefix (default
// "SL"), so two deployments can share one NATS account:
//
//	stream   <prefix>_<topicID>_<partition>   one per partition
//	subject  <prefix>.<topicID>.<partition>   the stream's only subject
//	bucket   <prefix>_META                    topic metadata (KV)
//	bucket   <prefix>_SHARE                   share-state snapshots (KV)
//	bucket   <prefix>_OFFSETS                 committed offsets (KV, jsoffsets)
//	bucket   <prefix>_USERS                   SCRAM credentials (KV, jsusers)
//
// The topic ID (a UUID, new for every creation) in the stream name makes a
// deleted and re-created topic a new stream. Names from users (topics,
// groups) appear in KV keys hex-encoded (HexKey), because KV keys allow
// only [-/_=.a-zA-Z0-9] and no empty tokens.
//
// # Errors
//
// ErrFenced is an append refused because another writer appended since
// this instance last knew the stream's end. Wrap turns everything else
// that is not the caller's own cancellation into the backend's storage
// sentinel (logstore.ErrStorage, jsstate.ErrStorage), keeping the NATS
// error reachable with errors.Is/As.
//
// This package and the backends link only the NATS client; the NATS server
// is linked by jstest alone, which only tests import.
package jetstream
