// Package sharestatetest is the conformance suite every sharestate.Store
// implementation must pass (as logstoretest is for log stores): the file
// state log, the memory store and any later backend run the same Run with
// a factory of their own Medium (where the implementation keeps state
// across opens, able to crash and, if it can, to fail writes).
//
// The suite plays the share-group manager: it writes entries, waits for
// them, rolls its own state back when a write fails, and writes its whole
// state when the store asks for a snapshot. It checks the replay rules on
// a reopen, ticket ordering and Wait/Lost, that a snapshot replaces older
// entries, offline marks, crash recovery of what was waited for,
// non-sticky failures, concurrent writers and the closed store. Cases run
// in parallel and take milliseconds.
package sharestatetest
