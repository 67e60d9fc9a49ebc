package logstore

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sharelog/sharelog/internal/fsutil"
)

// quarantineDir is where Open moves what it cannot explain, instead of
// deleting it: <dir>/quarantine/<UTC timestamp of the Open>/<path relative
// to dir>.
const quarantineDir = "quarantine"

// quarantine moves path (a file or directory inside the store) under the
// quarantine directory of this Open and logs an ERROR naming both paths.
// why says what is wrong with it.
func (s *FileStore) quarantine(path, why string) error {
	rel, err := filepath.Rel(s.dir, path)
	if err != nil {
		return err
	}
	if s.quarantineStamp == "" {
		s.quarantineStamp = s.opts.Now().UTC().Format("20060102T150405.000000000Z")
	}
	dst := filepath.Join(s.dir, quarantineDir, s.quarantineStamp, rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("quarantine %s: %w", path, err)
	}
	if err := os.Rename(path, dst); err != nil {
		return fmt.Errorf("quarantine %s: %w", path, err)
	}
	if s.durable() {
		// The move must not be undone by a power loss half-way (the source
		// directory losing the entry is what matters; the target may be
		// re-found either way).
		if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
			return err
		}
		if err := fsutil.SyncDir(filepath.Dir(dst)); err != nil {
			return err
		}
	}
	s.log.Error("logstore: moved to quarantine: "+why,
		"path", path, "quarantine", dst,
		"action", "nothing was deleted; inspect the quarantined copy, and to restore it stop the server, repair it and move it back (see docs/operations.md)")
	return nil
}
