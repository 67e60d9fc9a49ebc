//go:build !unix

package logstore

import (
	"os"
	"path/filepath"
)

// lockDir creates dir/LOCK; without flock there is no exclusion here.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
}
