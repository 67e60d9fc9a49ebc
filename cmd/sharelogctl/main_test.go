package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The commands under test stream, consume and read stdin on goroutines,
// and the tests run servers: none may outlive its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
