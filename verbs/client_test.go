package verbs

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xrnic/xrnic/nic/cm"
	"github.com/xrnic/xrnic/nic/link"
	"github.com/xrnic/xrnic/nic/netdev"
)

// watchdog fails the test if fn does not return in time: a deadlock detector, not
// a speed assertion.
func watchdog(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return: deadlock", what)
	}
}

// TestMID8DeviceUsableFromAddUntilUnregistered: a client's Add finds the device fully
// initialized (query, PD, CQ, QP all work), and the device is still usable inside
// Remove, which runs before Close returns; after Close it is not.
func TestMID8DeviceUsableFromAddUntilUnregistered(t *testing.T) {
	a, _ := memDevices(t)
	var addErr, removeErr error
	c := &Client{Name: "mid8",
		Add: func(d *Device) {
			if d != a {
				return
			}
			if d.Query().MaxQP == 0 {
				addErr = errors.New("Query in Add returned no attributes")
				return
			}
			pd, err := d.AllocPD()
			if err != nil {
				addErr = err
				return
			}
			cq, err := d.CreateCQ(16, CQOptions{})
			if err != nil {
				addErr = err
				return
			}
			qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				addErr = err
				return
			}
			if err := qp.Destroy().Wait(); err != nil {
				addErr = err
			}
			cq.Destroy().Wait()
			addErr = pd.Dealloc().Wait()
		},
		Remove: func(d *Device) {
			if d != a {
				return
			}
			pd, err := d.AllocPD()
			if err != nil {
				removeErr = err
				return
			}
			removeErr = pd.Dealloc().Wait()
		},
	}
	if err := RegisterClient(c); err != nil {
		t.Fatal(err)
	}
	defer UnregisterClient(c)
	if addErr != nil {
		t.Fatalf("device not usable in Add: %v", addErr)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if removeErr != nil {
		t.Fatalf("device not usable in Remove: %v", removeErr)
	}
	if _, err := a.AllocPD(); err == nil {
		t.Fatalf("AllocPD after Close succeeded")
	}
}

// TestMID9CallbacksMayCallBack: Add and Remove call into the registry (list devices,
// register and unregister another client) without deadlock.
func TestMID9CallbacksMayCallBack(t *testing.T) {
	a, b := memDevices(t)
	var innerAdds atomic.Int32
	inner := &Client{Name: "inner", Add: func(*Device) { innerAdds.Add(1) }, Remove: func(*Device) {}}
	outer := &Client{Name: "outer",
		Add: func(d *Device) {
			if len(Devices()) == 0 {
				t.Errorf("Devices() empty inside Add")
			}
			if _, err := DeviceByName(d.Name()); err != nil {
				t.Errorf("DeviceByName inside Add: %v", err)
			}
			if d == a {
				if err := RegisterClient(inner); err != nil {
					t.Errorf("RegisterClient inside Add: %v", err)
				}
			}
		},
		Remove: func(d *Device) {
			_ = Devices()
			if d == a {
				UnregisterClient(inner)
			}
		},
	}
	watchdog(t, "RegisterClient", func() {
		if err := RegisterClient(outer); err != nil {
			t.Error(err)
		}
	})
	if n := innerAdds.Load(); n < 2 {
		t.Errorf("inner client added to %d devices, want both", n)
	}
	watchdog(t, "UnregisterClient", func() { UnregisterClient(outer) })
	watchdog(t, "Close", func() { a.Close(); b.Close() })
}

// TestMID10AddRemovePairedUnderChurn: with clients and devices coming and going
// concurrently, every client sees Remove exactly once for each device it saw Add for,
// never before that Add returned, and Add and Remove may block.
func TestMID10AddRemovePairedUnderChurn(t *testing.T) {
	type pair struct {
		c *Client
		d *Device
	}
	var mu sync.Mutex
	state := map[pair]int{} // 1 after Add, 0 after Remove
	var bad atomic.Int32
	mk := func(name string) *Client {
		c := &Client{Name: name}
		c.Add = func(d *Device) {
			time.Sleep(time.Millisecond) // Add may block
			mu.Lock()
			if state[pair{c, d}] != 0 {
				bad.Add(1)
			}
			state[pair{c, d}] = 1
			mu.Unlock()
		}
		c.Remove = func(d *Device) {
			mu.Lock()
			if state[pair{c, d}] != 1 {
				bad.Add(1)
			}
			state[pair{c, d}] = 0
			mu.Unlock()
			time.Sleep(time.Millisecond) // Remove may block
		}
		return c
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				c := mk("churn")
				RegisterClient(c)
				time.Sleep(time.Millisecond)
				UnregisterClient(c)
			}
		}()
		go func() {
			defer wg.Done()
			for j := 0; j < 3; j++ {
				a, b := memDevices(t)
				time.Sleep(2 * time.Millisecond)
				a.Close()
				b.Close()
			}
		}()
	}
	watchdog(t, "churn", wg.Wait)
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d callbacks out of order", n)
	}
	for p, s := range state {
		if s != 0 {
			t.Errorf("client %p never got Remove for device %s", p.c, p.d.Name())
		}
	}
}

