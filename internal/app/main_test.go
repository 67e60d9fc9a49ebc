package app

import (
	"testing"

	"go.uber.org/goleak"
)

// A started server runs listeners, watchers, the readiness loop and the
// domain's background work; Close must stop every one of them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
