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
	// The unprivileged process reaches the socket and runs a copy of this
	// binary: the test's directories are root's alone.
	dir := filepath.Dir(r.sock)
	bin := filepath.Join(dir, "remote.test")
	copyFile(t, os.Args[0], bin)
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(r.sock, 0o777); err != nil {
		t.Fatal(err)
	}
	// The second is root of a user namespace of its own: every capability
	// there, none in the daemon's (the kernel asks capable(), of the initial
	// namespace).
	nobody := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}}
	for i, attr := range []*syscall.SysProcAttr{
		{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}},
		{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: nobody, GidMappings: nobody, Credential: &syscall.Credential{}},
	} {
		cmd := exec.Command(bin, "-test.run", "^TestLowPortChild$")
		cmd.Env = append(os.Environ(), "XRNIC_LOWPORT_SOCK="+r.sock, fmt.Sprintf("XRNIC_LOWPORT_PORT=%d", 7400+i))
		cmd.SysProcAttr = attr
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "lowport: ok") {
			t.Fatalf("the unprivileged process %d: %v\n%s", i, err, out)
		}
	}
}

// TestLowPortChild is TestHostileLowPortNeedsCapability's unprivileged process.
func TestLowPortChild(t *testing.T) {
	sock := os.Getenv("XRNIC_LOWPORT_SOCK")
	if sock == "" {
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
