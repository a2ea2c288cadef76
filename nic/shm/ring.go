// Package shm is the data path between the xrnic daemon and the processes
// attached to it: single-producer single-consumer rings in memory both map
// (a memfd the daemon creates and passes over the attach socket), and the
// layouts of the entries that travel on them (send and receive work requests,
// completions). docs/attach.md is the written contract; a C client implements
// the same layout.
//
// Each side keeps its own index privately and only publishes it to the shared
// header: what it reads of the other side's index, and every entry, is
// untrusted, since the other process may write anything there at any moment.
// A Ring reports an index that cannot be (more entries than the ring holds) as
// ErrCorrupt and never reads outside its memory.
package shm

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// ErrCorrupt is a ring whose shared index the other side set to an impossible
// value.
var ErrCorrupt = errors.New("shm: ring index corrupted")

// ErrLayout is a ring description that does not fit its memory.
var ErrLayout = errors.New("shm: bad ring layout")

// The ring header: one cache line per word, so that the producer's and the
// consumer's stores never share a line.
const (
	offProd   = 0   // u32: entries produced, free-running (the producer's)
	offCons   = 64  // u32: entries consumed, free-running (the consumer's)
	offFlags  = 128 // u32: RingNeedWakeup (the consumer's)
	offArm    = 192 // u32: CQ rings: ArmNext or ArmSolicited (the consumer's)
	offEvents = 196 // u32: CQ rings: completion events signalled (the producer's)
	HeaderLen = 256 // entries start here, at the ring's offset + HeaderLen
)

// Flags in the header's flags word.
const (
	// RingNeedWakeup is set by a consumer that is about to sleep: a producer
	// that sees it after publishing rings the doorbell (the need_wakeup idea of
	// AF_XDP, XDP_RING_NEED_WAKEUP).
	RingNeedWakeup = 1 << 0
)

// Arm values of a CQ ring (ibv_req_notify_cq): the consumer sets one; the
// producer clears it and signals the completion channel when it publishes a
// completion that matches.
const (
	ArmNext      = 1 // any completion
	ArmSolicited = 2 // a solicited receive, or an error
)

// Ring is one side of a ring in shared memory. Its producer methods (Reserve,
// Commit) or its consumer methods (Peek, Release) are for one goroutine at a
// time; the two sides are normally two processes.
type Ring struct {
	hdr     []byte
	entries []byte
	n       uint32 // a power of two
	esize   int
	own     uint32 // this side's index: prod for a producer, cons for a consumer
}

// RingSize is the bytes a ring of n entries of esize bytes takes.
func RingSize(n, esize int) int { return HeaderLen + n*esize }

// NewRing lays a ring of n entries (a power of two) of esize bytes (a multiple
// of 8) over mem[off:]. producer says which side this is; its index starts at
// what the header holds (zero in a fresh memfd).
func NewRing(mem []byte, off, n, esize int, producer bool) (*Ring, error) {
	if n <= 0 || n&(n-1) != 0 || n > 1<<24 || esize <= 0 || esize%8 != 0 || off < 0 || off%64 != 0 ||
		off > len(mem) || len(mem)-off < RingSize(n, esize) {
		return nil, fmt.Errorf("%w: %d entries of %d bytes at %d in %d bytes", ErrLayout, n, esize, off, len(mem))
	}
	r := &Ring{hdr: mem[off : off+HeaderLen], entries: mem[off+HeaderLen : off+RingSize(n, esize)],
		n: uint32(n), esize: esize}
	if producer {
		r.own = r.word(offProd).Load()
	} else {
		r.own = r.word(offCons).Load()
	}
	return r, nil
}

func (r *Ring) word(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.hdr[off]))
}

// Len is the number of entries; EntrySize their size.
func (r *Ring) Len() int       { return int(r.n) }
func (r *Ring) EntrySize() int { return r.esize }

func (r *Ring) entry(i uint32) []byte {
	at := int(i&(r.n-1)) * r.esize
	return r.entries[at : at+r.esize : at+r.esize]
}

// Free is how many entries the producer can reserve now.
func (r *Ring) Free() (int, error) {
	used := r.own - r.word(offCons).Load()
	if used > r.n {
		return 0, ErrCorrupt
	}
	return int(r.n - used), nil
}

// Reserve returns the k-th free entry after the published ones (k from 0), or
// nil when the ring has no room for it. The producer fills it and publishes
// it with Commit.
func (r *Ring) Reserve(k int) ([]byte, error) {
	free, err := r.Free()
	if err != nil || k >= free {
		return nil, err
	}
	return r.entry(r.own + uint32(k)), nil
}

// Commit publishes k reserved entries: the stores into them happen before the
// index's (a release store; the consumer's load of it acquires).
func (r *Ring) Commit(k int) {
	r.own += uint32(k)
	r.word(offProd).Store(r.own)
}

// Available is how many entries the consumer can read now.
func (r *Ring) Available() (int, error) {
	avail := r.word(offProd).Load() - r.own
	if avail > r.n {
		return 0, ErrCorrupt
	}
	return int(avail), nil
}

// Peek returns the k-th unread entry (k from 0), or nil when there is none. The
// producer may still write into it (it should not, but it can): copy what is
// used before checking it.
func (r *Ring) Peek(k int) ([]byte, error) {
	avail, err := r.Available()
	if err != nil || k >= avail {
		return nil, err
	}
	return r.entry(r.own + uint32(k)), nil
}

// Entry is the k-th entry after this side's index, for a k below what one
// call of Available (a consumer) or Free (a producer) reported. A side that
// does not trust the other counts once and fetches what it counted with
// Entry: Peek and Reserve load the other side's index again, which may have
// moved back meanwhile, and then find no entry.
func (r *Ring) Entry(k int) []byte { return r.entry(r.own + uint32(k)) }

// Release gives k read entries back to the producer.
func (r *Ring) Release(k int) {
	r.own += uint32(k)
	r.word(offCons).Store(r.own)
}

// SetNeedWakeup sets or clears RingNeedWakeup (the consumer's).
func (r *Ring) SetNeedWakeup(on bool) {
	if on {
		r.word(offFlags).Or(RingNeedWakeup)
	} else {
		r.word(offFlags).And(^uint32(RingNeedWakeup))
	}
}

// NeedWakeup reports RingNeedWakeup (read by the producer after Commit).
func (r *Ring) NeedWakeup() bool { return r.word(offFlags).Load()&RingNeedWakeup != 0 }

// Arm sets the CQ ring's notification request (the consumer's); Disarm takes
// it (the producer's), returning what was set.
func (r *Ring) Arm(v uint32)   { r.word(offArm).Store(v) }
func (r *Ring) Disarm() uint32 { return r.word(offArm).Swap(0) }
func (r *Ring) Armed() uint32  { return r.word(offArm).Load() }

// Notified counts a completion event of a CQ ring (the producer's, before it
// signals the channel); Events reads the count, by which a client finds which
// of a channel's CQs the event was for.
func (r *Ring) Notified()      { r.word(offEvents).Add(1) }
func (r *Ring) Events() uint32 { return r.word(offEvents).Load() }
func (r *Ring) Index() uint32  { return r.own }
func (r *Ring) String() string { return fmt.Sprintf("ring(%d x %d, at %d)", r.n, r.esize, r.own) }
