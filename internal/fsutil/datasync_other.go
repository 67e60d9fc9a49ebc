//go:build !linux

package fsutil

import "os"

// Fdatasync flushes f to stable storage (fsync; fdatasync is Linux-only here).
func Fdatasync(f *os.File) error { return f.Sync() }
