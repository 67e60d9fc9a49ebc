package sharegroup

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and the metadata needed to read it back,
// skipping the mtime update a full fsync would also write.
func fdatasync(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) {
		for {
			if serr = syscall.Fdatasync(int(fd)); serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
