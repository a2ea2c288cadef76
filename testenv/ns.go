// Package testenv builds the network environments xrnic's tests, benchmarks and demo
// run in: named network namespaces (visible to `ip netns exec`), veth pairs between
// them with addresses and neighbours, and the means to run code inside a namespace.
// Everything it creates is removed by Close, by t.Cleanup in the test wrappers, or,
// after a crash, by the sweep of stale namespaces at the next start.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func init() {
	// PLATFORM pitfall 12: keep the kernel's extack text in netlink errors.
	nl.EnableErrorMessageReporting = true
}

// netnsDir is where named namespaces are bind-mounted (netns.NewNamed, ip-netns(8)).
const netnsDir = "/run/netns"

// namePrefix starts every namespace this package creates: "xr-<pid>-<n>[-label]".
// The sweeper relies on it to find namespaces of dead processes.
const namePrefix = "xr-"

// ErrClosed: the namespace was closed.
var ErrClosed = errors.New("testenv: namespace closed")

var (
	nsCounter atomic.Uint64
	setupOnce = sync.OnceValue(setup)
)

// lockPath serializes setup between processes (test binaries run in parallel).
const lockPath = "/run/xrnic-testenv.lock"

// setup runs once per process before the first namespace: it prepares netnsDir the
// way ip-netns(8) does and sweeps stale namespaces.
func setup() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("testenv: lock %s: %w", lockPath, err)
	}
	// Make netnsDir a shared mount point of its own, as `ip netns add` does the first
	// time. Otherwise that first `ip netns add` binds the directory over itself with
	// copies of our mounts underneath, and the copies keep our namespaces (and their
	// veths) alive, invisible, after Close unmounts the visible ones.
	err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet
		if err = unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("testenv: make %s a shared mount point: %w", netnsDir, err)
	}
	_, _ = SweepStale()
	return nil
}

// NS is a named network namespace. Its methods may be called from any goroutine,
// Close included: a Do or Go function already inside keeps the namespace alive until
// it returns, and calls that start after Close fail with ErrClosed.
type NS struct {
	// Name is the namespace's name under /run/netns, usable with `ip netns exec`.
	Name string

	mu       sync.RWMutex // guards handle against Close while a setns is under way
	handle   netns.NsHandle
	closed   bool
	borrowed bool // JoinNS: someone else's, left in place by Close
}

// JoinNS opens an existing named namespace, one that ip-netns(8) or a harness
// made, for Do, Go and NewHandle. Its Close releases the handle and leaves the
// namespace in place.
func JoinNS(name string) (*NS, error) {
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("testenv: namespace %s: %w", name, err)
	}
	return &NS{Name: name, handle: h, borrowed: true}, nil
}

