//go:build !linux

package logstore

import "os"

// datasync flushes f to stable storage (fsync; fdatasync is Linux-only here).
func datasync(f *os.File) error { return f.Sync() }
