// Package procstatus reads /proc/PID/status, where the daemon learns what
// SO_PEERCRED does not tell of a peer: its effective capabilities and its
// supplementary groups.
package procstatus

import (
	"bytes"
	"fmt"
	"os"
)

// Field returns the value of the line name of /proc/PID/status ("CapEff",
// "Groups"), trimmed; false when the process or the line cannot be read.
// Safe for concurrent use.
func Field(pid int32, name string) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", false
	}
	for l := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(l, []byte(name+":")); ok {
			return string(bytes.TrimSpace(rest)), true
		}
	}
	return "", false
}
