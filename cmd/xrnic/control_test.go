package main

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/verbs"
)

// controlDaemon serves the control socket sock for a daemon whose device is
// on a memory link, logging to logs, until the test ends.
func controlDaemon(t *testing.T, logs io.Writer, sock string) *daemon {
	t.Helper()
	la, lb, err := link.NewMemoryPair(link.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := verbs.Open(verbs.Options{Link: la, GIDs: []verbs.GID{verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.31"))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close(); la.Close(); lb.Close() })
	d := &daemon{lg: &logger{w: logs}, l: la, dev: dev, pid: os.Getpid(), comm: "test"}
	ln, err := listenControl(sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := d.serveControl(ln, &wg)
	t.Cleanup(func() { stop(); wg.Wait() })
	return d
}

// asNobody runs a python3 client of sock as the unprivileged user nobody and
// returns what it printed: the reply, or ERR and the errno's name.
func asNobody(t *testing.T, sock string) string {
	t.Helper()
	const client = `import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    s.sendall(b"snapshot\n")
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    print(out.decode())
except OSError as e:
    print("ERR", __import__("errno").errorcode.get(e.errno, e.errno))
`
	cmd := exec.Command("/usr/bin/python3", "-c", client, sock) // Debian's: a pyenv shim under /root is not nobody's to run
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 as nobody: %v: %s", err, out)
	}
	return string(out)
}

// TestControlSocketModes plays an unprivileged local user against the control
// socket (issue: under umask 000 the socket was srwxrwxrwx and any user read
// every session's keys, addresses and PSNs). The socket is 0600 whatever the
// umask; nobody cannot connect; and with the mode widened by hand the daemon
// still answers nobody with a refusal, not the snapshot, while root reads it.
func TestControlSocketModes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it runs a client as the user nobody")
	}
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	// A directory nobody may enter, as /run is, with the socket's own directory
	// created by the daemon.
	base, err := os.MkdirTemp("", "xrnic-ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(base, "run", "x.sock")

	var logs testutil.SyncBuffer
	d := controlDaemon(t, &logs, sock)
	dev := d.dev

	for path, want := range map[string]os.FileMode{filepath.Dir(sock): controlDirMode, sock: controlSockMode} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v under umask 000, want %v", path, fi.Mode().Perm(), want)
		}
	}
	if out := asNobody(t, sock); !strings.HasPrefix(out, "ERR EACCES") {
		t.Fatalf("nobody connecting to the control socket: %q, want EACCES", out)
	}
	// Widened by hand: the daemon's peer check refuses nobody all the same.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	out := asNobody(t, sock)
	if !strings.Contains(out, "permission denied") || strings.Contains(out, "resources") {
		t.Fatalf("nobody on a widened socket got %q, want a refusal and no snapshot", out)
	}
	if !strings.Contains(logs.String(), "refused a peer with uid 65534") {
		t.Errorf("the refusal is not in the daemon's log: %q", logs.String())
	}
	s, err := fetchSnapshot(sock)
	if err != nil || s.Device != dev.Name() {
		t.Fatalf("root's snapshot: %+v, %v", s.Device, err)
	}
}

// TestControlSocketConnectionBound plays a client that opens connections and
// sends nothing: at most maxControlConns are held (each for controlTimeout at
// most); the next is closed at once, and a slot freed is served again.
func TestControlSocketConnectionBound(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "x.sock")
	dev := controlDaemon(t, io.Discard, sock).dev
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range maxControlConns {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// The daemon takes them in order; the one past the bound reads EOF at once.
	extra, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(controlTimeout / 2))
	if n, err := extra.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("connection past the bound: read %d, %v; want EOF at once", n, err)
	}
	idle[0].Close()
	idle = idle[1:]
	// A freed slot serves again (the daemon notices the close when the idle
	// exchange's read ends, which is at once for a closed peer).
	var s snapshot
	for end := time.Now().Add(controlTimeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if s, err = fetchSnapshot(sock); err == nil {
			break
		}
	}
	if err != nil || s.Device != dev.Name() {
		t.Fatalf("after a slot was freed: %v", err)
	}
}

// TestInGroups: --attach-group's check of a process's supplementary groups
// (SO_PEERCRED gives its primary group only), read from /proc/PID/status.
func TestInGroups(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{4242, 4343}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	pid := int32(cmd.Process.Pid)
	for _, c := range []struct {
		gid  int
		want bool
	}{{4242, true}, {4343, true}, {4244, false}, {424, false}, {65534, false}} {
		if got := inGroups(pid, c.gid); got != c.want {
			t.Errorf("group %d: %v, want %v", c.gid, got, c.want)
		}
	}
	if inGroups(-1, 4242) {
		t.Error("a process that cannot be read is in a group")
	}
}
