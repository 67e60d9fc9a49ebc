package logstore

import (
	"container/list"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// maxSlotWait bounds an opener's wait for a pinned file to be released
// when the cache is full of pinned files.
const maxSlotWait = time.Second

// fdCache bounds the segment log files a FileStore holds open
// (Options.MaxOpenSegments, --max-open-segments; docs/operations.md "File
// descriptors"). Every segment's log file is opened on demand and counted
// here; a file in use (pinned) is never closed, and when more files are
// open than the bound the least recently used unpinned ones are closed.
// A closed file is opened again, by path, by its next user: it sees all
// the data written through the old handle (same inode), and the fsync of
// the new handle covers what the old one wrote and did not sync (Linux
// fsync writes back the file's dirty pages, and reports a write-back error
// no other handle has seen).
//
// Opening a file beyond the bound first evicts an idle one; if every open
// file is in use (pinned: each pin lasts one read, one group commit or one
// compaction step), the opener waits for a pin to end, up to maxSlotWait,
// and then opens anyway (an overflow, counted), so that a pinned file
// held long can delay but never deadlock the others. So idle partitions
// hold no descriptor, and the number open stays within the bound whatever
// the number of partitions, also when one request writes more partitions
// at once than the bound.
//
// Locks: fdCache.mu is a leaf, taken under segment.mu (which serialises
// the opening of one segment's file), never the reverse; eviction closes
// files after releasing it.
type fdCache struct {
	max int // 0: no bound

	mu       sync.Mutex
	idle     list.List     // *fdSlot open and unpinned; front = most recently used
	open     int           // slots holding a file, pinned or not
	reserved int           // openers admitted by reserve, not yet added
	waiters  int           // openers waiting in reserve
	freed    chan struct{} // closed (and replaced) when a pin ends or a file closes

	evictions atomic.Int64 // files closed to stay within max
	opens     atomic.Int64 // files opened or created through the cache
	overflows atomic.Int64 // files opened beyond max after maxSlotWait
}

// fdSlot is one segment's place in the cache. Its fields are guarded by
// fdCache.mu.
type fdSlot struct {
	f    *os.File // nil: closed (never opened, evicted, or removed)
	pins int
	elem *list.Element // in fdCache.idle while open and unpinned
}

func newFDCache(max int) *fdCache { return &fdCache{max: max, freed: make(chan struct{})} }

// reserve admits the opening of one file: it evicts an idle file if the
// bound is reached, or waits for one to become idle (up to maxSlotWait).
// The caller then opens the file and adds it, or gives the admission back
// with unreserve. The caller holds no pin it waits on (a segment's mu may
// be held: nobody holding a pin waits for a segment's mu).
func (c *fdCache) reserve() {
	c.mu.Lock()
	var victims []*os.File
	var deadline <-chan time.Time
	for c.max > 0 && c.open+c.reserved >= c.max {
		if e := c.idle.Back(); e != nil {
			victims = append(victims, c.evictOneLocked(e))
			continue
		}
		if deadline == nil {
			t := time.NewTimer(maxSlotWait)
			defer t.Stop()
			deadline = t.C
		}
		freed := c.freed
		c.waiters++
		c.mu.Unlock()
		closeAll(victims)
		victims = nil
		timedOut := false
		select {
		case <-freed:
		case <-deadline:
			timedOut = true
		}
		c.mu.Lock()
		c.waiters--
		if timedOut {
			c.overflows.Add(1)
			break
		}
	}
	c.reserved++
	c.mu.Unlock()
	closeAll(victims)
}

// unreserve gives back an admission that opened nothing.
func (c *fdCache) unreserve() {
	c.mu.Lock()
	c.reserved--
	c.wakeLocked()
	c.mu.Unlock()
}

// wakeLocked wakes the openers waiting in reserve.
func (c *fdCache) wakeLocked() {
	if c.waiters == 0 {
		return
	}
	close(c.freed)
	c.freed = make(chan struct{})
}

// pin returns the slot's file, held open until unpin, or nil if the slot
// is closed (the caller opens the file and adds it).
func (c *fdCache) pin(sl *fdSlot) *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sl.f == nil {
		return nil
	}
	if sl.elem != nil {
		c.idle.Remove(sl.elem)
		sl.elem = nil
	}
	sl.pins++
	return sl.f
}

