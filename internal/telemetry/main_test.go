package telemetry_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tracer and meter providers (a batcher runs a goroutine) and the
// conformance suite's stores are shut down at each test's cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
