package logstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The file store runs background goroutines (reclaimer, interval fsync);
// every test must leave none behind once its stores are closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
