package link

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Capture is a Link that records every frame the wrapped link reads or
// writes, both directions, in pcap format (LINKTYPE_ETHERNET), as ibdump
// records a ConnectX's traffic: the XDP program redirects RoCEv2 frames to
// AF_XDP before the kernel's stack, so tcpdump on the interface sees none of
// the frames xrnic receives. Over the UDP link the frames are as the engine
// sees them (the kernel's IP and UDP headers as the link rebuilds them).
//
// It follows the Link contract; recording takes a lock of its own, shared by
// the directions only. Flush writes out what is buffered; Close flushes and
// closes the wrapped link (a caller that does not own the link flushes only).
type Capture struct {
	Link

	mu  sync.Mutex
	bw  *bufio.Writer
	w   *pcapgo.Writer
	ci  gopacket.CaptureInfo
	err error // the first write error: recording stops there
	now func() time.Time
}

// captureSnap is the longest frame a capture keeps whole: a jumbo frame.
const captureSnap = 65535

// NewCapture wraps l, writing the pcap header to w at once.
func NewCapture(l Link, w io.Writer) (*Capture, error) {
	c := &Capture{Link: l, bw: bufio.NewWriterSize(w, 1<<16), now: time.Now}
	c.w = pcapgo.NewWriter(c.bw)
	if err := c.w.WriteFileHeader(captureSnap, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("link: capture: %w", err)
	}
	if err := c.bw.Flush(); err != nil {
		return nil, fmt.Errorf("link: capture: %w", err)
	}
	return c, nil
}

// ReadBatch reads from the wrapped link and records what it got.
func (c *Capture) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	n, err := c.Link.ReadBatch(bufs, sizes)
	if n > 0 {
		c.mu.Lock()
		for i := range n {
			c.record(bufs[i][:sizes[i]])
		}
		c.mu.Unlock()
	}
	return n, err
}

// WriteBatch writes to the wrapped link and records the frames it took.
func (c *Capture) WriteBatch(frames [][]byte) (int, error) {
	n, err := c.Link.WriteBatch(frames)
	if n > 0 {
		c.mu.Lock()
		for _, f := range frames[:n] {
			c.record(f)
		}
		c.mu.Unlock()
	}
	return n, err
}

// record writes one frame; c.mu is held.
func (c *Capture) record(f []byte) {
	if c.err != nil {
		return
	}
	c.ci.Timestamp = c.now()
	c.ci.CaptureLength = min(len(f), captureSnap)
	c.ci.Length = len(f)
	c.err = c.w.WritePacket(c.ci, f[:c.ci.CaptureLength])
}

// Flush writes out the buffered frames and reports the first error recording
// met, if any.
func (c *Capture) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = c.bw.Flush()
	}
	if c.err != nil {
		return fmt.Errorf("link: capture: %w", c.err)
	}
	return nil
}

// Close flushes the capture, then closes the wrapped link.
func (c *Capture) Close() error {
	ferr := c.Flush()
	if err := c.Link.Close(); err != nil {
		return err
	}
	return ferr
}

// BeforeWait implements PreWaiter when the wrapped link does.
func (c *Capture) BeforeWait() {
	if w, ok := c.Link.(PreWaiter); ok {
		w.BeforeWait()
	}
}

// WakeFD implements Waker when the wrapped link does.
func (c *Capture) WakeFD() (int, error) {
	if w, ok := c.Link.(Waker); ok {
		return w.WakeFD()
	}
	return -1, errNoWakeFD
}
