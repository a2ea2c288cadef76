package shm

import (
	"os"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkRegionAccess is the measurement behind the daemon's choice of
// reaching a process's registered memory through a shared mapping rather
// than process_vm_readv/writev: the engine copies a packet's payload at a
// time (up to 4 KiB) into frames, and each copy through process_vm_readv is a
// system call.
//
//	go test -run '^$' -bench RegionAccess ./nic/shm/
func BenchmarkRegionAccess(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		r, err := Create("bench", 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		src := r.Bytes()
		dst := make([]byte, size)
		b.Run("mapping/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := 0; b.Loop(); i++ {
				off := (i * size) % (len(src) - size)
				copy(dst, src[off:off+size])
			}
		})
		b.Run("process_vm_readv/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			pid := os.Getpid()
			local := []unix.Iovec{{Base: &dst[0], Len: uint64(size)}}
			remote := []unix.RemoteIovec{{Len: size}}
			for i := 0; b.Loop(); i++ {
				off := (i * size) % (len(src) - size)
				remote[0].Base = uintptr(unsafe.Pointer(&src[off]))
				if n, err := unix.ProcessVMReadv(pid, local, remote, 0); err != nil || n != size {
					b.Fatal(n, err)
				}
			}
		})
		r.Close()
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
