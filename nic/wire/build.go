// Encode: fields to a whole frame, with lengths, checksums, pad and ICRC.

package wire

// IBFields describes the IB part of a packet: the BTH, the extension headers, and
// the payload. Only the headers that the BTH opcode carries (Opcodes[op].Mask) are
// written; the others are ignored. It is a plain value: Encode only reads it and
// keeps no reference to it or to Payload.
type IBFields struct {
	BTH          BTHFields // PadCount is ignored: Encode derives it from the payload
	DETH         DETHFields
	FETH         FETHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH AtomicAckETHFields
	ImmDt        uint32 // immediate data, big-endian on the wire
	IETH         uint32 // the R_Key to invalidate
	// Payload is copied after the headers and padded with zeros to a multiple of 4
	// bytes (BTH PadCnt, IBTA 9.2). A CNP's 16 reserved bytes are written as zeros when
	// Payload is empty.
	Payload []byte
}

// padFor returns the pad count that rounds n up to a multiple of 4.
func padFor(n int) int { return -n & 3 }

func (f *IBFields) payloadLen() int {
	if f.BTH.Opcode == CNP && len(f.Payload) == 0 {
		return CNPLen
	}
	return len(f.Payload)
}

// Len returns the encoded length: headers, payload, pad and ICRC.
func (f *IBFields) Len() int {
	n := f.payloadLen()
	return Opcodes[f.BTH.Opcode].HeaderLen + n + padFor(n) + ICRCLen
}

// Encode writes the IB packet into b and returns its length. The 4 ICRC bytes are
// written as zeros: the ICRC covers the IP and UDP headers, so FrameFields.Encode
// or Packet.UpdateICRC fills it in.
func (f *IBFields) Encode(b []byte) (int, error) {
	in := &Opcodes[f.BTH.Opcode]
	if in.Mask == 0 {
		return 0, errBuildOpcode
	}
	if in.Mask&MaskPayload == 0 && len(f.Payload) != 0 {
		return 0, errBuildPayload
	}
	if in.Mask&MaskCNP != 0 && len(f.Payload) != 0 && len(f.Payload) != CNPLen {
		return 0, errBuildCNP
	}
	n := f.Len()
	if len(b) < n {
		return 0, errBuildShort
	}
	b = b[:n]
	bth := f.BTH
	pl := f.payloadLen()
	bth.PadCount = uint8(padFor(pl))
	bth.Encode(b)
	m := in.Mask
	if m&MaskDETH != 0 {
		f.DETH.Encode(b[in.Offset[HdrDETH]:])
	}
	if m&MaskFETH != 0 {
		f.FETH.Encode(b[in.Offset[HdrFETH]:])
	}
	if m&MaskRETH != 0 {
		f.RETH.Encode(b[in.Offset[HdrRETH]:])
	}
	if m&MaskAtomicETH != 0 {
		f.AtomicETH.Encode(b[in.Offset[HdrAtomicETH]:])
	}
	if m&MaskAETH != 0 {
		f.AETH.Encode(b[in.Offset[HdrAETH]:])
	}
	if m&MaskAtomicAckETH != 0 {
		f.AtomicAckETH.Encode(b[in.Offset[HdrAtomicAckETH]:])
	}
	if m&MaskImmDt != 0 {
		ImmDt(b[in.Offset[HdrImmDt]:]).SetImm(f.ImmDt)
	}
	if m&MaskIETH != 0 {
		IETH(b[in.Offset[HdrIETH]:]).SetRKey(f.IETH)
	}
	rest := b[in.HeaderLen:]
	c := copy(rest, f.Payload)
	clear(rest[c:]) // pad (and a CNP's reserved bytes), then the ICRC placeholder
	return n, nil
}

// FrameFields describes a whole RoCEv2 frame. Lengths, the IPv4 header checksum, the
// pad and the ICRC are computed by Encode; the fields that carry them are ignored.
// Like IBFields it is a plain value that Encode only reads.
type FrameFields struct {
	Ethernet  EthernetFields // EtherType is set from IPVersion
	IPVersion uint8          // 4 or 6
	IPv4      IPv4Fields     // used when IPVersion is 4; TotalLength, Protocol computed
	IPv6      IPv6Fields     // used when IPVersion is 6; PayloadLength, NextHeader computed
	UDP       UDPFields      // Length computed; DstPort 0 means 4791
	// ComputeUDPChecksum fills in the UDP checksum. Otherwise UDP.Checksum is sent as
	// given: rxe sends 0, which IPv6 receivers outside RoCE flag as illegal (RFC 8200).
	ComputeUDPChecksum bool
	IB                 IBFields
}

func (f *FrameFields) ipLen() int {
	if f.IPVersion == 6 {
		return IPv6Len
	}
	return IPv4Len
}

// Len returns the frame length.
func (f *FrameFields) Len() int {
	return f.Ethernet.Len() + f.ipLen() + UDPLen + f.IB.Len()
}

