package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

// Every stack, cluster instance, JetStream cluster, client and stream of
// the suite is closed at its test's cleanup; none may leave a goroutine
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
