// Test wrappers: root check, and removal through t.Cleanup so a failing or panicking
// test still leaves nothing behind.

package testenv

import (
	"regexp"
	"testing"

	"github.com/xrnic/xrnic/internal/testutil"
)

var testNameRE = regexp.MustCompile(`[^A-Za-z0-9]+`)

// testLabel turns a test name into a short namespace label.
func testLabel(tb testing.TB) string {
	l := testNameRE.ReplaceAllString(tb.Name(), "_")
	if len(l) > 24 {
		l = l[:24]
	}
	return l
}

// NewTestNS returns a namespace removed when tb ends, pass or fail. It skips (or, under
// CI=true, fails) without root.
func NewTestNS(tb testing.TB) *NS {
	tb.Helper()
	testutil.RequireRoot(tb)
	ns, err := NewNS(testLabel(tb))
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() {
		if err := ns.Close(); err != nil {
			tb.Errorf("testenv: %v", err)
		}
	})
	return ns
}

// NewTestPair returns a veth pair (NewVethPair) removed when tb ends, pass or fail. It
// skips (or, under CI=true, fails) without root.
func NewTestPair(tb testing.TB, opts PairOptions) *Pair {
	tb.Helper()
	testutil.RequireRoot(tb)
	if opts.Label == "" {
		opts.Label = testLabel(tb)
	}
	p, err := NewVethPair(opts)
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("testenv: %v", err)
		}
	})
	return p
}