func TestRegistryMisuse(t *testing.T) {
	if err := RegisterClient(&Client{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("client without callbacks: %v", err)
	}
	c := &Client{Add: func(*Device) {}, Remove: func(*Device) {}}
	RegisterClient(c)
	if err := RegisterClient(c); !errors.Is(err, ErrExists) {
		t.Errorf("double register: %v", err)
	}
	UnregisterClient(c)
	if err := UnregisterClient(c); !errors.Is(err, ErrNotFound) {
		t.Errorf("double unregister: %v", err)
	}
	a, _ := memDevices(t)
	l1, l2, _ := link.NewMemoryPair(link.MemoryOptions{})
	defer l1.Close()
	defer l2.Close()
	gids := []netdev.GID{netdev.GIDFromAddr(netip.MustParseAddr("192.0.2.13"))}
	if _, err := Open(Options{Link: l1, Name: a.Name(), GIDs: gids}); !errors.Is(err, ErrExists) {
		t.Errorf("Open with a taken name: %v", err)
	}
	if _, err := DeviceByName("nosuch"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeviceByName: %v", err)
	}
	if _, err := Open(Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open without link or interface: %v", err)
	}
	// Several queues: links of one interface, no single Link beside them, no
	// capture; nothing opened before the refusal.
	for _, o := range []Options{
		{Links: []link.Link{l1, l2}, Link: l1, GIDs: gids},
		{Links: []link.Link{l1}, Queues: 2, GIDs: gids},
		{Interface: "nosuch0", Queues: 2, Pcap: io.Discard, GIDs: gids},
		{Links: []link.Link{l1, l2}, Pcap: io.Discard, GIDs: gids},
		{Link: l1, Queues: 2, GIDs: gids},
	} {
		if d, err := Open(o); !errors.Is(err, ErrInvalid) {
			if d != nil {
				d.Close()
			}
			t.Errorf("Open(%+v): %v, want ErrInvalid", o, err)
		}
	}
	// The queues' links of two memory pairs, one device on them.
	m1, m2, _ := link.NewMemoryPair(link.MemoryOptions{})
	defer m1.Close()
	defer m2.Close()
	d, err := Open(Options{Links: []link.Link{l1, m1}, GIDs: gids})
	if err != nil {
		t.Fatalf("Open on two queues: %v", err)
	}
	if n := len(d.QueueCounters()); n != 2 {
		t.Errorf("%d queues", n)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMID9DriverCallsAcrossRegistration: Open and Close hold nothing a client
// could deadlock on by calling into the driver from Add and Remove (MID9, the
// hot-plug text: "It must not hold any semaphores that could cause deadlock if
// a consumer calls back into the driver across these calls"). The client is
// registered first, so that its Add runs inside Open and its Remove inside
// Close; each uses the device through the calls a consumer makes: query, PD,
// CQ, QP, an event handler, the CM (as ndk.OpenAdapter does), and a wait for
// the destroys.
func TestMID9DriverCallsAcrossRegistration(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	use := func(when string, d *Device) {
		fail := func(err error) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s %s: %w", when, d.Name(), err))
			mu.Unlock()
		}
		_ = d.Query()
		_ = d.GIDs()
		unreg := d.RegisterEventHandler(func(AsyncEvent) {})
		defer unreg()
		if _, err := d.CM(cm.Config{}); err != nil && !errors.Is(err, ErrClosed) {
			fail(err)
		}
		pd, err := d.AllocPD()
		if err != nil {
			fail(err)
			return
		}
		cq, err := d.CreateCQ(16, CQOptions{Handler: func(*CQ) {}})
		if err != nil {
			fail(err)
			return
		}
		qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			fail(err)
			return
		}
		for _, op := range []func() *Op{qp.Destroy, cq.Destroy, pd.Dealloc} {
			if err := op().Wait(); err != nil {
				fail(err)
			}
		}
	}
	c := &Client{Name: "mid9-driver",
		Add:    func(d *Device) { use("Add", d) },
		Remove: func(d *Device) { use("Remove", d) },
	}
	if err := RegisterClient(c); err != nil {
		t.Fatal(err)
	}
	defer UnregisterClient(c)
	var a, b *Device
	watchdog(t, "Open with a client that uses the device in Add", func() { a, b = memDevices(t) })
	watchdog(t, "Close with a client that uses the device in Remove", func() { a.Close(); b.Close() })
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		t.Error(err)
	}
}
