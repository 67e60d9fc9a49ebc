package jsstate

// GroupWatchReady reports whether LiveGroupIDs answers from its watch.
func (s *Store) GroupWatchReady() bool {
	s.groupWatch.mu.Lock()
	defer s.groupWatch.mu.Unlock()
	return s.groupWatch.ready
}
