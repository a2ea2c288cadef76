package link

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultSpeed is the speed (Mb/s) a link whose interface reports none is
// taken to have, as the kernel's ib_get_eth_speed takes SPEED_1000 when
// __ethtool_get_link_ksettings fails or answers SPEED_UNKNOWN.
const DefaultSpeed = 1000

// ethtoolIfreq is struct ifreq with ifr_data: the interface's name, then a
// pointer to the ethtool command; the union is 24 bytes on 64-bit.
type ethtoolIfreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtoolLinkSettings is struct ethtool_link_settings (ETHTOOL_GLINKSETTINGS)
// with room for the link mode masks that follow it: three bitmaps of
// link_mode_masks_nwords 32-bit words each.
type ethtoolLinkSettings struct {
	cmd    uint32
	speed  uint32
	_      [7]uint8
	nwords int8 // link_mode_masks_nwords
	_      [4]uint8
	_      [7]uint32
	masks  [3 * 127]uint32 // nwords is an s8
}

// ethtoolCmd is struct ethtool_cmd (the legacy ETHTOOL_GSET): the speed is
// speed | speed_hi<<16.
type ethtoolCmd struct {
	cmd       uint32
	supported uint32
	advert    uint32
	speed     uint16
	_         [6]uint8
	_         [2]uint32
	speedHi   uint16
	_         [2]uint8
	_         [3]uint32
}

// InterfaceSpeed is the link speed (Mb/s) the interface name of the calling
// thread's network namespace reports through ethtool (SIOCETHTOOL: the
// ETHTOOL_GLINKSETTINGS handshake, else the legacy ETHTOOL_GSET), as
// ethtool(8) shows it. An interface that reports no speed (SPEED_UNKNOWN, as
// one without carrier) fails. The socket is made here, so the answer is of
// the namespace the caller is in, whatever /sys shows.
func InterfaceSpeed(name string) (uint32, error) {
	if len(name) >= unix.IFNAMSIZ {
		return 0, fmt.Errorf("ethtool: interface name %q too long", name)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("ethtool: socket: %w", err)
	}
	defer unix.Close(fd)
	speed, err := glinksettings(fd, name)
	if err != nil {
		if speed, err = gset(fd, name); err != nil {
			return 0, fmt.Errorf("ethtool %s: %w", name, err)
		}
	}
	if speed == unknownSpeed {
		return 0, fmt.Errorf("ethtool %s: speed unknown", name)
	}
	return speed, nil
}

const unknownSpeed = uint32(0xffffffff) // SPEED_UNKNOWN as the u32 the kernel reports

func ethtoolIoctl(fd int, name string, data unsafe.Pointer) error {
	var ifr ethtoolIfreq
	copy(ifr.name[:], name)
	ifr.data = data
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if e != 0 {
		return e
	}
	return nil
}

// glinksettings asks with no masks first: the kernel answers the number of
// words it wants, negated, and the second request carries that many.
func glinksettings(fd int, name string) (uint32, error) {
	var s ethtoolLinkSettings
	s.cmd = unix.ETHTOOL_GLINKSETTINGS
	if err := ethtoolIoctl(fd, name, unsafe.Pointer(&s)); err != nil {
		return 0, err
	}
	if s.nwords >= 0 {
		return 0, fmt.Errorf("GLINKSETTINGS handshake answered %d words", s.nwords)
	}
	n := -s.nwords
	s = ethtoolLinkSettings{cmd: unix.ETHTOOL_GLINKSETTINGS, nwords: n}
	if err := ethtoolIoctl(fd, name, unsafe.Pointer(&s)); err != nil {
		return 0, err
	}
	if s.nwords != n {
		return 0, fmt.Errorf("GLINKSETTINGS answered %d words, asked with %d", s.nwords, n)
	}
	return s.speed, nil
}

func gset(fd int, name string) (uint32, error) {
	c := ethtoolCmd{cmd: unix.ETHTOOL_GSET}
	if err := ethtoolIoctl(fd, name, unsafe.Pointer(&c)); err != nil {
		return 0, err
	}
	return uint32(c.speed) | uint32(c.speedHi)<<16, nil
}

// interfaceSpeed is InterfaceSpeed, DefaultSpeed when it fails: what a link
// opened on name carries in its Info.
func interfaceSpeed(name string) uint32 {
	if s, err := InterfaceSpeed(name); err == nil {
		return s
	}
	return DefaultSpeed
}
