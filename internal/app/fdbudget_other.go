//go:build !unix

package app

import "errors"

func raiseNoFile() (soft, hard uint64, err error) {
	return 0, 0, errors.New("RLIMIT_NOFILE is not available on this platform")
}
