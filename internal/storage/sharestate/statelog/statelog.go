package statelog

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sharelog/sharelog/internal/fsutil"
	"github.com/sharelog/sharelog/internal/storage/logstore"
	"github.com/sharelog/sharelog/internal/storage/sharestate"
)

// stateLog is the append-only share-state log with group commit.
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
// A write or fsync failure is not sticky. The writer truncates the file
// back to the last good position (the end of the last whole write for a
// write failure, the last fsynced position for an fsync failure, since the
// kernel may have dropped the unsynced pages), and every entry from there
// through the last one enqueued fails: their tickets are recorded as lost.
// The next batch re-validates the file (truncate, reopen if needed) and
// writes again, so once the cause is gone writes succeed without a
// restart. A share-partition whose last entry was lost has an unknown
// durable state (a later delta's SPSO could presume the lost one): its
// owner's next write for it is a full-state entry instead of a delta.
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
	hooks    IOHooks
	// onBatch is called by the writer after each batch with the current
	// file's size (compaction trigger); it must not block.
	onBatch func(size int64)
	// onSynced is called by the writer, with no lock held, after an fsync
	// with the generation and size of the current file, durable now (the
	// manifest checkpoint). It may block the writer briefly.
	onSynced func(gen uint64, size int64)
	// onHealed is called (under mu; it must not block) when a write
	// succeeds after a failure: entries of groups may have been lost with
	// the failed batch, and a snapshot rewrites them all.
	onHealed func()
	// onError (Options.OnStorageError) is called under mu with every
	// failure; it must not block.
	onError func(op string, err error)

	mu        sync.Mutex
	work      sync.Cond // the writer waits for work
	progress  sync.Cond // tickets wait for written/synced
	buf       []byte
	spare     []byte
	enq       uint64 // stream position after the last enqueued byte
	written   uint64 // written (or lost) through here
	synced    uint64 // fsynced through here (lost tickets excepted)
	syncWant  uint64 // fsync through here regardless of the mode
	closing   bool
	exited    bool  // the writer stopped (after close)
	lastErr   error // the last write or fsync failure
	broken    bool  // the last batch failed: re-validate the file first
	rot       *rotation
	gen       uint64           // newest generation (the writer's file, or the pending rotation's)
	fileGen   uint64           // the writer's current file
	sealed    map[uint64]int64 // final sizes of the files rotated away from
	durSize   int64            // fsynced size of fileGen, as last published
	fails     []lostSpan
	nfail     atomic.Int64 // len(fails): lost() without the lock when 0
	failSeq   uint64       // failures so far
	forgotten uint64       // tickets up to here count as lost (spans dropped)

	// Writer goroutine only (and Open/close before/after it runs).
	f          *os.File
	size       int64 // bytes written to f
	syncedSize int64 // bytes of f known fsynced

	stop chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// lostSpan is a range of tickets whose entries failed: from < t <= to.
type lostSpan struct{ from, to uint64 }

// maxLostSpans bounds the failure record; older spans are forgotten and
// every ticket up to them counts as lost (a harmless full rewrite).
const maxLostSpans = 1024

// IOHooks replace the state log's data system calls, to inject failures
// (Options.Hooks, tests only). A nil field is the real call.
type IOHooks struct {
	Write    func(f *os.File, b []byte) (int, error)
	Sync     func(f *os.File) error
	Truncate func(f *os.File, size int64) error
}

type rotation struct {
	at  uint64
	gen uint64
}

var errLogClosed = sharestate.ErrClosed

// hooksOr returns h with its nil fields set to the real calls.
func hooksOr(h *IOHooks) IOHooks {
	var out IOHooks
	if h != nil {
		out = *h
	}
	if out.Write == nil {
		out.Write = (*os.File).Write
	}
	if out.Sync == nil {
		out.Sync = fsutil.Fdatasync
	}
	if out.Truncate == nil {
		out.Truncate = (*os.File).Truncate
	}
	return out
}

func genFileName(gen uint64) string { return fmt.Sprintf("state-%016d.log", gen) }

