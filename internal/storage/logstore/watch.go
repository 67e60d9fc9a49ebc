package logstore

import "sync"

// notifier is a broadcast-by-close signal: wait returns a channel that the
// next notify closes. Channels are made lazily, so a partition nobody watches
// pays one uncontended lock per change and no allocation.
//
// mu is a leaf lock: nothing else is acquired while holding it.
type notifier struct {
	mu   sync.Mutex
	ch   chan struct{} // nil until someone waits; replaced after each notify
	done error         // non-nil once shut down: wait fails with it
}

// wait returns the channel closed by the next notify, or the shutdown error.
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

// notify wakes every current waiter.
func (n *notifier) notify() {
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}

// shutdown wakes every waiter for the last time; later waits return err.
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