// Encode writes the frame into b and returns its length. It does not pad the frame
// to the 60-byte Ethernet minimum; NICs and veth pad short frames themselves.
func (f *FrameFields) Encode(b []byte) (int, error) {
	switch f.IPVersion {
	case 4:
		if !f.IPv4.Src.Is4() || !f.IPv4.Dst.Is4() {
			return 0, errBuildAddr
		}
	case 6:
		if !f.IPv6.Src.Is6() || !f.IPv6.Dst.Is6() {
			return 0, errBuildAddr
		}
	default:
		return 0, errBuildIPVer
	}
	ipOff := f.Ethernet.Len()
	udpOff := ipOff + f.ipLen()
	ibOff := udpOff + UDPLen
	// The IPv4 total length counts the IP header; the IPv6 payload length does not.
	ipField := UDPLen + f.IB.Len()
	if f.IPVersion == 4 {
		ipField += IPv4Len
	}
	if ipField > 0xFFFF {
		return 0, errBuildTooLong
	}
	if len(b) < ibOff {
		return 0, errBuildShort
	}
	ibLen, err := f.IB.Encode(b[ibOff:])
	if err != nil {
		return 0, err
	}
	n := ibOff + ibLen

	eth := f.Ethernet
	ip := b[ipOff:udpOff]
	if f.IPVersion == 4 {
		eth.EtherType = EtherTypeIPv4
		h := f.IPv4
		h.TotalLength = n - ipOff
		h.Protocol = IPProtoUDP
		h.Encode(ip)
	} else {
		eth.EtherType = EtherTypeIPv6
		h := f.IPv6
		h.PayloadLength = n - udpOff
		h.NextHeader = IPProtoUDP
		h.Encode(ip)
	}
	eth.Encode(b)
	u := f.UDP
	u.Length = n - udpOff
	if u.DstPort == 0 {
		u.DstPort = UDPPortRoCEv2
	}
	u.Encode(b[udpOff:])

	// The ICRC masks the UDP checksum, so the checksum can follow it.
	icrc, _ := ComputeICRC(ip, b[udpOff:ibOff], b[ibOff:n-ICRCLen])
	PutICRC(b[n-ICRCLen:], icrc)
	if f.ComputeUDPChecksum {
		src, dst := f.IPv4.Src, f.IPv4.Dst
		if f.IPVersion == 6 {
			src, dst = f.IPv6.Src, f.IPv6.Dst
		}
		UDP(b[udpOff:]).SetChecksum(UDPChecksum(src, dst, b[udpOff:n]))
	}
	return n, nil
}

// Fields returns the fields of the IB packet; Payload aliases the packet.
func (ib *IBPacket) Fields(f *IBFields) {
	*f = IBFields{BTH: ib.BTH.Fields(), Payload: ib.Payload}
	if ib.DETH != nil {
		f.DETH = ib.DETH.Fields()
	}
	if ib.FETH != nil {
		f.FETH = ib.FETH.Fields()
	}
	if ib.RETH != nil {
		f.RETH = ib.RETH.Fields()
	}
	if ib.AtomicETH != nil {
		f.AtomicETH = ib.AtomicETH.Fields()
	}
	if ib.AETH != nil {
		f.AETH = ib.AETH.Fields()
	}
	if ib.AtomicAckETH != nil {
		f.AtomicAckETH = ib.AtomicAckETH.Fields()
	}
	if ib.ImmDt != nil {
		f.ImmDt = ib.ImmDt.Imm()
	}
	if ib.IETH != nil {
		f.IETH = ib.IETH.RKey()
	}
}

// Fields returns the fields of the packet, enough to encode it again byte for
// byte (reserved bits and pad bytes are encoded as zero, as IBTA requires).
func (p *Packet) Fields(f *FrameFields) {
	*f = FrameFields{}
	f.Ethernet.Dst = p.Ethernet.Dst()
	f.Ethernet.Src = p.Ethernet.Src()
	if p.VLAN != nil {
		f.Ethernet.VLAN = true
		f.Ethernet.TCI = p.VLAN.TCI()
		f.Ethernet.EtherType = p.VLAN.EtherType()
	} else {
		f.Ethernet.EtherType = p.Ethernet.EtherType()
	}
	if h := p.IPv4; h != nil {
		f.IPVersion = 4
		f.IPv4 = IPv4Fields{
			TOS: h.TOS(), TotalLength: h.TotalLength(), ID: h.ID(), Flags: h.Flags(),
			FragmentOffset: h.FragmentOffset(), TTL: h.TTL(), Protocol: h.Protocol(),
			Src: h.Src(), Dst: h.Dst(),
		}
	}
	if h := p.IPv6; h != nil {
		f.IPVersion = 6
		f.IPv6 = IPv6Fields{
			TrafficClass: h.TrafficClass(), FlowLabel: h.FlowLabel(), PayloadLength: h.PayloadLength(),
			NextHeader: h.NextHeader(), HopLimit: h.HopLimit(), Src: h.Src(), Dst: h.Dst(),
		}
	}
	if p.UDP != nil {
		f.UDP = UDPFields{SrcPort: p.UDP.SrcPort(), DstPort: p.UDP.DstPort(), Length: p.UDP.Length(), Checksum: p.UDP.Checksum()}
	}
	p.IBPacket.Fields(&f.IB)
}