// start opens generation gen as the current file and starts the writer.
func (l *stateLog) start(gen uint64) error {
	l.work.L, l.progress.L = &l.mu, &l.mu
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	if l.sealed == nil {
		l.sealed = make(map[uint64]int64)
	}
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

// openGen creates a generation file and makes its existence durable. A
// file it could not complete is removed (it holds nothing).
func (l *stateLog) openGen(gen uint64) error {
	path := filepath.Join(l.dir, genFileName(gen))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err = l.hooks.Write(f, []byte(fileMagic)); err == nil {
		err = fsutil.SyncDir(l.dir)
	}
	if err != nil {
		f.Close()
		_ = os.Remove(path)
		return err
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.size, l.syncedSize = f, int64(len(fileMagic)), int64(len(fileMagic))
	l.mu.Lock()
	l.fileGen, l.durSize = gen, l.syncedSize
	l.mu.Unlock()
	return nil
}

// write encodes an entry into the log with enc (which appends to its
// argument and returns it) and returns its ticket. It fails only after
// Close; a failure of the write itself shows at wait.
func (l *stateLog) write(enc func([]byte) []byte) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
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

// lostLocked reports whether ticket's entry failed. mu is held.
func (l *stateLog) lostLocked(ticket uint64) bool {
	i, _ := slices.BinarySearchFunc(l.fails, ticket, func(s lostSpan, t uint64) int {
		if s.to < t {
			return -1
		}
		return 1
	})
	if i < len(l.fails) && l.fails[i].from < ticket && ticket <= l.fails[i].to {
		return true
	}
	// Spans forgotten (maxLostSpans): everything up to them counts as
	// lost, a ticket 0 (never written) as not.
	return ticket != 0 && ticket <= l.forgotten
}

// lost reports whether ticket's entry failed (its write or fsync).
func (l *stateLog) lost(ticket uint64) bool {
	if l.nfail.Load() == 0 {
		return false // no failure yet (forgotten spans imply some are kept)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostLocked(ticket)
}

// wait blocks until the stream through ticket is written, and fsynced if
// durable; it returns the failure if ticket's entry was lost.
func (l *stateLog) wait(ticket uint64, durable bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if (len(l.fails) > 0 || l.forgotten > 0) && l.lostLocked(ticket) {
			return fmt.Errorf("share state log: %w", l.lastErr)
		}
		if durable && l.synced >= ticket || !durable && l.written >= ticket {
			return nil
		}
		if l.exited {
			if l.lastErr != nil {
				return fmt.Errorf("share state log: %w", l.lastErr)
			}
			return errLogClosed
		}
		l.progress.Wait()
	}
}

// ackWait is wait with the durability an acknowledgement needs under the
// configured fsync mode: fsynced with always, written otherwise.
func (l *stateLog) ackWait(ticket uint64) error {
	return l.wait(ticket, l.mode == logstore.FsyncAlways)
}

// syncTo fsyncs the stream through ticket whatever the mode and waits.
func (l *stateLog) syncTo(ticket uint64) error {
	l.mu.Lock()
	l.syncWant = max(l.syncWant, ticket)
	l.work.Signal()
	l.mu.Unlock()
	return l.wait(ticket, true)
}

// position returns the stream position after the last enqueued entry.
func (l *stateLog) position() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.enq
}

// failures returns the number of failures so far.
func (l *stateLog) failures() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failSeq
}

// sealedSizes returns the final sizes of the files rotated away from.
func (l *stateLog) sealedSizes() map[uint64]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.sealed)
}

// forgetSealed drops the sizes of generations before gen (removed).
func (l *stateLog) forgetSealed(gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.sealed, func(g uint64, _ int64) bool { return g < gen })
}

// finalFile returns the current file's generation and fsynced size; only
// after close.
func (l *stateLog) finalFile() (uint64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fileGen, l.syncedSize
}

// currentSize returns the current file's fsynced size (a checkpoint).
func (l *stateLog) currentSize() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.durSize
}

// currentFile returns the generation of the file the writer appends to.
func (l *stateLog) currentFile() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fileGen
}

