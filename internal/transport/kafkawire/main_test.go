package kafkawire

import (
	"testing"

	"go.uber.org/goleak"
)

// Every connection, long-poll watcher and share-session cleanup must be
// gone once the tests' listeners are closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
