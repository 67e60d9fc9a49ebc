package groupoffsets

import (
	"errors"
	"sync"
)

// Mem is a Store in memory, for tests: every write is "durable" at once and
// nothing survives the process. SetFailing makes writes fail.
type Mem struct {
	mu      sync.Mutex
	im      *image
	failing error
	closed  bool
}

// NewMem returns an empty memory store.
func NewMem() *Mem { return &Mem{im: newImage()} }

// SetFailing makes every write fail with err (nil: succeed again).
func (m *Mem) SetFailing(err error) {
	m.mu.Lock()
	m.failing = err
	m.mu.Unlock()
}

var errMemClosed = errors.New("groupoffsets: store closed")

func (m *Mem) write(e entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errMemClosed
	}
	if m.failing != nil {
		return m.failing
	}
	m.im.apply(e)
	return nil
}

// Load implements Store.
func (m *Mem) Load() ([]Group, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errMemClosed
	}
	return m.im.list(), nil
}

// Commit implements Store.
func (m *Mem) Commit(group string, offsets []Offset) error {
	return m.write(entry{Kind: "c", Group: group, Offsets: offsets})
}

// Delete implements Store.
func (m *Mem) Delete(group string, parts []Partition) error {
	return m.write(entry{Kind: "d", Group: group, Parts: parts, All: parts == nil})
}

// SetMeta implements Store.
func (m *Mem) SetMeta(group string, meta Meta) error {
	return m.write(entry{Kind: "s", Group: group, Meta: &meta})
}

// Close implements Store: later calls fail.
func (m *Mem) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}
