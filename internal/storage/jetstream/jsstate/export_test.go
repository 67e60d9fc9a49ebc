package jsstate

import "context"

// GroupWatchReady reports whether LiveGroupIDs answers from its watch.
func (s *Store) GroupWatchReady() bool {
	s.groupWatch.mu.Lock()
	defer s.groupWatch.mu.Unlock()
	return s.groupWatch.ready
}

// ReadKeys is the read of AdoptGroup and AdoptPartition (readKeys) without
// their fence: the revision of each key filter matches that holds a
// snapshot, by key.
func (s *Store) ReadKeys(ctx context.Context, filter []string) (map[string]uint64, error) {
	dm, _, err := s.readKeys(ctx, "read keys", filter)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64)
	for g, dg := range dm {
		if dg.rev != 0 {
			out[groupKey(g)] = dg.rev
		}
		for k, dp := range dg.parts {
			out[partKeyName(g, k)] = dp.rev
		}
	}
	return out, nil
}
