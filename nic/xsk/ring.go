package xsk

// The four AF_XDP rings as seen from user space. Each ring is a single-producer
// single-consumer circular buffer in memory shared with the kernel
// (af_xdp.rst "Rings"): we produce on the fill and TX rings and consume the RX
// and completion rings. As in gVisor's pkg/xdp and libxdp, the producer and
// consumer indices are cached locally; the shared words are touched with
// sync/atomic only when the cache runs dry (peek) and once per batch (submit,
// release). Go's atomics are sequentially consistent, which covers the
// read-barrier and write-barrier af_xdp.rst asks for around the descriptors.

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ringWords are the shared words of one ring and our cached copies of them.
type ringWords struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	mask     uint32
	size     uint32
	// cachedProd is our producer (producer rings) or the last producer we read
	// (consumer rings); cachedCons likewise for the consumer.
	cachedProd uint32
	cachedCons uint32
}

func (r *ringWords) init(mem []byte, off unix.XDPRingOffset, size uint32) {
	r.producer = (*uint32)(unsafe.Pointer(&mem[off.Producer]))
	r.consumer = (*uint32)(unsafe.Pointer(&mem[off.Consumer]))
	r.flags = (*uint32)(unsafe.Pointer(&mem[off.Flags]))
	r.size = size
	r.mask = size - 1
	r.cachedProd = atomic.LoadUint32(r.producer)
	r.cachedCons = atomic.LoadUint32(r.consumer)
}

// free returns the free slots of a producer ring, reading the kernel's consumer
// only when the cached view shows fewer than want.
func (r *ringWords) free(want uint32) uint32 {
	n := r.size - (r.cachedProd - r.cachedCons)
	if n < want {
		r.cachedCons = atomic.LoadUint32(r.consumer)
		n = r.size - (r.cachedProd - r.cachedCons)
	}
	return n
}

// queued returns the entries of a producer ring the kernel has not consumed,
// reading its consumer.
func (r *ringWords) queued() uint32 {
	r.cachedCons = atomic.LoadUint32(r.consumer)
	return r.cachedProd - r.cachedCons
}

// submit publishes our producer: the kernel may read every entry written so far.
func (r *ringWords) submit() { atomic.StoreUint32(r.producer, r.cachedProd) }

// avail returns the entries of a consumer ring, reading the kernel's producer
// only when the cached view is empty.
func (r *ringWords) avail() uint32 {
	n := r.cachedProd - r.cachedCons
	if n == 0 {
		r.cachedProd = atomic.LoadUint32(r.producer)
		n = r.cachedProd - r.cachedCons
	}
	return n
}

// release publishes our consumer: the kernel may reuse the consumed slots.
func (r *ringWords) release() { atomic.StoreUint32(r.consumer, r.cachedCons) }

// needWakeup reads XDP_RING_NEED_WAKEUP (af_xdp.rst "XDP_USE_NEED_WAKEUP").
func (r *ringWords) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// addrRing is the fill or completion ring: entries are UMEM addresses.
type addrRing struct {
	ringWords
	addrs []uint64
}

func (r *addrRing) init(mem []byte, off unix.XDPRingOffset, size uint32) {
	r.ringWords.init(mem, off, size)
	r.addrs = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), size)
}

// descRing is the RX or TX ring: entries are struct xdp_desc.
type descRing struct {
	ringWords
	descs []unix.XDPDesc
}

func (r *descRing) init(mem []byte, off unix.XDPRingOffset, size uint32) {
	r.ringWords.init(mem, off, size)
	r.descs = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&mem[off.Desc])), size)
}

const (
	sizeofAddr = uint64(unsafe.Sizeof(uint64(0)))
	sizeofDesc = uint64(unsafe.Sizeof(unix.XDPDesc{}))
)
