// Package fsutil holds the few file-system steps every durable part of
// sharelog shares: fdatasync, fsync of a directory, and atomic replacement of
// a small file (temp file, fsync, rename, fsync of the directory).
package fsutil

import (
	"fmt"
	"os"
	"path/filepath"
)

// TmpSuffix marks a half-written file of WriteFileAtomic; owners remove such
// leftovers when they open their directory.
const TmpSuffix = ".tmp"

// Sync says how far WriteFileAtomic goes to make a replacement durable.
type Sync int

const (
	// NoSync keeps only the rename's all-or-nothing property against
	// process crashes (fsync mode "never").
	NoSync Sync = iota
	// SyncFile fsyncs the new content before the rename; the rename itself
	// may be lost to a power failure (for data that can be rebuilt).
	SyncFile
	// SyncFileAndDir also fsyncs the directory, so the new content survives
	// a power failure once WriteFileAtomic returns.
	SyncFileAndDir
)

// WriteFileAtomic replaces path with data so that a crash leaves either the
// old or the new content.
func WriteFileAtomic(path string, data []byte, sync Sync) error {
	return writeAtomic(path, data, sync, 0o644, false)
}

// WriteFileAtomicPerm is WriteFileAtomic giving the file exactly perm (0o600
// for what only the server may read, such as credentials), whatever the
// umask or a leftover temporary file's mode.
func WriteFileAtomicPerm(path string, data []byte, sync Sync, perm os.FileMode) error {
	return writeAtomic(path, data, sync, perm, true)
}

func writeAtomic(path string, data []byte, sync Sync, perm os.FileMode, exact bool) error {
	tmp := path + TmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if exact {
		err = f.Chmod(perm)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil && sync >= SyncFile {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if sync == SyncFileAndDir {
		return SyncDir(filepath.Dir(path))
	}
	return nil
}

// SyncDir fsyncs a directory so that creations, renames and removals in it
// survive a power loss.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
