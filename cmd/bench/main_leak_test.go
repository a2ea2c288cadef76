package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests with a goroutine leak check; with BENCH_TEST_MAIN=1 the
// test binary is bench itself, so that tests can run the real main and read its
// exit status and stderr.
func TestMain(m *testing.M) {
	if os.Getenv("BENCH_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
