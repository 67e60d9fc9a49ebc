package statelog

import (
	"testing"

	"go.uber.org/goleak"
)

// The state log's writer, interval and compaction loops stop when the log
// or store is closed; no test may leave one running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
