package broker

import (
	"testing"

	"go.uber.org/goleak"
)

// The long-poll waiters and the tests' concurrent fetches and produces
// must be gone once each test is over.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
