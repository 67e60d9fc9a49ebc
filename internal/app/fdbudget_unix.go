//go:build unix

package app

import "syscall"

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard limit and returns
// the limits in force. Go's runtime does the same at start on Linux since
// Go 1.19 (and restores the original soft limit for child processes); this
// makes sure of it, and reads the result, on every platform.
func raiseNoFile() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, err
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		// Refused on some platforms above their own cap (macOS:
		// kern.maxfilesperproc): the limit in force is then what it was.
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised)
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, 0, err
		}
	}
	return uint64(lim.Cur), uint64(lim.Max), nil
}
