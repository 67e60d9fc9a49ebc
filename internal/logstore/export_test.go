package logstore

// SetRebuildHook installs a function run before each key-index run rebuild
// (nil removes it). Tests only; not safe while a store is rebuilding.
func SetRebuildHook(fn func()) { rebuildHook = fn }
