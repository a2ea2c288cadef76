// Parse: frame or UDP payload to header views, with every length checked.

package wire

// IBPacket holds views of the InfiniBand part of a RoCEv2 packet: the UDP payload,
// BTH through ICRC. Views of headers the opcode does not carry are nil. An IBPacket
// is owned by one goroutine; its views alias the parsed buffer.
type IBPacket struct {
	Opcode       Opcode
	BTH          BTH
	DETH         DETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	Payload      []byte // data, without the pad
	Pad          []byte // BTH.PadCount bytes after the payload
	ICRC         []byte // the last 4 bytes
	Raw          []byte // the whole UDP payload, BTH through ICRC
}

// Packet holds views of a whole RoCEv2 Ethernet frame. Exactly one of IPv4 and IPv6
// is non-nil; VLAN is nil when the frame is untagged. A Packet is owned by one
// goroutine; its views alias the parsed frame, so the frame must outlive it.
type Packet struct {
	Ethernet Ethernet
	VLAN     VLAN
	IPv4     IPv4
	IPv6     IPv6
	UDP      UDP
	IBPacket
	// Frame is the frame from the Ethernet header to the ICRC, without any Ethernet
	// padding that followed the IP packet.
	Frame []byte
}

// Info returns the opcode table entry of the packet.
func (ib *IBPacket) Info() *OpcodeInfo { return &Opcodes[ib.Opcode] }

// StoredICRC returns the ICRC carried by the packet.
func (ib *IBPacket) StoredICRC() uint32 { return GetICRC(ib.ICRC) }

// VerifyICRCWith checks the ICRC against the given IP and UDP headers, for links
// that receive the IB part separately from the headers.
func (ib *IBPacket) VerifyICRCWith(ip, udp []byte) error {
	if len(ib.Raw) < BTHLen+ICRCLen {
		return errBTHShort
	}
	got, ok := ComputeICRC(ip, udp, ib.Raw[:len(ib.Raw)-ICRCLen])
	if !ok {
		return errICRCArgs
	}
	if got != ib.StoredICRC() {
		return errICRC
	}
	return nil
}

// IPHeader returns the IPv4 or IPv6 header.
func (p *Packet) IPHeader() []byte {
	if p.IPv4 != nil {
		return p.IPv4
	}
	return p.IPv6
}

// ComputeICRC returns the ICRC the packet should carry.
func (p *Packet) ComputeICRC() uint32 {
	v, _ := ComputeICRC(p.IPHeader(), p.UDP, p.Raw[:len(p.Raw)-ICRCLen])
	return v
}

// VerifyICRC checks the packet's ICRC; the error wraps ErrBadICRC on a mismatch.
func (p *Packet) VerifyICRC() error {
	if p.IPHeader() == nil {
		return errNoIP
	}
	return p.VerifyICRCWith(p.IPHeader(), p.UDP)
}

// VerifyICRCInPlace is VerifyICRC in one CRC pass (ICRCInPlace): for a caller
// that owns the frame, as the engine owns a frame it received.
func (p *Packet) VerifyICRCInPlace() error {
	ip := p.IPHeader()
	if ip == nil {
		return errNoIP
	}
	if len(p.Raw) < BTHLen+ICRCLen {
		return errBTHShort
	}
	if len(ip) != IPv4Len && len(ip) != IPv6Len {
		return errICRCArgs
	}
	// Parse's views lie one after another, ending with the frame.
	f, n := p.Frame, len(ip)+len(p.UDP)+len(p.Raw)
	if len(p.UDP) != UDPLen || n > len(f) || &f[len(f)-n] != &ip[0] ||
		&f[len(f)-n+len(ip)] != &p.UDP[0] || &f[len(f)-len(p.Raw)] != &p.Raw[0] {
		return p.VerifyICRCWith(ip, p.UDP)
	}
	got, ok := ICRCInPlace(f[len(f)-n:len(f)-ICRCLen], len(ip))
	if !ok {
		return errICRCArgs
	}
	if got != p.StoredICRC() {
		return errICRC
	}
	return nil
}

// UpdateICRC recomputes and stores the ICRC, after the caller changed fields in
// place (a retransmission's PSN, say).
func (p *Packet) UpdateICRC() { PutICRC(p.ICRC, p.ComputeICRC()) }

// Parse fills p with views of the RoCEv2 frame (Ethernet, optional 802.1Q tag,
// IPv4 or IPv6, UDP to port 4791, then as ParseIB). Bytes after the IP packet
// (Ethernet padding) are ignored. It checks structure only: the ICRC is checked by
// VerifyICRC, or use ParseAndVerify. On error p is reset, so no partial view
// survives, and the error wraps one of the package's sentinels.
func Parse(frame []byte, p *Packet) error {
	if err := parse(frame, p); err != nil {
		*p = Packet{}
		return err
	}
	return nil
}

// ParseAndVerify is Parse followed by VerifyICRC.
func ParseAndVerify(frame []byte, p *Packet) error {
	if err := parse(frame, p); err != nil {
		*p = Packet{}
		return err
	}
	if err := p.VerifyICRC(); err != nil {
		*p = Packet{}
		return err
	}
	return nil
}

