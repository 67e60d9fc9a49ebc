package logstore

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/sharelog/sharelog/internal/fsutil"
)

var (
	// ErrStorage: a write, fsync, create or rename failed (disk full, I/O
	// error, too many open files, read-only file system...). The operation
	// may be retried: the partition re-validates its files on the next
	// request. The underlying error (an *os.PathError or syscall.Errno) stays
	// reachable with errors.As.
	ErrStorage = errors.New("storage error")
	// ErrOffline: the partition's files failed validation at Open (a missing
	// or truncated segment, a missing partition directory, impossible
	// bounds). Every operation on it fails until an operator repairs the
	// files and restarts; the rest of the store keeps working.
	ErrOffline = errors.New("partition offline")
)

// CorruptError reports records that cannot be read because their frames are
// damaged. It matches ErrCorrupt with errors.Is. From and To are the first
// and last unreadable offsets (inclusive): a reader can step past the damage
// by reading from To+1, and an operator can purge up to To+1.
type CorruptError struct {
	Topic     string
	Partition int32
	File      string // the segment file holding the damage
	Pos       int64  // byte position of the first damaged frame
	From, To  int64  // unreadable offsets, inclusive
	Err       error  // what is wrong with the frame
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("topic %q partition %d: offsets %d to %d are unreadable: %s at byte %d: %v: %v",
		e.Topic, e.Partition, e.From, e.To, e.File, e.Pos, e.Err, ErrCorrupt)
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the frame-level cause.
func (e *CorruptError) Unwrap() error { return e.Err }

// CorruptRange returns From and To. Share groups use it to archive exactly
// the unreadable offsets instead of retrying them forever.
func (e *CorruptError) CorruptRange() (first, last int64) { return e.From, e.To }

// OfflinePartition is one entry of FileStore.Offline.
type OfflinePartition struct {
	Topic     string
	Partition int32
	// Err wraps ErrOffline (damage found at Open; needs an operator) or
	// ErrStorage (the last write failed; retried on the next request and by
	// the background probe).
	Err error
}

// Storage operations, as passed to Options.OnStorageError and used by fault
// injection.
const (
	opWrite  = "write"
	opFsync  = "fsync"
	opCreate = "create"
	opRename = "rename"
	opOpen   = "open"
	opMkdir  = "mkdir"
	opRemove = "remove"
	opTrunc  = "truncate"
)

// storageFS is the seam between the store's write paths and the operating
// system: every data write, fsync, file creation and metadata replacement
// goes through it, so a failure is reported once (ErrStorage, the
// OnStorageError hook) and tests can inject one. In production fault is nil
// and each call costs one atomic load.
type storageFS struct {
	fault   atomic.Pointer[faultFunc]
	onError func(op string, err error)
}

// faultFunc decides whether the operation op on path fails (tests only).
// For opWrite, a fault still writes the first half of the buffer, as a disk
// that fills up mid-write does.
type faultFunc func(op, path string) error

func (fs *storageFS) inject(op, path string) error {
	if f := fs.fault.Load(); f != nil {
		return (*f)(op, path)
	}
	return nil
}

// fail wraps err as a storage error and reports it.
func (fs *storageFS) fail(op string, err error) error {
	if fs.onError != nil {
		fs.onError(op, err)
	}
	return fmt.Errorf("%s: %w (%w)", op, err, ErrStorage)
}

func (fs *storageFS) writeAt(f *os.File, b []byte, off int64) error {
	if err := fs.inject(opWrite, f.Name()); err != nil {
		_, _ = f.WriteAt(b[:len(b)/2], off)
		return fs.fail(opWrite, err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		return fs.fail(opWrite, err)
	}
	return nil
}

func (fs *storageFS) datasync(f *os.File) error {
	err := fs.inject(opFsync, f.Name())
	if err == nil {
		err = fsutil.Fdatasync(f)
	}
	if err != nil {
		return fs.fail(opFsync, err)
	}
	return nil
}

func (fs *storageFS) syncDir(dir string) error {
	err := fs.inject(opFsync, dir)
	if err == nil {
		err = fsutil.SyncDir(dir)
	}
	if err != nil {
		return fs.fail(opFsync, err)
	}
	return nil
}

func (fs *storageFS) openFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	op := opOpen
	if flag&os.O_CREATE != 0 {
		op = opCreate
	}
	if err := fs.inject(op, path); err != nil {
		return nil, fs.fail(op, &os.PathError{Op: "open", Path: path, Err: err})
	}
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, fs.fail(op, err)
	}
	return f, nil
}

func (fs *storageFS) mkdir(path string) error {
	err := fs.inject(opMkdir, path)
	if err == nil {
		err = os.Mkdir(path, 0o755)
	}
	if err != nil {
		return fs.fail(opMkdir, err)
	}
	return nil
}

func (fs *storageFS) rename(from, to string) error {
	err := fs.inject(opRename, to)
	if err == nil {
		err = os.Rename(from, to)
	}
	if err != nil {
		return fs.fail(opRename, err)
	}
	return nil
}

func (fs *storageFS) truncate(f *os.File, size int64) error {
	err := fs.inject(opTrunc, f.Name())
	if err == nil {
		err = f.Truncate(size)
	}
	if err != nil {
		return fs.fail(opTrunc, err)
	}
	return nil
}

// writeFileAtomic is fsutil.WriteFileAtomic through the seam (it creates a
// temp file, so an injected create fault applies; then it renames).
func (fs *storageFS) writeFileAtomic(path string, data []byte, sync fsutil.Sync) error {
	if err := fs.inject(opCreate, path+tmpSuffix); err != nil {
		return fs.fail(opCreate, &os.PathError{Op: "open", Path: path + tmpSuffix, Err: err})
	}
	if err := fs.inject(opRename, path); err != nil {
		return fs.fail(opRename, &os.LinkError{Op: "rename", Old: path + tmpSuffix, New: path, Err: err})
	}
	if err := fsutil.WriteFileAtomic(path, data, sync); err != nil {
		return fs.fail(classifyOp(err), err)
	}
	return nil
}

// classifyOp names the system call that produced err, for reporting.
func classifyOp(err error) string {
	var le *os.LinkError
	if errors.As(err, &le) {
		return opRename
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		switch pe.Op {
		case "open":
			return opCreate
		case "sync", "fsync", "fdatasync":
			return opFsync
		}
	}
	return opWrite
}
