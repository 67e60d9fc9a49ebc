package sharegroup

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/logstore"
)

// stateLog is the append-only share-state log with group commit (§4.4, §7).
//
// Writers encode entries straight into a shared buffer under mu and get a
// ticket: the stream position just after their entry. One goroutine (run)
// repeatedly takes the whole buffer, writes it with one write call and,
// under FsyncAlways, fsyncs it, so every ack that arrived during the
// previous fsync shares the next one. A caller that must be durable waits
// until synced (or written, in the other modes) reaches its ticket. Entries
// of one share-partition are encoded under that share-partition's lock, so
// their order in the log is the order in which they took effect.
//
// Any write or fsync failure is sticky: every pending and later entry fails
// until restart, because an entry may depend on one that did not make it
// (a delta's SPSO presumes the earlier deltas) and the disk's state after a
// failed fsync is unknown.
//
// Compaction rotates files: rotate() makes the writer switch, at the
// current stream position, to a new generation file; the compactor then
// appends a full-state entry for every group and share-partition and a
// marker, fsyncs, and removes the older files. Recovery replays from the
// newest file holding a marker through the newest file.
type stateLog struct {
	dir      string
	mode     logstore.FsyncMode
	interval time.Duration
	log      *slog.Logger
	hooks    ioHooks
	// onBatch is called by the writer after each batch with the current
	// file's size (compaction trigger); it must not block.
	onBatch func(size int64)

	mu       sync.Mutex
	work     sync.Cond // the writer waits for work
	progress sync.Cond // tickets wait for written/synced
	buf      []byte
	spare    []byte
	enq      uint64 // stream position after the last enqueued byte
	written  uint64 // written through here
	synced   uint64 // fsynced through here
	syncWant uint64 // fsync through here regardless of the mode
	err      error  // sticky failure
	closing  bool
	rot      *rotation
	gen      uint64 // newest generation (the writer's file, or the pending rotation's)

	// Writer goroutine only (and Open/close before/after it runs).
	f    *os.File
	size int64

	stop chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// ioHooks are the state log's data system calls; tests replace them to
// inject failures.
type ioHooks struct {
	write func(f *os.File, b []byte) (int, error)
	sync  func(f *os.File) error
}

type rotation struct {
	at  uint64
	gen uint64
}

var errLogClosed = errors.New("share state log closed")

func defaultHooks() ioHooks {
	return ioHooks{write: (*os.File).Write, sync: fsutil.Fdatasync}
}

func genFileName(gen uint64) string { return fmt.Sprintf("state-%016d.log", gen) }

// start opens generation gen as the current file and starts the writer.
func (l *stateLog) start(gen uint64) error {
	l.work.L, l.progress.L = &l.mu, &l.mu
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	if err := l.openGen(gen); err != nil {
		return err
	}
	l.gen = gen
	l.wg.Add(1)
	go l.run()
	if l.mode == logstore.FsyncInterval {
		l.wg.Add(1)
		go l.intervalLoop()
	}
	return nil
}

// openGen creates a generation file and makes its existence durable.
func (l *stateLog) openGen(gen uint64) error {
	path := filepath.Join(l.dir, genFileName(gen))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := l.hooks.write(f, []byte(fileMagic)); err != nil {
		f.Close()
		return err
	}
	if err := fsutil.SyncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.size = f, int64(len(fileMagic))
	return nil
}

// write encodes an entry into the log with enc (which appends to its
// argument and returns it) and returns its ticket. It fails at once after
// a failure or Close.
func (l *stateLog) write(enc func([]byte) []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	if l.closing {
		return 0, errLogClosed
	}
	n := len(l.buf)
	l.buf = enc(l.buf)
	l.enq += uint64(len(l.buf) - n)
	if n == 0 {
		l.work.Signal()
	}
	return l.enq, nil
}

// wait blocks until the stream through ticket is written, and fsynced if
// durable; it returns the sticky error if that cannot happen.
func (l *stateLog) wait(ticket uint64, durable bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if durable && l.synced >= ticket || !durable && l.written >= ticket {
			return nil
		}
		if l.err != nil {
			return l.err
		}
		l.progress.Wait()
	}
}

