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

// InjectFault makes the store's file operations consult fn first: a non-nil
// return fails the operation ("write", "fsync", "create", "rename", "open",
// "mkdir", "truncate") on that path with it. nil removes the hook.
func (s *FileStore) InjectFault(fn func(op, path string) error) {
	if fn == nil {
		s.fs.fault.Store(nil)
		return
	}
	f := faultFunc(fn)
	s.fs.fault.Store(&f)
}

// Crash closes the store as a crash would leave it: nothing flushed or
// checkpointed, no clean-shutdown marker.
func (s *FileStore) Crash() error { return s.close(false) }

// Probe runs the background retry of failing partitions once.
func (s *FileStore) Probe() { s.probeFailing() }

// SetMaxCleanerKeys changes the key-map bound of a cleaning pass and
// returns a function that restores it (tests only; not while cleaning).
func SetMaxCleanerKeys(n int) (restore func()) {
	old := maxCleanerKeys
	maxCleanerKeys = n
	return func() { maxCleanerKeys = old }
}
