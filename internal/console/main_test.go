package console_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests serve the console with httptest servers, closed at cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
