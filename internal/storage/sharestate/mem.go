package sharestate

import (
	"fmt"
	"sync"
)

// Mem is a Store in memory, for tests and as the reference implementation
// of the Store contract: every write is durable the moment it is made (an
// acknowledgement waits for nothing), Start's snapshot replaces the image
// (a compaction), and SetFailing simulates a storage that fails writes for
// a while. A MemMedium outlives its stores, so a test can "restart" over
// what an earlier store wrote. It is not for production: nothing survives
// the process.
type Mem struct {
	med *MemMedium

	mu        sync.Mutex
	recovered *State
	next      uint64
	lost      map[uint64]error
	failures  uint64
	closed    bool
}

// MemMedium is the durable medium of memory stores: the image every store
// opened on it writes to and recovers from.
type MemMedium struct {
	mu      sync.Mutex
	img     *Image
	failing error // writes fail with it while set
	open    bool  // a store is open on the medium
}

// NewMemMedium returns an empty medium.
func NewMemMedium() *MemMedium { return &MemMedium{img: NewImage()} }

// SetFailing makes the writes of stores on the medium fail with err (nil:
// succeed again). A failed entry changes nothing.
func (m *MemMedium) SetFailing(err error) {
	m.mu.Lock()
	m.failing = err
	m.mu.Unlock()
}

// Crash returns a new medium holding what the medium holds now, as if the
// process died at this instant (every write of a memory store is durable
// at once): stores still open on m are not closed.
func (m *MemMedium) Crash() *MemMedium {
	m.mu.Lock()
	defer m.mu.Unlock()
	img := NewImage()
	replayState(img, m.img.State())
	return &MemMedium{img: img}
}

// NewMem opens a memory store on a fresh medium.
func NewMem() *Mem { return OpenMem(NewMemMedium()) }

// OpenMem opens a memory store on med, recovering what earlier stores on
// it wrote. Only one store may be open on a medium at a time.
func OpenMem(med *MemMedium) *Mem {
	med.mu.Lock()
	defer med.mu.Unlock()
	if med.open {
		panic("sharestate: a store is already open on this medium")
	}
	med.open = true
	return &Mem{med: med, recovered: med.img.State(), lost: make(map[uint64]error)}
}

// Medium returns the medium the store writes to.
func (s *Mem) Medium() *MemMedium { return s.med }

// Recovered implements Store.
func (s *Mem) Recovered() *State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recovered
}

// Write implements Store: the entry is applied to the medium at once,
// unless the medium is failing.
func (s *Mem) Write(e Entry) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	s.next++
	t := s.next
	s.med.mu.Lock()
	err := s.med.failing
	if err == nil {
		s.med.img.Apply(&e)
	}
	s.med.mu.Unlock()
	if err != nil {
		s.lost[t] = err
		s.failures++
	}
	return t, nil
}

// Wait implements Store: nothing to wait for.
func (s *Mem) Wait(ticket uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.lost[ticket]; err != nil {
		return fmt.Errorf("share state store: %w", err)
	}
	return nil
}

// Lost implements Store.
func (s *Mem) Lost(ticket uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost[ticket] != nil
}

// Failures implements Store.
func (s *Mem) Failures() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// Start implements Store: the startup snapshot replaces the medium's image.
// A memory store never needs a later compaction.
func (s *Mem) Start(snap func() error) error {
	fails := s.Failures()
	s.med.mu.Lock()
	old := s.med.img
	s.med.img = NewImage()
	s.med.mu.Unlock()
	err := snap()
	if err == nil && s.Failures() != fails {
		err = fmt.Errorf("a share state write failed during the snapshot")
	}
	if err != nil {
		s.med.mu.Lock()
		s.med.img = old
		s.med.mu.Unlock()
	}
	return err
}

// Close implements Store.
func (s *Mem) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.med.mu.Lock()
	s.med.open = false
	s.med.mu.Unlock()
	return nil
}

// replayState applies st to img as full entries.
func replayState(img *Image, st *State) {
	for _, g := range st.Groups {
		img.Apply(&Entry{Kind: KindGroup, Group: g.ID, GroupEpoch: g.GroupEpoch, Config: g.Config})
		for i := range g.Partitions {
			p := &g.Partitions[i]
			if p.Initialized {
				img.Apply(&Entry{Kind: KindPartFull, Group: g.ID, Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition, SPSO: p.SPSO, Ranges: p.Ranges})
			}
			if p.Offline != "" {
				img.Apply(&Entry{Kind: KindPartOffline, Group: g.ID, Topic: p.Topic, TopicID: p.TopicID, Partition: p.Partition, Reason: p.Offline})
			}
		}
	}
}

var _ Store = (*Mem)(nil)
