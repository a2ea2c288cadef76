package link

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xrnic/xrnic/testenv"
)

// TestInterfaceSpeedVeth: a veth reports 10000 Mb/s through SIOCETHTOOL, asked
// from inside its namespace; outside it there is no such interface (the
// daemon's thread that opens a link is in the link's namespace, /sys may not
// be). A link opened there carries the speed in its Info.
func TestInterfaceSpeedVeth(t *testing.T) {
	p := testenv.NewTestPair(t, testenv.PairOptions{})
	if err := p.A.Do(func() error {
		s, err := InterfaceSpeed(p.A.Name)
		if err != nil || s != 10000 {
			t.Errorf("InterfaceSpeed(%s) in its namespace = %d, %v; want 10000", p.A.Name, s, err)
		}
		// Each request's layout: the kernel answers GSET from the same
		// get_link_ksettings.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for name, f := range map[string]func(int, string) (uint32, error){"GLINKSETTINGS": glinksettings, "GSET": gset} {
			if s, err := f(fd, p.A.Name); err != nil || s != 10000 {
				t.Errorf("ETHTOOL_%s on %s = %d, %v; want 10000", name, p.A.Name, s, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if s, err := InterfaceSpeed(p.A.Name); err == nil {
		t.Errorf("InterfaceSpeed(%s) outside its namespace = %d, want an error", p.A.Name, s)
	}
	if s := interfaceSpeed("xrnic-none0"); s != DefaultSpeed {
		t.Errorf("interfaceSpeed of no interface = %d, want the default %d", s, DefaultSpeed)
	}
	for _, k := range []Kind{KindUDP, KindAFXDP} {
		if s := openOn(t, &p.A, k).Info().Speed; s != 10000 {
			t.Errorf("%s link on veth: Info().Speed = %d, want 10000", k, s)
		}
	}
}
