package cm

import (
	"testing"

	"github.com/xrnic/xrnic/internal/testutil/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
