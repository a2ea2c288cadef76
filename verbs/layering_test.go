package verbs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// below are the packages under verbs that applications must not import: verbs
// re-exports what they need from them.
var below = []string{"nic/engine", "nic/qpattr", "nic/mr", "nic/cq", "nic/netdev"}

// layeringExceptions are the imports of a package below verbs that the README
// names: the daemon finds and watches its interface with nic/netdev, as the
// kernel's rxe driver uses the netdev notifier.
var layeringExceptions = map[string][]string{
	"cmd/xrnic": {"nic/netdev"},
}

// TestLayeringAppsImportOnlyVerbs: every package above verbs (the commands and
// whatever imports verbs) imports nothing below it but nic/link and nic/errs,
// except what layeringExceptions names.
func TestLayeringAppsImportOnlyVerbs(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "interop", "-f",
		"{{.ImportPath}} {{join .Imports \" \"}}", "github.com/xrnic/xrnic/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/xrnic/xrnic/"
	checked := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], mod)
		imports := f[1:]
		above := strings.HasPrefix(pkg, "cmd/") || slices.Contains(imports, mod+"verbs")
		if !above || pkg == "verbs" {
			continue
		}
		checked++
		for _, imp := range imports {
			rel := strings.TrimPrefix(imp, mod)
			if slices.Contains(below, rel) && !slices.Contains(layeringExceptions[pkg], rel) {
				t.Errorf("%s imports %s: use verbs", pkg, rel)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package above verbs found: the check checks nothing")
	}
}

// TestLayeringNoEngineBehindVerbs: Device.Engine is for verbs' own tests; the
// commands' code reaches the device through verbs' methods only.
func TestLayeringNoEngineBehindVerbs(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}} {{join .GoFiles \" \"}}",
		"github.com/xrnic/xrnic/cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	n := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		for _, name := range f[1:] {
			src, err := os.ReadFile(filepath.Join(f[0], name))
			if err != nil {
				t.Fatal(err)
			}
			n++
			if strings.Contains(string(src), ".Engine()") {
				t.Errorf("%s/%s calls Device.Engine: use verbs' methods", f[0], name)
			}
		}
	}
	if n == 0 {
		t.Fatal("no source files under cmd/")
	}
}

// TestLayeringCommandsDoNotLinkTesting: the binaries link no package testing
// (which would register its flags and its code in them); testenv, which bench
// links for `bench link`, takes a TB interface for that reason.
func TestLayeringCommandsDoNotLinkTesting(t *testing.T) {
	for _, cmd := range []string{"cmd/bench", "cmd/xrnic"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/xrnic/xrnic/"+cmd).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, "github.com/xrnic/xrnic/verbs") {
			t.Fatalf("%s: the dependency list lacks verbs: %q", cmd, deps)
		}
		if slices.Contains(deps, "testing") {
			t.Errorf("%s links package testing", cmd)
		}
	}
}