// add installs f, just opened after reserve, in the closed slot sl: pinned
// (the caller unpins it) or idle. It may evict other files to stay within
// the bound. The caller holds the segment's mu, so no other add races on
// sl.
func (c *fdCache) add(sl *fdSlot, f *os.File, pinned bool) {
	c.opens.Add(1)
	c.mu.Lock()
	sl.f = f
	c.reserved--
	c.open++
	if pinned {
		sl.pins = 1
	} else {
		sl.elem = c.idle.PushFront(sl)
	}
	victims := c.evictLocked()
	c.mu.Unlock()
	closeAll(victims)
}

// unpin ends one pin; the last makes the file evictable.
func (c *fdCache) unpin(sl *fdSlot) {
	c.mu.Lock()
	sl.pins--
	if sl.pins > 0 || sl.f == nil {
		c.mu.Unlock()
		return
	}
	sl.elem = c.idle.PushFront(sl)
	victims := c.evictLocked()
	c.wakeLocked()
	c.mu.Unlock()
	closeAll(victims)
}

// swap replaces the slot's file by f (a repair reopened it) and returns
// the old one, which pinners may still use: the caller closes it when
// they are done. Pins carry over.
func (c *fdCache) swap(sl *fdSlot, f *os.File) *os.File {
	c.opens.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := sl.f
	if old == nil {
		c.open++
		if sl.pins == 0 {
			sl.elem = c.idle.PushFront(sl)
		}
	}
	sl.f = f
	return old
}

// remove takes the file out of the slot, for the caller to close (the
// segment's last reference is gone, so nobody pins it); nil if it was
// closed already.
func (c *fdCache) remove(sl *fdSlot) *os.File {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := sl.f
	if f == nil {
		return nil
	}
	if sl.elem != nil {
		c.idle.Remove(sl.elem)
		sl.elem = nil
	}
	sl.f, sl.pins = nil, 0
	c.open--
	c.wakeLocked()
	return f
}

// evictLocked closes (returns, for closing after c.mu is released) the
// least recently used idle files while more than max are open (after an
// overflow, or a file adopted or swapped in).
func (c *fdCache) evictLocked() []*os.File {
	if c.max <= 0 {
		return nil
	}
	var victims []*os.File
	for c.open+c.reserved > c.max {
		e := c.idle.Back()
		if e == nil {
			break // every open file is pinned: the bound is exceeded until they are unpinned
		}
		victims = append(victims, c.evictOneLocked(e))
	}
	return victims
}

// evictOneLocked takes the idle file of e out of its slot, for closing.
func (c *fdCache) evictOneLocked(e *list.Element) *os.File {
	sl := c.idle.Remove(e).(*fdSlot)
	sl.elem = nil
	f := sl.f
	sl.f = nil
	c.open--
	c.evictions.Add(1)
	return f
}

// stats returns the number of files open now, the bound, and the files
// closed to stay within it, opened, and opened beyond it, so far.
func (c *fdCache) stats() (open, max int, evictions, opens, overflows int64) {
	c.mu.Lock()
	open = c.open
	c.mu.Unlock()
	return open, c.max, c.evictions.Load(), c.opens.Load(), c.overflows.Load()
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// SegmentFiles describes the store's open segment files (metrics).
type SegmentFiles struct {
	Open      int   // log files open now
	Max       int   // Options.MaxOpenSegments; 0 = no bound
	Evictions int64 // files closed to stay within Max, since Open
	Opens     int64 // files opened (again) or created, since Open
	// Overflows counts files opened beyond Max because every open file
	// stayed in use for maxSlotWait.
	Overflows int64
}

// SegmentFiles reports the open segment files and the cache's work.
func (s *FileStore) SegmentFiles() SegmentFiles {
	open, max, ev, opens, over := s.fds.stats()
	return SegmentFiles{Open: open, Max: max, Evictions: ev, Opens: opens, Overflows: over}
}
