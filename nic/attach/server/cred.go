package server

import (
	"fmt"
	"os"
	"strconv"

	"github.com/xrnic/xrnic/internal/procstatus"
)

// capable reports whether process pid holds capability c in its effective set
// (CapEff in /proc/PID/status) in the daemon's user namespace: what the
// kernel asks of the caller (capable(), of the initial namespace) where the
// daemon acts for it with its own, greater, rights. The root of a user
// namespace of its own holds every capability there and none here. A process
// that cannot be read has none.
func capable(pid int32, c int) bool {
	own, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		return false
	}
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid)); err != nil || ns != own {
		return false
	}
	v, ok := procstatus.Field(pid, "CapEff")
	if !ok {
		return false
	}
	bits, err := strconv.ParseUint(v, 16, 64)
	return err == nil && c < 64 && bits&(1<<c) != 0
}
