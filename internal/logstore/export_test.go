package logstore

// SetRebuildHook installs a function run before each key-index run rebuild
// (nil removes it). Tests only; not safe while a store is rebuilding.
func SetRebuildHook(fn func()) { rebuildHook = fn }

// WithLoc returns ent pointing at file position pos, length size (tests of
// stale locations).
func WithLoc(ent KeyEntry, pos, size uint32) KeyEntry {
	ent.loc = recLoc{pos: pos, size: size}
	return ent
}
