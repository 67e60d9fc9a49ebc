package sharegroup

import (
	"testing"

	"go.uber.org/goleak"
)

// The manager runs goroutines (state-log writer, compactor, watchers,
// timers, the session sweeper); every test must leave none behind once
// its manager is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
