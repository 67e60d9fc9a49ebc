package jslog

import "sync"

// notifier is a broadcast-by-close signal: wait returns a channel that the
// next notify closes. mu is a leaf lock.
type notifier struct {
	mu   sync.Mutex
	ch   chan struct{}
	done error
}

func (n *notifier) wait() (<-chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done != nil {
		return nil, n.done
	}
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch, nil
}

func (n *notifier) notify() {
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}

func (n *notifier) shutdown(err error) {
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	if n.done == nil {
		n.done = err
	}
	n.mu.Unlock()
}
