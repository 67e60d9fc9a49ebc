// Package datadir keeps the data directory's manifest, manifest.json at
// the root of --data-dir: what the directory holds (every topic with its
// partition count and each partition's last known high watermark, and the
// share-partitions that have durable share state), recorded in a second
// place besides the files themselves. At start it lets the stores tell a
// part that was lost (topics/ or sharegroups/ deleted, a partition's last
// segments and checkpoint deleted) from one that never existed, so that a
// loss is an ERROR with the affected items offline instead of a silent
// fresh start that reuses offsets or redelivers accepted records.
//
// Format (docs/on-disk-layout.md): one JSON object, with version, the
// creation time, topics (id, name, partitions, high_watermarks) and
// share_state (share_partitions), and a crc32c field: the CRC32C of the
// JSON of the same object with the crc32c field empty. It is replaced
// atomically (temp file, fsync, rename, fsync of the directory).
//
// What it records is a lower bound of what is durable: a topic is added
// once its directory is durable and removed before its directory is
// deleted; a high watermark is raised at a segment roll (the sealed
// segment is synced first), after recovery and at a clean shutdown, never
// on the append path. A SIGKILL between a change and its manifest write
// therefore leaves the manifest behind the directory, never ahead of it,
// and cannot take anything offline falsely.
//
// Lifecycle: Open reads the manifest (a missing one — a new directory or
// one from an older version — or a damaged one, moved to quarantine, turns
// the checks off for this start); the stores adjust it while they recover;
// Save writes it when something changed. Methods are safe for concurrent
// use; the manifest's locks are leaves.
package datadir
