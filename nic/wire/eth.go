// Ethernet II and 802.1Q tag views.

package wire

import (
	"encoding/binary"
	"fmt"
)

// MAC is an Ethernet address.
type MAC [6]byte

func (m MAC) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// Ethernet is a view of an Ethernet II header (EthernetLen bytes). When the frame is
// 802.1Q tagged, EtherType returns the TPID (0x8100) and the VLAN view follows.
type Ethernet []byte

func (e Ethernet) Dst() MAC          { return MAC(e[0:6]) }
func (e Ethernet) Src() MAC          { return MAC(e[6:12]) }
func (e Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(e[12:14]) }

func (e Ethernet) SetDst(m MAC)          { copy(e[0:6], m[:]) }
func (e Ethernet) SetSrc(m MAC)          { copy(e[6:12], m[:]) }
func (e Ethernet) SetEtherType(t uint16) { binary.BigEndian.PutUint16(e[12:14], t) }

// VLAN is a view of the 4 bytes that follow a 0x8100 TPID: the tag control
// information (PCP 3 bits, DEI 1 bit, VID 12 bits) and the inner EtherType.
type VLAN []byte

func (v VLAN) TCI() uint16       { return binary.BigEndian.Uint16(v[0:2]) }
func (v VLAN) PCP() uint8        { return v[0] >> 5 }
func (v VLAN) DEI() bool         { return v[0]&0x10 != 0 }
func (v VLAN) VID() uint16       { return v.TCI() & 0x0FFF }
func (v VLAN) EtherType() uint16 { return binary.BigEndian.Uint16(v[2:4]) }

func (v VLAN) SetTCI(tci uint16)     { binary.BigEndian.PutUint16(v[0:2], tci) }
func (v VLAN) SetEtherType(t uint16) { binary.BigEndian.PutUint16(v[2:4], t) }

// EthernetFields describes an Ethernet header with an optional 802.1Q tag.
type EthernetFields struct {
	Dst, Src MAC
	// VLAN inserts an 802.1Q tag carrying TCI.
	VLAN bool
	TCI  uint16
	// EtherType is the type of the payload (the inner type when tagged).
	EtherType uint16
}

// Len is the header length: EthernetLen, plus VLANLen when tagged.
func (f *EthernetFields) Len() int {
	if f.VLAN {
		return EthernetLen + VLANLen
	}
	return EthernetLen
}

// Encode writes f.Len() bytes into b.
func (f *EthernetFields) Encode(b []byte) {
	e := Ethernet(b[:EthernetLen])
	e.SetDst(f.Dst)
	e.SetSrc(f.Src)
	if !f.VLAN {
		e.SetEtherType(f.EtherType)
		return
	}
	e.SetEtherType(EtherTypeVLAN)
	v := VLAN(b[EthernetLen : EthernetLen+VLANLen])
	v.SetTCI(f.TCI)
	v.SetEtherType(f.EtherType)
}
