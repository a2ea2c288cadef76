package netdev_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/xrnic/xrnic/nic/netdev"
)

func mustMAC(t testing.TB, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDefaultGID(t *testing.T) {
	for _, c := range []struct {
		mac, want, full string
	}{
		// The U/L bit flips: 52 -> 50; 02 -> 00; 00 -> 02.
		{"52:54:00:12:34:56", "fe80::5054:ff:fe12:3456", "fe80:0000:0000:0000:5054:00ff:fe12:3456"},
		{"02:00:5e:10:00:01", "fe80::5eff:fe10:1", "fe80:0000:0000:0000:0000:5eff:fe10:0001"},
		{"00:1b:21:aa:bb:cc", "fe80::21b:21ff:feaa:bbcc", "fe80:0000:0000:0000:021b:21ff:feaa:bbcc"},
	} {
		g, ok := netdev.DefaultGID(mustMAC(t, c.mac))
		if !ok || g.String() != c.want || g.FullString() != c.full {
			t.Errorf("DefaultGID(%s) = %s / %s, %v; want %s / %s", c.mac, g, g.FullString(), ok, c.want, c.full)
		}
		if g.IsIPv4Mapped() || !g.Addr().IsLinkLocalUnicast() {
			t.Errorf("DefaultGID(%s) = %s: want a link-local, not IPv4-mapped", c.mac, g)
		}
	}
	if _, ok := netdev.DefaultGID(nil); ok {
		t.Errorf("DefaultGID(nil): got ok")
	}
	if _, ok := netdev.DefaultGID(make(net.HardwareAddr, 20)); ok {
		t.Errorf("DefaultGID(20-byte address): got ok")
	}
}

func TestGIDFromAddr(t *testing.T) {
	for _, c := range []struct {
		addr, str, full string
		mapped          bool
	}{
		{"192.0.2.1", "::ffff:192.0.2.1", "0000:0000:0000:0000:0000:ffff:c000:0201", true},
		{"::ffff:192.0.2.1", "::ffff:192.0.2.1", "0000:0000:0000:0000:0000:ffff:c000:0201", true},
		{"2001:db8::1", "2001:db8::1", "2001:0db8:0000:0000:0000:0000:0000:0001", false},
		{"fe80::1%eth0", "fe80::1", "fe80:0000:0000:0000:0000:0000:0000:0001", false},
	} {
		a := netip.MustParseAddr(c.addr)
		g := netdev.GIDFromAddr(a)
		if g.String() != c.str || g.FullString() != c.full || g.IsIPv4Mapped() != c.mapped {
			t.Errorf("GIDFromAddr(%s) = %s / %s mapped %v; want %s / %s %v",
				c.addr, g, g.FullString(), g.IsIPv4Mapped(), c.str, c.full, c.mapped)
		}
		if want := a.WithZone("").Unmap(); g.Addr() != want {
			t.Errorf("GIDFromAddr(%s).Addr() = %s, want %s", c.addr, g.Addr(), want)
		}
		for _, s := range []string{g.String(), g.FullString()} {
			p, err := netdev.ParseGID(s)
			if err != nil || p != g {
				t.Errorf("ParseGID(%q) = %s, %v; want %s", s, p, err, g)
			}
		}
	}
	for _, bad := range []string{"", "fe80::1%eth0", "1.2.3", "fe80:::1", "0000:0000:0000:0000:0000:ffff:c000:0201:0"} {
		if g, err := netdev.ParseGID(bad); err == nil {
			t.Errorf("ParseGID(%q) = %s, want an error", bad, g)
		}
	}
}

func TestGIDType(t *testing.T) {
	if s := netdev.GIDTypeRoCEv2.String(); s != "RoCE v2" {
		t.Errorf("GIDTypeRoCEv2 = %q", s)
	}
	if s := netdev.GIDTypeRoCEv1.String(); s != "IB/RoCE v1" {
		t.Errorf("GIDTypeRoCEv1 = %q", s)
	}
}

func TestGIDTableOrder(t *testing.T) {
	mac := mustMAC(t, "02:00:5e:10:00:01")
	ll, _ := netdev.DefaultGID(mac)
	addrs := func(ss ...string) []netip.Addr {
		var r []netip.Addr
		for _, s := range ss {
			r = append(r, netip.MustParseAddr(s))
		}
		return r
	}
	for _, c := range []struct {
		name  string
		ifc   netdev.Interface
		want  []string
		index []int
	}{
		{
			name: "one of each, kernel link-local folds into the default",
			ifc:  netdev.Interface{Name: "veth0", MAC: mac, Addrs: addrs("192.0.2.1", "2001:db8::1", ll.String())},
			want: []string{ll.String(), "::ffff:192.0.2.1", "2001:db8::1"},
		},
		{
			name: "IPv4 before IPv6 whatever the input order; stable-privacy link-local kept",
			ifc: netdev.Interface{Name: "veth0", MAC: mac,
				Addrs: addrs("2001:db8::2", "fe80::1234", "192.0.2.1", "198.51.100.1")},
			want: []string{ll.String(), "::ffff:192.0.2.1", "::ffff:198.51.100.1", "2001:db8::2", "fe80::1234"},
		},
		{
			name: "no addresses: just the default",
			ifc:  netdev.Interface{Name: "veth0", MAC: mac},
			want: []string{ll.String()},
		},
		{
			name: "no MAC: no default GID",
			ifc:  netdev.Interface{Name: "tun0", Addrs: addrs("192.0.2.1")},
			want: []string{"::ffff:192.0.2.1"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			tab := netdev.GIDTable(&c.ifc)
			var got []string
			for i, e := range tab {
				got = append(got, e.GID.String())
				if e.Index != i || e.Type != netdev.GIDTypeRoCEv2 || e.Netdev != c.ifc.Name ||
					e.Default != (e.GID == ll && c.ifc.MAC != nil) {
					t.Errorf("entry %d: %+v", i, e)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
}

func FuzzParseGID(f *testing.F) {
	for _, s := range []string{"fe80::1", "::ffff:192.0.2.1", "192.0.2.1", "fe80:0000:0000:0000:5054:00ff:fe12:3456", "::", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := netdev.ParseGID(s)
		if err != nil {
			return
		}
		for _, form := range []string{g.String(), g.FullString()} {
			h, err := netdev.ParseGID(form)
			if err != nil || h != g {
				t.Fatalf("ParseGID(%q) = %v; re-parse of %q gave %v, %v", s, g, form, h, err)
			}
		}
		if len(g.FullString()) != 39 {
			t.Fatalf("FullString %q: want 39 bytes", g.FullString())
		}
		if netdev.GIDFromAddr(g.Addr()) != g {
			t.Fatalf("GIDFromAddr(Addr()) of %v changed it", g)
		}
	})
}
