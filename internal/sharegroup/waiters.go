package sharegroup

import "slices"

// Long-poll wake-ups.
//
// A fetch that has to wait registers a waiter on each share-partition of
// its session, in arrival (admission) order. A change that may let a
// waiter in — an append, a log-start move or a topic deletion (seen through
// logstore.Watch by a per-partition watcher goroutine), records becoming
// AVAILABLE, SPSO advancing, a config change — signals the partition.
//
// Waiters are offered the change in arrival order with a baton: a signal
// wakes only the oldest waiter; when it has evaluated (and possibly taken
// records and left), the baton passes to the next one, and so on to the
// newest. A signal arriving while the baton travels restarts it at the
// oldest once the current holder is done. So no waiter is skipped, the
// oldest one chooses first, and there is no thundering herd.
//
// Lock order: sharePartition.mu, then sharePartition.wmu (signal is called
// with mu held); wmu is a leaf apart from logstore.Watch.

// waiter is one waiting fetch.
type waiter struct {
	seq  uint64
	wake chan struct{} // buffered 1: a pending wake-up
}

func (w *waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// signal offers a change to the partition's waiters.
func (p *sharePartition) signal() {
	p.wmu.Lock()
	p.signalLocked()
	p.wmu.Unlock()
}

func (p *sharePartition) signalLocked() {
	if len(p.waiters) == 0 {
		return
	}
	if p.baton == nil {
		p.baton = p.waiters[0]
		p.baton.notify()
	} else {
		p.restart = true
	}
}

// addWaiter registers w, in arrival order, and makes sure appends to the
// partition are watched. The watch is subscribed before addWaiter returns,
// and the caller evaluates after that, so no append is missed.
func (p *sharePartition) addWaiter(w *waiter) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	i := len(p.waiters)
	for i > 0 && p.waiters[i-1].seq > w.seq {
		i--
	}
	p.waiters = append(p.waiters, nil)
	copy(p.waiters[i+1:], p.waiters[i:])
	p.waiters[i] = w
	if !p.watching {
		m := p.g.m
		ch, err := m.store.Watch(p.topic, p.part)
		if err != nil {
			return // the topic is gone: the caller's evaluation reports it
		}
		p.watching = true
		m.bg.Add(1)
		go p.watch(ch)
	}
}

// removeWaiter unregisters w, passing on the baton if it held it.
func (p *sharePartition) removeWaiter(w *waiter) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	for i, x := range p.waiters {
		if x == w {
			p.waiters = slices.Delete(p.waiters, i, i+1)
			if p.baton == w {
				p.passLocked(i)
			}
			return
		}
	}
}

// attempted tells the partition that w finished evaluating: the baton, if
// w holds it, moves to the next waiter.
func (p *sharePartition) attempted(w *waiter) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.baton != w {
		return
	}
	for i, x := range p.waiters {
		if x == w {
			p.passLocked(i + 1)
			return
		}
	}
	p.passLocked(len(p.waiters))
}

func (p *sharePartition) passLocked(next int) {
	if p.restart {
		p.restart, next = false, 0
	}
	if next < len(p.waiters) {
		p.baton = p.waiters[next]
		p.baton.notify()
	} else {
		p.baton = nil
	}
}

// watch turns the log's change notifications into signals while the
// partition has waiters.
func (p *sharePartition) watch(ch <-chan struct{}) {
	m := p.g.m
	defer m.bg.Done()
	for {
		select {
		case <-ch:
		case <-m.closing:
			p.wmu.Lock()
			p.watching = false
			p.wmu.Unlock()
			return
		}
		p.wmu.Lock()
		if len(p.waiters) == 0 {
			p.watching = false
			p.wmu.Unlock()
			return
		}
		// Subscribe again before signalling, so a change between the two
		// is not lost.
		next, err := m.store.Watch(p.topic, p.part)
		p.signalLocked()
		if err != nil {
			p.watching = false
			p.wmu.Unlock()
			return
		}
		p.wmu.Unlock()
		ch = next
	}
}
