package remote

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/verbs"
	"github.com/xrnic/xrnic/verbs/rdmacm"
)

// The daemon binds rdma_cm ports as root, for processes that may not bind
// below 1024 themselves (--attach-group): the kernel's rdma_cm refuses them
// EACCES without CAP_NET_BIND_SERVICE (cma_use_port), and so does the daemon,
// asking of the process's own rights. A process without it (uid 65534, here
// this test binary run again) is refused port 80 and gets 7400, as is one
// that is root only in a user namespace of its own; this one, root, gets port
// 80.
func TestHostileLowPortNeedsCapability(t *testing.T) {
	r := newRig(t, server.Config{Allow: func(unix.Ucred) bool { return true }})
	d := r.dial(t)
	id, err := d.CreateCMID(rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := id.BindAddr(netip.AddrPortFrom(addrA, 80)); err != nil {
		t.Fatalf("root binding port 80: %v", err)
	}
	// The second is root of a user namespace of its own: every capability
	// there, none in the daemon's (the kernel asks capable(), of the initial
	// namespace).
	nobody := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}}
	for i, attr := range []*syscall.SysProcAttr{
		{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}},
		{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: nobody, GidMappings: nobody, Credential: &syscall.Credential{}},
	} {
		out, err := r.runAs(t, attr, "TestLowPortChild", fmt.Sprintf("XRNIC_LOWPORT_PORT=%d", 7400+i))
		if err != nil || !strings.Contains(out, "lowport: ok") {
			t.Fatalf("the unprivileged process %d: %v\n%s", i, err, out)
		}
	}
}

// runAs runs a copy of this test binary's test as attr says, with
// XRNIC_CHILD_SOCK naming the rig's socket, and returns its output. The
// unprivileged process must reach the socket and the binary: the test's
// directories are root's alone.
func (r *rig) runAs(t *testing.T, attr *syscall.SysProcAttr, test string, env ...string) (string, error) {
	t.Helper()
	dir := filepath.Dir(r.sock)
	bin := filepath.Join(dir, "remote.test")
	if _, err := os.Stat(bin); err != nil {
		copyFile(t, os.Args[0], bin)
	}
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(r.sock, 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^"+test+"$")
	cmd.Env = append(append(os.Environ(), "XRNIC_CHILD_SOCK="+r.sock), env...)
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestLowPortChild is TestHostileLowPortNeedsCapability's unprivileged process.
func TestLowPortChild(t *testing.T) {
	sock := os.Getenv("XRNIC_CHILD_SOCK")
	if sock == "" || os.Getenv("XRNIC_LOWPORT_PORT") == "" {
		t.Skip("run by TestHostileLowPortNeedsCapability")
	}
	port, err := strconv.Atoi(os.Getenv("XRNIC_LOWPORT_PORT"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range []struct {
		port uint16
		want error
	}{{80, verbs.ErrAccess}, {uint16(port), nil}} {
		id, err := d.CreateCMID(rdmacm.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := id.BindAddr(netip.AddrPortFrom(addrA, c.port)); !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Fatalf("binding port %d: %v, want %v", c.port, err, c.want)
		}
	}
	os.Stdout.WriteString("lowport: ok\n")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// One user may hold at most MaxUserSessions (--attach-max-user): where a group
// may attach, one member opening the device again and again cannot take every
// place. Root, at its bound of 2 with places left, is refused a third; another
// user (uid 65534, this binary run again) still attaches; a place root gives
// back is root's again.
func TestHostileUserSessions(t *testing.T) {
	r := newRig(t, server.Config{MaxSessions: 4, MaxUserSessions: 2, Allow: func(unix.Ucred) bool { return true }})
	a := r.dial(t)
	r.dial(t)
	if d, err := Dial(r.sock); err == nil {
		d.Close()
		t.Fatal("a third session of one user under a bound of 2 a user")
	}
	out, err := r.runAs(t, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}, "TestUserSessionsChild")
	if err != nil || !strings.Contains(out, "attached: ok") {
		t.Fatalf("another user, with root at its bound: %v\n%s", err, out)
	}
	a.Close()
	waitSessions(t, r.srv, 1)
	r.dial(t)
}

// TestUserSessionsChild is TestHostileUserSessions's other user.
func TestUserSessionsChild(t *testing.T) {
	sock := os.Getenv("XRNIC_CHILD_SOCK")
	if sock == "" {
		t.Skip("run by TestHostileUserSessions")
	}
	d, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("attached: ok\n")
}
