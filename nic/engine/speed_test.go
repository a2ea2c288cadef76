package engine

import "testing"

// TestEthWidthSpeed holds EthWidthSpeed to the kernel's ib_get_width_and_speed
// for a netdev of no lane count (drivers/infiniband/core/verbs.c, called by
// ib_get_eth_speed from rxe_query_port), at each step's edge and past it.
func TestEthWidthSpeed(t *testing.T) {
	for _, c := range []struct {
		mbps  uint32
		width PortWidth
		speed PortSpeed
	}{
		{0, Width1X, SpeedSDR}, // none reported: the kernel's SPEED_1000
		{100, Width1X, SpeedSDR},
		{1000, Width1X, SpeedSDR},
		{1001, Width1X, SpeedFDR10},
		{2500, Width1X, SpeedFDR10},
		{10000, Width1X, SpeedFDR10}, // veth
		{10001, Width4X, SpeedDDR},
		{20000, Width4X, SpeedDDR},
		{25000, Width1X, SpeedEDR},
		{40000, Width4X, SpeedFDR10},
		{50000, Width2X, SpeedEDR},
		{56000, Width4X, SpeedEDR},
		{100000, Width4X, SpeedEDR},
		{200000, Width4X, SpeedHDR},
		{200001, Width4X, SpeedNDR},
		{400000, Width4X, SpeedNDR},
		{800000, Width4X, SpeedNDR},
	} {
		if w, s := EthWidthSpeed(c.mbps); w != c.width || s != c.speed {
			t.Errorf("EthWidthSpeed(%d) = %v %v, want %v %v", c.mbps, w, s, c.width, c.speed)
		}
	}
	// The encodings are ibv_port_attr's.
	if Width1X != 1 || Width2X != 16 || Width4X != 2 || Width8X != 4 || Width12X != 8 ||
		SpeedSDR != 1 || SpeedDDR != 2 || SpeedQDR != 4 || SpeedFDR10 != 8 || SpeedFDR != 16 ||
		SpeedEDR != 32 || SpeedHDR != 64 || SpeedNDR != 128 {
		t.Error("width or speed encodings are not ibv_port_attr's")
	}
	// As ibv_devinfo prints them.
	if Width1X.String() != "1X" || Width2X.String() != "2X" || SpeedFDR10.String() != "10.0 Gbps" ||
		SpeedSDR.String() != "2.5 Gbps" || SpeedNDR.String() != "100.0 Gbps" {
		t.Errorf("names: %v %v %v %v %v", Width1X, Width2X, SpeedFDR10, SpeedSDR, SpeedNDR)
	}
}
