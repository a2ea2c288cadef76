// Port events from the real interface: a device opened on one end of a veth pair
// follows the link's state (down, up, removed), and the engine's SetPortState from
// any goroutine.

package verbs

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
	"github.com/xrnic/xrnic/testenv"
)

// portEvents collects a device's port and device events in a channel.
func portEvents(d *Device) (<-chan AsyncEvent, func()) {
	ch := make(chan AsyncEvent, 64)
	unreg := d.RegisterEventHandler(func(ev AsyncEvent) {
		switch ev.Type {
		case EventPortActive, EventPortErr, EventDeviceFatal:
			ch <- ev
		}
	})
	return ch, unreg
}

// nextEvent returns the next event of ch that is not skip.
func nextEvent(t *testing.T, ch <-chan AsyncEvent, skip EventType) AsyncEvent {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case ev := <-ch:
			if ev.Type != skip {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event other than %v", skip)
		}
	}
}

func waitPortState(t *testing.T, d *Device, want PortState) {
	t.Helper()
	if !waitFor(func() bool { return d.QueryPort().State == want }) {
		t.Fatalf("port state %v, want %v", d.QueryPort().State, want)
	}
}

// setLink sets the link up or down, or deletes it, inside its namespace.
func setLink(t *testing.T, e *testenv.Endpoint, op string) {
	t.Helper()
	err := e.Do(func() error {
		l, err := netlink.LinkByName(e.Name)
		if err != nil {
			return err
		}
		switch op {
		case "up":
			return netlink.LinkSetUp(l)
		case "down":
			return netlink.LinkSetDown(l)
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		t.Fatalf("link %s %s: %v", e.Name, op, err)
	}
}

func TestPortEventsFollowTheLink(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	var d *Device
	if err := p.A.Do(func() (err error) {
		d, err = Open(Options{Interface: p.A.Name, LinkKind: link.KindUDP, Logf: t.Logf})
		return err
	}); err != nil {
		t.Fatalf("Open on %s: %v", p.A.Name, err)
	}
	defer d.Close()
	ch, unreg := portEvents(d)
	defer unreg()
	// The table is the interface's (netdev.GIDTable): its IPv4 address is in it.
	if !slices.ContainsFunc(d.GIDs(), func(g netdev.GID) bool { return g.Addr() == p.A.IPv4 }) {
		t.Errorf("GID table %v lacks %v", d.GIDs(), p.A.IPv4)
	}
	waitPortState(t, d, PortActive)

	for range 2 {
		setLink(t, &p.A, "down")
		// Open's own PORT_ACTIVE may or may not come before the handler was registered.
		if ev := nextEvent(t, ch, EventPortActive); ev.Type != EventPortErr || ev.Port != 1 {
			t.Fatalf("after link down: %v on port %d, want %v", ev.Type, ev.Port, EventPortErr)
		}
		waitPortState(t, d, PortDown)
		setLink(t, &p.A, "up")
		if ev := nextEvent(t, ch, EventPortErr); ev.Type != EventPortActive || ev.Port != 1 {
			t.Fatalf("after link up: %v, want %v", ev.Type, EventPortActive)
		}
		waitPortState(t, d, PortActive)
	}

	// Removal: the port goes down and the device is fatal, once.
	setLink(t, &p.A, "delete")
	if ev := nextEvent(t, ch, EventPortActive); ev.Type != EventPortErr {
		t.Fatalf("after link removal: %v, want %v", ev.Type, EventPortErr)
	}
	if ev := nextEvent(t, ch, EventPortActive); ev.Type != EventDeviceFatal {
		t.Fatalf("after link removal: %v, want %v", ev.Type, EventDeviceFatal)
	}
	waitPortState(t, d, PortDown)
	if err := d.Close(); err != nil {
		t.Fatalf("Close after removal: %v", err)
	}
	select {
	case ev := <-ch:
		t.Fatalf("event after Close: %v", ev.Type)
	default:
	}
}

// TestSetPortState: the engine's port state from many goroutines at once raises
// one event per change, and QueryPort agrees with the last one.
func TestSetPortState(t *testing.T) {
	d, _ := memDevices(t)
	var mu sync.Mutex
	var seq []EventType
	defer d.RegisterEventHandler(func(ev AsyncEvent) {
		if ev.Type == EventPortActive || ev.Type == EventPortErr {
			mu.Lock()
			seq = append(seq, ev.Type)
			mu.Unlock()
		}
	})()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				d.Engine().SetPortState((i+g)%2 == 0)
			}
		})
	}
	wg.Wait()
	d.Engine().SetPortState(false)
	d.Engine().SetPortState(false) // no change, no event
	if d.QueryPort().State != PortDown {
		t.Fatalf("port %v after SetPortState(false)", d.QueryPort().State)
	}
	if !waitFor(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seq) > 0 && seq[len(seq)-1] == EventPortErr
	}) {
		t.Fatalf("last port event is not PORT_ERR")
	}
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	// Changes alternate, so the events do, whatever the interleaving of callers.
	for i := 1; i < len(seq); i++ {
		if seq[i] == seq[i-1] {
			t.Fatalf("events %d and %d are both %v: %v", i-1, i, seq[i], seq)
		}
	}
}

// TestPortWidthSpeedVeth: a port on veth (10000 Mb/s to ethtool) reports 1X
// FDR10, as rxe's on the same netdev (ib_get_eth_speed), for either kind of
// link.
func TestPortWidthSpeedVeth(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	for _, k := range []link.Kind{link.KindUDP, link.KindAFXDP} {
		var d *Device
		if err := p.A.Do(func() (err error) {
			d, err = Open(Options{Interface: p.A.Name, LinkKind: k, Logf: t.Logf})
			return err
		}); err != nil {
			t.Fatalf("Open %s on %s: %v", k, p.A.Name, err)
		}
		a := d.QueryPort()
		d.Close()
		if a.ActiveWidth != Width1X || a.ActiveSpeed != SpeedFDR10 {
			t.Errorf("%s: active width %v (%d) speed %v (%d), want 1X (1), 10.0 Gbps (8: FDR10)", k, a.ActiveWidth,
				a.ActiveWidth, a.ActiveSpeed, a.ActiveSpeed)
		}
	}
}
