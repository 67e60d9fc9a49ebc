package authz

import (
	"testing"

	"go.uber.org/goleak"
)

// The token file watcher and the concurrent checks of the tests must be
// gone once each test has closed what it opened.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