// ackWait is wait with the durability an acknowledgement needs under the
// configured fsync mode: fsynced with always, written otherwise.
func (l *stateLog) ackWait(ticket uint64) error {
	return l.wait(ticket, l.mode == logstore.FsyncAlways)
}

// reached reports whether ticket has the durability ackWait gives.
func (l *stateLog) reached(ticket uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mode == logstore.FsyncAlways {
		return l.synced >= ticket
	}
	return l.written >= ticket
}

// syncTo fsyncs the stream through ticket whatever the mode and waits.
func (l *stateLog) syncTo(ticket uint64) error {
	l.mu.Lock()
	l.syncWant = max(l.syncWant, ticket)
	l.work.Signal()
	l.mu.Unlock()
	return l.wait(ticket, true)
}

// failed returns the sticky error, if any.
func (l *stateLog) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// rotate makes entries enqueued from now on go to a new generation file,
// and returns that generation.
func (l *stateLog) rotate() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	if l.closing {
		return 0, errLogClosed
	}
	l.gen++
	l.rot = &rotation{at: l.enq, gen: l.gen}
	l.work.Signal()
	return l.gen, nil
}

func (l *stateLog) run() {
	defer l.wg.Done()
	defer close(l.done)
	for {
		l.mu.Lock()
		for len(l.buf) == 0 && l.rot == nil && !l.closing && (l.syncWant <= l.synced || l.err != nil) {
			l.work.Wait()
		}
		if l.err != nil || (l.closing && len(l.buf) == 0 && l.rot == nil) {
			// Final fsync on a clean close, in every mode (a clean
			// shutdown syncs all).
			if l.err == nil && l.synced < l.written {
				err := l.hooks.sync(l.f)
				if err != nil {
					l.err = err
				} else {
					l.synced = l.written
				}
			}
			l.buf = nil
			l.progress.Broadcast()
			l.mu.Unlock()
			return
		}
		b := l.buf
		start, end := l.enq-uint64(len(b)), l.enq
		rot := l.rot
		if rot != nil && rot.at > end {
			rot = nil
		}
		if rot != nil {
			l.rot = nil
		}
		l.buf, l.spare = l.spare[:0], nil
		wantSync := l.mode == logstore.FsyncAlways || l.syncWant > l.synced || rot != nil
		l.mu.Unlock()

		var err error
		if rot != nil {
			split := int(rot.at - start)
			// The old file is complete and durable before the new one
			// exists, so only the newest file can have a torn tail.
			if err = l.writeAll(b[:split]); err == nil {
				err = l.hooks.sync(l.f)
			}
			if err == nil {
				err = l.openGen(rot.gen)
			}
			if err == nil {
				err = l.writeAll(b[split:])
			}
		} else {
			err = l.writeAll(b)
		}
		if err == nil && wantSync {
			err = l.hooks.sync(l.f)
		}

		l.mu.Lock()
		if err != nil {
			l.err = fmt.Errorf("share state log: %w", err)
			l.log.Error("share state log write failed; share-state writes fail until restart", "err", err)
		} else {
			l.written = end
			if wantSync {
				l.synced = end
			}
		}
		if cap(b) <= 4<<20 {
			l.spare = b[:0]
		}
		size := l.size
		l.progress.Broadcast()
		l.mu.Unlock()
		if err == nil && l.onBatch != nil {
			l.onBatch(size)
		}
	}
}

func (l *stateLog) writeAll(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	n, err := l.hooks.write(l.f, b)
	l.size += int64(n)
	if err == nil && n < len(b) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(b))
	}
	return err
}

func (l *stateLog) intervalLoop() {
	defer l.wg.Done()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.mu.Lock()
			if l.written > l.synced || l.enq > l.synced {
				l.syncWant = max(l.syncWant, l.enq)
				l.work.Signal()
			}
			l.mu.Unlock()
		}
	}
}

// close flushes what is enqueued, fsyncs and stops the writer.
func (l *stateLog) close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return nil
	}
	l.closing = true
	l.work.Signal()
	l.mu.Unlock()
	close(l.stop)
	l.wg.Wait()
	err := l.failed()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
