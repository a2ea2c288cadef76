// Test wrappers: root check, and removal through t.Cleanup so a failing or panicking
// test still leaves nothing behind. They take TB, the part of TB they use,
// so that the package does not import "testing": the commands (bench link) link
// testenv, and a binary that links package testing registers its flags.

package testenv

import (
	"os"
	"regexp"
)

// TB is what the test wrappers need of a TB (which satisfies it).
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
}

// requireRoot skips tb without root, or fails it under CI=true (testutil.RequireRoot,
// without package testing).
func requireRoot(tb TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("test needs root, and CI=true forbids skipping")
	}
	tb.Skip("test needs root (netns, veth, XDP, AF_XDP); skipped because CI is unset")
}

var testNameRE = regexp.MustCompile(`[^A-Za-z0-9]+`)

// testLabel turns a test name into a short namespace label.
func testLabel(tb TB) string {
	l := testNameRE.ReplaceAllString(tb.Name(), "_")
	if len(l) > 24 {
		l = l[:24]
	}
	return l
}

// NewTestNS returns a namespace removed when tb ends, pass or fail. It skips (or, under
// CI=true, fails) without root.
func NewTestNS(tb TB) *NS {
	tb.Helper()
	requireRoot(tb)
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
func NewTestPair(tb TB, opts PairOptions) *Pair {
	tb.Helper()
	requireRoot(tb)
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