// rotate makes entries enqueued from now on go to a new generation file,
// and returns that generation.
func (l *stateLog) rotate() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
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
		for len(l.buf) == 0 && l.rot == nil && !l.closing && l.syncWant <= l.synced {
			l.work.Wait()
		}
		if l.closing && len(l.buf) == 0 && l.rot == nil {
			// Final fsync on a clean close, in every mode (a clean
			// shutdown syncs all).
			var err error
			if l.synced < l.written || l.broken {
				err = l.revalidate()
				if err == nil {
					err = l.hooks.Sync(l.f)
				}
				if err != nil {
					l.failLocked(err, l.synced)
				} else {
					l.synced = l.written
					l.syncedSize = l.size
					l.broken = false
				}
			}
			l.exited = true
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
		wPos, sPos := l.written, l.synced
		broken := l.broken
		l.mu.Unlock()

		// good/goodSize: the stream position and the file size everything
		// up to which is sound if a step fails.
		good, goodSize := wPos, l.size
		var err error
		if broken {
			err = l.revalidate()
		}
		syncFile := func() {
			if err = l.hooks.Sync(l.f); err != nil {
				good, goodSize = sPos, l.syncedSize
				return
			}
			l.syncedSize = l.size
		}
		if err == nil && rot != nil {
			split := int(rot.at - start)
			// The old file is complete and durable before the new one
			// exists, so only the newest file can have a torn tail.
			if err = l.writeAll(b[:split]); err == nil {
				syncFile()
			}
			if err == nil {
				sPos = rot.at
				good, goodSize = rot.at, l.size
				oldGen, oldSize := l.fileGen, l.size
				if err = l.openGen(rot.gen); err == nil {
					l.mu.Lock()
					l.sealed[oldGen] = oldSize
					l.mu.Unlock()
				}
			}
			if err == nil {
				good, goodSize = rot.at, l.size
				if err = l.writeAll(b[split:]); err == nil && wantSync {
					syncFile()
				}
			}
		} else if err == nil {
			if err = l.writeAll(b); err == nil && wantSync {
				syncFile()
			}
		}
		if err != nil && !broken {
			// Cut what may be half written; if that fails too, the next
			// batch re-validates first.
			if terr := l.hooks.Truncate(l.f, goodSize); terr == nil {
				l.size = goodSize
			}
		}
		if err == nil && wantSync && l.onSynced != nil {
			// Before the entries are reported durable (see onSynced).
			l.onSynced(l.fileGen, l.syncedSize)
		}

		l.mu.Lock()
		if err != nil {
			l.size = goodSize
			l.failLocked(err, good)
		} else {
			healed := l.broken
			if healed {
				l.log.Info("share state log writes succeed again")
				if l.onHealed != nil {
					l.onHealed()
				}
			}
			l.broken = false
			l.written = end
			if wantSync {
				l.synced = end
				l.durSize = l.syncedSize
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

// failLocked records a failure: every entry after the stream position
// good, through the last one enqueued, is lost (the buffer is dropped: its
// entries may build on the lost ones). mu is held.
func (l *stateLog) failLocked(err error, good uint64) {
	if !l.broken {
		l.log.Error("share state log write failed; the entries in flight fail with KAFKA_STORAGE_ERROR and the next write retries",
			"dir", l.dir, "err", err)
	}
	if l.onError != nil {
		l.onError("share-state-write", err)
	}
	l.broken = true
	l.lastErr = err
	l.failSeq++
	to := l.enq
	l.buf = l.buf[:0]
	if n := len(l.fails); n > 0 && good <= l.fails[n-1].to {
		l.fails[n-1].to = max(l.fails[n-1].to, to)
		l.fails[n-1].from = min(l.fails[n-1].from, good)
	} else if good < to {
		l.fails = append(l.fails, lostSpan{from: good, to: to})
	}
	if n := len(l.fails) - maxLostSpans; n > 0 {
		l.forgotten = l.fails[n-1].to
		l.fails = slices.Delete(l.fails, 0, n)
	}
	l.nfail.Store(int64(len(l.fails)))
	l.written = max(l.written, to)
	// Nothing after good is left to fsync for (it is lost): without this
	// the writer would retry a failing fsync in a loop.
	if l.syncWant > good {
		l.syncWant = max(good, l.synced)
	}
	if l.rot != nil && l.rot.at < to {
		l.rot.at = to
	}
}

// revalidate makes the file end at the last good size again after a
// failure: truncate, and if that fails, reopen the file and truncate.
func (l *stateLog) revalidate() error {
	err := l.hooks.Truncate(l.f, l.size)
	if err == nil {
		return nil
	}
	// fileGen is written only by this goroutine (openGen): reading it
	// without mu is safe here.
	path := filepath.Join(l.dir, genFileName(l.fileGen))
	f, oerr := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if oerr != nil {
		return fmt.Errorf("re-validating %s: %w (reopen: %v)", path, err, oerr)
	}
	if err := l.hooks.Truncate(f, l.size); err != nil {
		f.Close()
		return fmt.Errorf("re-validating %s: %w", path, err)
	}
	l.f.Close()
	l.f = f
	return nil
}

func (l *stateLog) writeAll(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	n, err := l.hooks.Write(l.f, b)
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
	l.mu.Lock()
	var err error
	if l.broken {
		err = fmt.Errorf("share state log: %w", l.lastErr)
	}
	l.mu.Unlock()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
