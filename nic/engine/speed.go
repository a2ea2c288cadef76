package engine

import "fmt"

// PortWidth is a port's link width (enum ib_port_width,
// ibv_port_attr.active_width).
type PortWidth uint8

// Port widths.
const (
	Width1X  PortWidth = 1
	Width2X  PortWidth = 16
	Width4X  PortWidth = 2
	Width8X  PortWidth = 4
	Width12X PortWidth = 8
)

// String is the width as ibv_devinfo shows it ("1X").
func (w PortWidth) String() string {
	switch w {
	case Width1X:
		return "1X"
	case Width2X:
		return "2X"
	case Width4X:
		return "4X"
	case Width8X:
		return "8X"
	case Width12X:
		return "12X"
	}
	return fmt.Sprintf("invalid width %d", uint8(w))
}

// PortSpeed is a port's per-lane speed (enum ib_port_speed,
// ibv_port_attr.active_speed).
type PortSpeed uint8

// Port lane speeds.
const (
	SpeedSDR   PortSpeed = 1   // 2.5 Gb/s
	SpeedDDR   PortSpeed = 2   // 5 Gb/s
	SpeedQDR   PortSpeed = 4   // 10 Gb/s
	SpeedFDR10 PortSpeed = 8   // 10 Gb/s
	SpeedFDR   PortSpeed = 16  // 14 Gb/s
	SpeedEDR   PortSpeed = 32  // 25 Gb/s
	SpeedHDR   PortSpeed = 64  // 50 Gb/s
	SpeedNDR   PortSpeed = 128 // 100 Gb/s
)

// String is the lane speed as ibv_devinfo shows it ("10.0 Gbps").
func (s PortSpeed) String() string {
	switch s {
	case SpeedSDR:
		return "2.5 Gbps"
	case SpeedDDR:
		return "5.0 Gbps"
	case SpeedQDR, SpeedFDR10:
		return "10.0 Gbps"
	case SpeedFDR:
		return "14.0 Gbps"
	case SpeedEDR:
		return "25.0 Gbps"
	case SpeedHDR:
		return "50.0 Gbps"
	case SpeedNDR:
		return "100.0 Gbps"
	}
	return fmt.Sprintf("invalid speed %d", uint8(s))
}

// ethWidthSpeed is one step of the table ib_get_eth_speed applies to a
// netdev's speed.
type ethWidthSpeed struct {
	upTo  uint32 // Mb/s, inclusive
	width PortWidth
	speed PortSpeed
}

// ethSpeeds is the kernel's ib_get_width_and_speed for a netdev that reports
// no lane count (drivers/infiniband/core/verbs.c): the first step whose upTo
// is at least the speed; past the last, 4X NDR.
var ethSpeeds = [...]ethWidthSpeed{
	{1000, Width1X, SpeedSDR},
	{10000, Width1X, SpeedFDR10},
	{20000, Width4X, SpeedDDR},
	{25000, Width1X, SpeedEDR},
	{40000, Width4X, SpeedFDR10},
	{50000, Width2X, SpeedEDR},
	{100000, Width4X, SpeedEDR},
	{200000, Width4X, SpeedHDR},
}

// EthWidthSpeed is the active width and speed a RoCE port on a link of mbps
// Mb/s reports, as rxe's rxe_query_port gets them from ib_get_eth_speed (a
// speed of 0, unknown to the link, reads as its default of 1000 would).
func EthWidthSpeed(mbps uint32) (PortWidth, PortSpeed) {
	for _, s := range ethSpeeds {
		if mbps <= s.upTo {
			return s.width, s.speed
		}
	}
	return Width4X, SpeedNDR
}
