// Link notifications (RTNLGRP_LINK), turned into the port events the engine raises:
// the port goes active when the link is operationally up and down when it is not.

package netdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// LinkEvent is the state of a link after a change. A plain value.
type LinkEvent struct {
	Index int
	Name  string
	// Up is the operational state (IFF_UP && IFF_RUNNING), as Interface.Up.
	Up  bool
	MTU int
	// MAC changes the default GID (ib_core rebuilds the table on NETDEV_CHANGEADDR).
	MAC net.HardwareAddr
	// Removed: the link was deleted or moved to another namespace. Up is false.
	Removed bool
	// Err is set on the last event when the subscription failed on its own (for
	// example ENOBUFS: the socket overflowed and events were lost). The channel closes
	// after it; resubscribe and re-read the state.
	Err error
}

func (e LinkEvent) same(o LinkEvent) bool {
	return e.Index == o.Index && e.Name == o.Name && e.Up == o.Up && e.MTU == o.MTU &&
		e.Removed == o.Removed && bytes.Equal(e.MAC, o.MAC)
}

// eventBuffer absorbs bursts so the netlink socket is drained while the consumer is busy.
const eventBuffer = 16

// rcvBuf asks for a larger socket buffer (capped by net.core.rmem_max) so a burst of
// link changes does not overflow into ENOBUFS.
const rcvBuf = 1 << 20

// SubscribeLinkEvents reports the state of link ifindex (0: every link) in the calling
// thread's network namespace: first its current state, then one event per change of
// Up, MTU, name or MAC (other attribute changes are filtered out). The netlink socket
// is created in the calling thread's namespace, so calling this inside testenv.NS.Do
// watches that namespace; the events keep flowing after Do returns.
//
// The channel is closed when ctx is done, after the netlink socket is closed and the
// goroutines behind it have ended, or after an event with Err set. A missing link
// yields an error wrapping ErrNoInterface. The receiver must keep reading until the
// channel closes or cancel ctx; it is the only reader.
func SubscribeLinkEvents(ctx context.Context, ifindex int) (<-chan LinkEvent, error) {
	if ifindex < 0 {
		return nil, fmt.Errorf("%w: index %d", ErrNoInterface, ifindex)
	}
	if ifindex > 0 {
		if _, err := netlink.LinkByIndex(ifindex); err != nil {
			return nil, linkErr(fmt.Sprintf("index %d", ifindex), err)
		}
	}
	// The current thread's namespace, explicitly: netlink then opens the socket on a
	// locked thread that is in it, whichever thread it runs on.
	cur, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("netdev: current network namespace: %w", err)
	}
	defer cur.Close()

	// Our own cancel: it closes the socket on a subscription error too, and gives the
	// library a non-nil done channel even for a context that is never cancelled.
	sctx, cancel := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		lastErr error
	)
	updates := make(chan netlink.LinkUpdate, eventBuffer)
	err = netlink.LinkSubscribeWithOptions(updates, sctx.Done(), netlink.LinkSubscribeOptions{
		Namespace:         &cur,
		ListExisting:      true,
		ReceiveBufferSize: rcvBuf,
		ErrorCallback: func(err error) {
			mu.Lock()
			lastErr = err
			mu.Unlock()
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("netdev: subscribe to link events: %w", err)
	}

	out := make(chan LinkEvent, eventBuffer)
	go func() {
		defer close(out)
		defer cancel()
		last := make(map[int]LinkEvent)
		// Drain until the library closes updates: it may be blocked sending to us.
		for u := range updates {
			if sctx.Err() != nil {
				continue
			}
			a := u.Attrs()
			if ifindex != 0 && a.Index != ifindex {
				continue
			}
			ev := LinkEvent{
				Index: a.Index,
				Name:  a.Name,
				Up:    operUp(a.RawFlags),
				MTU:   a.MTU,
				MAC:   append(net.HardwareAddr(nil), a.HardwareAddr...),
			}
			if u.Header.Type == unix.RTM_DELLINK {
				ev.Removed, ev.Up = true, false
			}
			if prev, ok := last[ev.Index]; ok && prev.same(ev) {
				continue
			}
			last[ev.Index] = ev
			select {
			case out <- ev:
			case <-sctx.Done():
			}
		}
		if sctx.Err() != nil {
			return
		}
		mu.Lock()
		err := lastErr
		mu.Unlock()
		if err == nil {
			err = errors.New("netlink subscription closed")
		}
		select {
		case out <- LinkEvent{Index: ifindex, Err: fmt.Errorf("netdev: link events: %w", err)}:
		case <-sctx.Done():
		}
	}()
	return out, nil
}
