// Package leakcheck ends a package's tests with a check for leaked goroutines
// (go.uber.org/goleak) and leaked file descriptors.
package leakcheck

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// VerifyTestMain runs the tests, then fails the run if a goroutine outlived them
// or a file descriptor opened during them is still open. The runtime's own
// descriptors (the netpoller's epoll and eventfd, opened once and kept) are not
// leaks.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	before := openFDs()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	if code == 0 {
		for fd, target := range openFDs() {
			if _, ok := before[fd]; ok || runtimeFD(target) {
				continue
			}
			fmt.Fprintf(os.Stderr, "leakcheck: fd %s (%s) opened by the tests is still open\n", fd, target)
			code = 1
		}
	}
	os.Exit(code)
}

func runtimeFD(target string) bool {
	return target == "anon_inode:[eventpoll]" || target == "anon_inode:[eventfd]" ||
		strings.HasPrefix(target, "anon_inode:[pidfd]")
}

// openFDs maps each open descriptor to what it refers to.
func openFDs() map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	fds := make(map[string]string, len(ents))
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		fds[e.Name()] = target
	}
	return fds
}
