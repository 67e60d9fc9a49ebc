package logstore

import (
	"errors"
	"io/fs"
	"os"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// Suffixes of files the store writes besides segments.
const (
	tmpSuffix     = fsutil.TmpSuffix // half-written metadata; removed at Open
	deletedSuffix = ".deleted"       // renamed for deletion; removed at Open
)

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

// dirSync is the fsutil.Sync for metadata that must survive a power loss
// when the store is durable.
func dirSync(durable bool) fsutil.Sync {
	if durable {
		return fsutil.SyncFileAndDir
	}
	return fsutil.NoSync
}

// fileSync is the fsutil.Sync for files rebuilt from the log if lost
// (indexes): their content is synced, their directory entry need not be.
func fileSync(durable bool) fsutil.Sync {
	if durable {
		return fsutil.SyncFile
	}
	return fsutil.NoSync
}
