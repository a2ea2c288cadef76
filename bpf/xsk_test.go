package bpf

// A minimal bound AF_XDP socket for tests, until nic/xsk is ready: a UMEM and
// rings sized but never mapped. Frames steered to it are counted in its
// XDP_STATISTICS (dropped: the fill ring is empty), which is all the tests need.

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/testenv"
)

type testXSK struct {
	fd   int
	umem []byte
}

// newTestXSK binds an AF_XDP socket in copy mode with XDP_USE_SG to queue of
// end e; t.Cleanup closes it. The socket is made in e's namespace, where bind
// then looks the interface up.
func newTestXSK(t *testing.T, e *testenv.Endpoint, queue int) *testXSK {
	t.Helper()
	const chunk, chunks, ring = 4096, 16, 16
	var fd int
	in(t, e.NS, func() (err error) {
		if fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			return fmt.Errorf("socket(AF_XDP): %w", err)
		}
		return nil
	})
	umem, err := unix.Mmap(-1, 0, chunk*chunks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(fd)
		t.Fatalf("mmap umem: %v", err)
	}
	x := &testXSK{fd: fd, umem: umem}
	t.Cleanup(x.close)
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))), Len: uint64(len(umem)), Size: chunk}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		t.Fatalf("XDP_UMEM_REG: %v", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, ring); err != nil {
			t.Fatalf("ring option %d: %v", opt, err)
		}
	}
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY | unix.XDP_USE_SG, Ifindex: uint32(e.Index), QueueID: uint32(queue)}
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatalf("bind AF_XDP to %s (ifindex %d) queue %d: %v", e.Name, e.Index, queue, err)
	}
	return x
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

// received returns how many frames reached the socket: with no fill ring
// entries, every one is dropped and counted.
func (x *testXSK) received(t *testing.T) uint64 {
	t.Helper()
	var st unix.XDPStatistics
	n := uint32(unsafe.Sizeof(st))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(x.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		t.Fatalf("XDP_STATISTICS: %v", e)
	}
	return st.Rx_dropped
}

func (x *testXSK) close() {
	if x.fd >= 0 {
		unix.Close(x.fd)
		x.fd = -1
	}
	if x.umem != nil {
		unix.Munmap(x.umem)
		x.umem = nil
	}
}
