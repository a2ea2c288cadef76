// Goroutine and file descriptor leak checks for the package tests.

package engine

import (
	"testing"

	"github.com/xrnic/xrnic/internal/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
