package logstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Suffixes of files the store writes besides segments.
const (
	tmpSuffix     = ".tmp"     // half-written metadata; removed at Open
	deletedSuffix = ".deleted" // renamed for deletion; removed at Open
)

// writeFileAtomic replaces path with data so that a crash leaves either the
// old or the new content: temp file, fsync, rename, fsync of the directory.
// With durable false the fsyncs are skipped (fsync mode "never"), keeping
// only the rename's all-or-nothing property against process crashes.
func writeFileAtomic(path string, data []byte, durable bool) error {
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && durable {
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
	if durable {
		return syncDir(filepath.Dir(path))
	}
	return nil
}

// syncDir fsyncs a directory so that creations, renames and removals in it
// survive a power loss.
func syncDir(dir string) error {
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

// removeIfExists removes path and ignores its absence.
func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// renameIfExists renames old to new and ignores the absence of old.
func renameIfExists(oldPath, newPath string) error {
	if err := os.Rename(oldPath, newPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
