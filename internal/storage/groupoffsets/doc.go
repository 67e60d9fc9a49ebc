// Package groupoffsets stores the committed offsets of consumer groups
// (internal/consumergroup) behind a small interface, Store, so that a
// cluster-KV implementation can follow the file one (docs/consumer-groups.md
// "Durability").
//
// # File format
//
// <Dir>/offsets.log is a sequence of frames
//
//	frame = u32 length | u32 CRC32C(payload) | payload      (big-endian)
//
// whose payload is one JSON entry: a commit of a group's partitions (all
// of one OffsetCommit, so a request is applied whole or not at all), a
// delete of some of a group's partitions or of the whole group, or the
// group's Meta (its protocol type and empty-since time, the start of its
// offsets' retention). A frame
// is written with one Write, so a crash tears at most the tail; Open
// replays the file and cuts it at the first short or damaged frame.
//
// When the file has grown past four times what the live state needs (and
// at least CompactBytes), the live state is written to offsets.log.tmp,
// fsynced and renamed over offsets.log, and the directory fsynced: a crash
// leaves the old or the new file, both whole.
//
// # Durability
//
// With Fsync always a write returns after its frame is fsynced; interval
// fsyncs in the background every FsyncInterval; never leaves it to the
// operating system (docs/durability: the --fsync flag). Writes are
// serialized by the store's lock (a leaf: it calls nothing outside).
package groupoffsets
