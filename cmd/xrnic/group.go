package main

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/internal/procstatus"
)

// openToGroup opens the attach socket at path to the processes of group
// (--attach-group): mode 0660 in that group, as Debian opens
// /dev/infiniband/uverbs* to its users. It returns the peer check: root, the
// daemon's user, or a process whose groups include the group.
func openToGroup(path, group string) (func(unix.Ucred) bool, error) {
	g, err := user.LookupGroup(group)
	if err != nil {
		if g, err = user.LookupGroupId(group); err != nil {
			return nil, fmt.Errorf("no group %q", group)
		}
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return nil, err
	}
	if err := os.Chown(path, -1, gid); err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		return nil, err
	}
	euid := uint32(os.Geteuid())
	return func(u unix.Ucred) bool {
		return u.Uid == 0 || u.Uid == euid || u.Gid == uint32(gid) || inGroups(u.Pid, gid)
	}, nil
}

// inGroups reports whether gid is among the process's supplementary groups
// (the Groups line of /proc/PID/status: SO_PEERCRED gives the primary group
// only).
func inGroups(pid int32, gid int) bool {
	v, _ := procstatus.Field(pid, "Groups")
	for _, f := range strings.Fields(v) {
		if n, err := strconv.Atoi(f); err == nil && n == gid {
			return true
		}
	}
	return false
}
