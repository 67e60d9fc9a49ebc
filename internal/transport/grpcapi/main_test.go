package grpcapi

import (
	"testing"

	"go.uber.org/goleak"
)

// The handlers' streams and long polls must be gone once each test has
// closed its server and connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