func parse(frame []byte, p *Packet) error {
	*p = Packet{}
	if len(frame) < EthernetLen {
		return errEthShort
	}
	p.Ethernet = Ethernet(frame[:EthernetLen])
	off := EthernetLen
	et := p.Ethernet.EtherType()
	if et == EtherTypeVLAN || et == EtherTypeQinQ {
		// One tag, 802.1Q or 802.1ad (a provider's S-tag alone): the XDP program
		// steers both (bpf/xrnic.c).
		if len(frame) < EthernetLen+VLANLen {
			return errVLANShort
		}
		p.VLAN = VLAN(frame[EthernetLen : EthernetLen+VLANLen])
		off += VLANLen
		et = p.VLAN.EtherType()
		if et == EtherTypeVLAN || et == EtherTypeQinQ {
			return errQinQ
		}
	}
	rest := frame[off:]
	var l4 []byte // UDP header and payload, bounded by the IP length
	switch et {
	case EtherTypeIPv4:
		if len(rest) < IPv4Len {
			return errIPv4Short
		}
		ip := IPv4(rest[:IPv4Len])
		if v := ip.Version(); v != 4 {
			return errIPVersion[v]
		}
		switch ihl := ip.IHL(); {
		case ihl > IPv4Len:
			return errIPv4Options
		case ihl < IPv4Len:
			return errIPv4IHL
		}
		tl := ip.TotalLength()
		if tl < IPv4Len+UDPLen {
			return errIPv4TotalShort
		}
		if tl > len(rest) {
			return errIPv4TotalLong
		}
		if !ip.ChecksumValid() {
			return errIPv4Checksum
		}
		if ip.Flags()&IPv4FlagMF != 0 || ip.FragmentOffset() != 0 {
			return errIPv4Fragment
		}
		if ip.Protocol() != IPProtoUDP {
			return errIPv4Proto
		}
		p.IPv4 = ip
		l4 = rest[IPv4Len:tl]
		p.Frame = frame[:off+tl]
	case EtherTypeIPv6:
		if len(rest) < IPv6Len {
			return errIPv6Short
		}
		ip := IPv6(rest[:IPv6Len])
		if v := ip.Version(); v != 6 {
			return errIPVersion[v]
		}
		pl := ip.PayloadLength()
		if IPv6Len+pl > len(rest) {
			return errIPv6PayloadLen
		}
		if ip.NextHeader() != IPProtoUDP {
			return errIPv6Next
		}
		p.IPv6 = ip
		l4 = rest[IPv6Len : IPv6Len+pl]
		p.Frame = frame[:off+IPv6Len+pl]
	default:
		return errEtherType
	}
	if len(l4) < UDPLen {
		return errUDPShort
	}
	p.UDP = UDP(l4[:UDPLen])
	if p.UDP.DstPort() != UDPPortRoCEv2 {
		return errUDPPort
	}
	if p.UDP.Length() != len(l4) {
		return errUDPLen
	}
	return parseIB(l4[UDPLen:], &p.IBPacket)
}

// ParseIB fills ib with views of a UDP payload that holds an IB packet (BTH through
// ICRC), as a UDP-socket link receives it. It checks TVer, the opcode, the header
// and pad lengths; the ICRC needs the IP and UDP headers (VerifyICRCWith). On error
// ib is reset.
func ParseIB(b []byte, ib *IBPacket) error {
	*ib = IBPacket{}
	if err := parseIB(b, ib); err != nil {
		*ib = IBPacket{}
		return err
	}
	return nil
}

// parseIB expects ib to be zero.
func parseIB(b []byte, ib *IBPacket) error {
	if len(b) < BTHLen+ICRCLen {
		return errBTHShort
	}
	bth := BTH(b[:BTHLen])
	if v := bth.TVer(); v != 0 {
		return errTVer[v]
	}
	op := bth.Opcode()
	in := &Opcodes[op]
	if in.Mask == 0 {
		return errOpcode[op]
	}
	if len(b) < in.HeaderLen+ICRCLen {
		return errHdrShort
	}
	end := len(b) - ICRCLen
	data := b[in.HeaderLen:end]
	pad := bth.PadCount()
	switch {
	case in.Mask&MaskCNP != 0:
		if len(data) != CNPLen || pad != 0 {
			return errCNPLen
		}
	case in.Mask&MaskPayload == 0:
		// The length must agree with the opcode (IBTA 9.6 packet length checks): an
		// ACK or a READ request with trailing bytes is malformed.
		if len(data) != 0 || pad != 0 {
			return errNoPayload
		}
	case pad > len(data):
		return errPadCount
	}
	ib.Opcode = op
	ib.BTH = bth[:BTHLen:BTHLen]
	m := in.Mask
	if m&MaskDETH != 0 {
		ib.DETH = DETH(view(b, in, HdrDETH))
	}
	if m&MaskFETH != 0 {
		ib.FETH = FETH(view(b, in, HdrFETH))
	}
	if m&MaskRETH != 0 {
		ib.RETH = RETH(view(b, in, HdrRETH))
	}
	if m&MaskAtomicETH != 0 {
		ib.AtomicETH = AtomicETH(view(b, in, HdrAtomicETH))
	}
	if m&MaskAETH != 0 {
		ib.AETH = AETH(view(b, in, HdrAETH))
	}
	if m&MaskAtomicAckETH != 0 {
		ib.AtomicAckETH = AtomicAckETH(view(b, in, HdrAtomicAckETH))
	}
	if m&MaskImmDt != 0 {
		ib.ImmDt = ImmDt(view(b, in, HdrImmDt))
	}
	if m&MaskIETH != 0 {
		ib.IETH = IETH(view(b, in, HdrIETH))
	}
	n := len(data) - pad
	ib.Payload = data[:n:n]
	ib.Pad = data[n:len(data):len(data)]
	ib.ICRC = b[end:]
	ib.Raw = b
	return nil
}

// view returns header h of the packet, with its capacity clipped so that an
// append through the view cannot scribble over the next header.
func view(b []byte, in *OpcodeInfo, h Header) []byte {
	o := int(in.Offset[h])
	return b[o : o+h.Len() : o+h.Len()]
}