var labelRE = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// NewNS creates a named network namespace with a name unique to this process and
// call ("xr-<pid>-<n>-<label>"), with loopback up. On first use in a process it
// makes /run/netns a shared mount point as ip-netns(8) does and removes namespaces
// left by dead processes (SweepStale).
func NewNS(label string) (*NS, error) {
	if err := setupOnce(); err != nil {
		return nil, err
	}

	name := fmt.Sprintf("%s%d-%d", namePrefix, os.Getpid(), nsCounter.Add(1))
	if label = labelRE.ReplaceAllString(label, "_"); label != "" {
		name += "-" + label
	}
	h := netns.None() // not 0: that is a valid descriptor
	err := onNewThread(func() error {
		var err error
		// NewNamed moves this thread into the new namespace; onNewThread brings it back.
		if h, err = netns.NewNamed(name); err != nil {
			return fmt.Errorf("testenv: create namespace %s: %w", name, err)
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			return fmt.Errorf("testenv: loopback up in %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		if h.IsOpen() {
			h.Close()
		}
		// Unless the name was taken (then it is not ours), NewNamed may have left the
		// mount point file behind.
		if !errors.Is(err, os.ErrExist) {
			_ = deleteNamed(name)
		}
		return nil, err
	}
	return &NS{Name: name, handle: h}, nil
}

// Path returns the namespace's bind mount, for tools that take a path (nsenter --net=).
func (ns *NS) Path() string { return filepath.Join(netnsDir, ns.Name) }

// Do runs fn on a fresh goroutine locked to an OS thread that is switched into the
// namespace, and returns fn's error. The calling goroutine's thread is never touched.
// Sockets fn creates stay in the namespace and may be used afterwards from anywhere.
//
// fn must not call runtime.LockOSThread/UnlockOSThread, t.Fatal or t.FailNow (it runs
// on another goroutine). Goroutines fn starts do NOT run in the namespace; use Go. A
// panic in fn is re-raised in the caller, and its thread is discarded.
func (ns *NS) Do(fn func() error) error {
	return onNewThread(func() error {
		if err := ns.enter(); err != nil {
			return err
		}
		return fn()
	})
}

// Go starts fn on a new goroutine whose OS thread stays in the namespace for fn's
// whole life; the thread is discarded when fn returns, so it can never carry the
// namespace back into the Go scheduler. It returns once the goroutine is in the
// namespace, or the error that kept it out. Use it for long-running servers.
func (ns *NS) Go(fn func()) error {
	entered := make(chan error, 1)
	go func() {
		// Never unlocked: the thread dies with the goroutine.
		runtime.LockOSThread()
		if err := ns.enter(); err != nil {
			entered <- err
			return
		}
		entered <- nil
		fn()
	}()
	return <-entered
}

// Exec returns a command that runs name inside the namespace through
// `ip netns exec`, which also applies /etc/netns/<ns> and a matching /sys.
func (ns *NS) Exec(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// NewHandle returns a netlink handle whose sockets live in the namespace, for link,
// address, route and neighbour changes without switching threads. Close it after use.
func (ns *NS) NewHandle() (*netlink.Handle, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.closed {
		return nil, fmt.Errorf("%w: %s", ErrClosed, ns.Name)
	}
	h, err := netlink.NewHandleAt(ns.handle)
	if err != nil {
		return nil, fmt.Errorf("testenv: netlink handle in %s: %w", ns.Name, err)
	}
	return h, nil
}

// Close unmounts and forgets the namespace (one from JoinNS stays). The kernel destroys it, with the
// interfaces in it (a veth end takes its peer along), once no process, thread or open
// descriptor holds it any more. Closing twice is a no-op.
func (ns *NS) Close() error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.closed {
		return nil
	}
	ns.closed = true
	err := ns.handle.Close()
	if ns.borrowed {
		return err
	}
	if derr := deleteNamed(ns.Name); derr != nil {
		err = errors.Join(err, fmt.Errorf("testenv: delete namespace %s: %w", ns.Name, derr))
	}
	return err
}

// enter switches the calling (locked) thread into the namespace.
func (ns *NS) enter() error {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.closed {
		return fmt.Errorf("%w: %s", ErrClosed, ns.Name)
	}
	if err := netns.Set(ns.handle); err != nil {
		return fmt.Errorf("testenv: enter namespace %s: %w", ns.Name, err)
	}
	return nil
}

// onNewThread runs fn on a new goroutine locked to its thread and restores the
// thread's namespace afterwards. If restoring fails, or fn panics, the goroutine exits
// still locked, so the runtime discards the thread instead of reusing it in the wrong
// namespace (the pattern of cilium's netns helper).
func onNewThread(fn func() error) error {
	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		var res result
		// Deferred first so it runs last: the caller resumes only after orig is closed.
		defer func() { done <- res }()
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			res.err = fmt.Errorf("testenv: current namespace: %w", err)
			return
		}
		defer orig.Close()
		returned := false
		defer func() {
			if returned {
				return
			}
			// fn panicked or called runtime.Goexit: stay locked, the thread dies with us.
			if p := recover(); p != nil {
				res.panic = p
			} else {
				res.err = errors.New("testenv: fn called runtime.Goexit (t.FailNow?) inside the namespace")
			}
		}()
		ferr := fn()
		returned = true
		if err := netns.Set(orig); err != nil {
			res.err = errors.Join(ferr, fmt.Errorf("testenv: restore namespace (thread discarded): %w", err))
			return
		}
		runtime.UnlockOSThread()
		res.err = ferr
	}()
	r := <-done
	if r.panic != nil {
		panic(r.panic)
	}
	return r.err
}

// SweepStale removes namespaces named by this package whose creating process no
// longer exists, so crashed runs do not pile up namespaces. It returns the names it
// removed. A process in another PID namespace looks dead to it; a reused PID keeps a
// stale namespace alive until the next sweep after that process exits.
func SweepStale() ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("testenv: sweep: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		pid, ok := ownerPID(e.Name())
		if !ok || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if err := deleteNamed(e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("testenv: sweep %s: %w", e.Name(), err))
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// deleteNamed unmounts and removes a namespace's mount point, tolerating one that is
// already gone or was never mounted.
func deleteNamed(name string) error {
	p := filepath.Join(netnsDir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// ownerPID parses "xr-<pid>-<n>..." names.
func ownerPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return 0, false
	}
	pidStr, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	return pid, err == nil && pid > 0
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
