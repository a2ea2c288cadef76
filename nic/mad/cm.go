package mad

import "encoding/binary"

// Private data sizes of the CM messages (IBTA 12.6; the kernel's
// IB_CM_*_PRIVATE_DATA_SIZE).
const (
	REQPrivateLen     = 92
	MRAPrivateLen     = 222
	REJPrivateLen     = 148
	REJARILen         = 72
	REPPrivateLen     = 196
	RTUPrivateLen     = 224
	DREQPrivateLen    = 220
	DREPPrivateLen    = 224
	SIDRREQPrivateLen = 216
	SIDRREPPrivateLen = 136
	SIDRREPInfoLen    = 72
)

// Path is a REQ's primary or alternate path (IBTA Table 106, 44 bytes). A plain
// value.
type Path struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits: 4.096 µs * 2^t
}

const pathLen = 44

func (p *Path) decode(d []byte) {
	p.LocalLID = binary.BigEndian.Uint16(d[0:])
	p.RemoteLID = binary.BigEndian.Uint16(d[2:])
	copy(p.LocalGID[:], d[4:20])
	copy(p.RemoteGID[:], d[20:36])
	p.FlowLabel = get32(d, 36, 20)
	p.PacketRate = getBits(d, 39, 2, 6)
	p.TrafficClass = d[40]
	p.HopLimit = d[41]
	p.SL = getBits(d, 42, 0, 4)
	p.SubnetLocal = getBits(d, 42, 4, 1) != 0
	p.LocalACKTimeout = getBits(d, 43, 0, 5)
}

func (p *Path) encode(d []byte) {
	binary.BigEndian.PutUint16(d[0:], p.LocalLID)
	binary.BigEndian.PutUint16(d[2:], p.RemoteLID)
	copy(d[4:20], p.LocalGID[:])
	copy(d[20:36], p.RemoteGID[:])
	set32(d, 36, 20, p.FlowLabel)
	setBits(d, 39, 2, 6, p.PacketRate)
	d[40] = p.TrafficClass
	d[41] = p.HopLimit
	setBits(d, 42, 0, 4, p.SL)
	setBits(d, 42, 4, 1, b2u(p.SubnetLocal))
	setBits(d, 43, 0, 5, p.LocalACKTimeout)
}

// REQ is a ConnectRequest (IBTA Table 106). A plain value.
type REQ struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	TransportServiceType    uint8  // 2 bits: 0 RC, 1 UC, 3 XRC
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits: the PSN the sender expects to receive
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits, enum ib_mtu
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits
	Primary, Alternate      Path
	SAPSupported            bool
	PrivateData             [REQPrivateLen]byte
}

func (*REQ) Attr() AttrID { return AttrREQ }

func (m *REQ) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.ServiceID = binary.BigEndian.Uint64(d[8:])
	m.LocalCAGUID = binary.BigEndian.Uint64(d[16:])
	m.LocalQKey = binary.BigEndian.Uint32(d[28:])
	m.LocalQPN = get32(d, 32, 24)
	m.ResponderResources = d[35]
	m.LocalEECN = get32(d, 36, 24)
	m.InitiatorDepth = d[39]
	m.RemoteEECN = get32(d, 40, 24)
	m.RemoteCMResponseTimeout = getBits(d, 43, 0, 5)
	m.TransportServiceType = getBits(d, 43, 5, 2)
	m.EndToEndFlowControl = getBits(d, 43, 7, 1) != 0
	m.StartingPSN = get32(d, 44, 24)
	m.LocalCMResponseTimeout = getBits(d, 47, 0, 5)
	m.RetryCount = getBits(d, 47, 5, 3)
	m.PKey = binary.BigEndian.Uint16(d[48:])
	m.PathMTU = getBits(d, 50, 0, 4)
	m.RDCExists = getBits(d, 50, 4, 1) != 0
	m.RNRRetryCount = getBits(d, 50, 5, 3)
	m.MaxCMRetries = getBits(d, 51, 0, 4)
	m.SRQ = getBits(d, 51, 4, 1) != 0
	m.ExtendedTransportType = getBits(d, 51, 5, 3)
	m.Primary.decode(d[52 : 52+pathLen])
	m.Alternate.decode(d[96 : 96+pathLen])
	m.SAPSupported = getBits(d, 139, 5, 1) != 0
	copy(m.PrivateData[:], d[140:])
}

func (m *REQ) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint64(d[8:], m.ServiceID)
	binary.BigEndian.PutUint64(d[16:], m.LocalCAGUID)
	binary.BigEndian.PutUint32(d[28:], m.LocalQKey)
	set32(d, 32, 24, m.LocalQPN)
	d[35] = m.ResponderResources
	set32(d, 36, 24, m.LocalEECN)
	d[39] = m.InitiatorDepth
	set32(d, 40, 24, m.RemoteEECN)
	setBits(d, 43, 0, 5, m.RemoteCMResponseTimeout)
	setBits(d, 43, 5, 2, m.TransportServiceType)
	setBits(d, 43, 7, 1, b2u(m.EndToEndFlowControl))
	set32(d, 44, 24, m.StartingPSN)
	setBits(d, 47, 0, 5, m.LocalCMResponseTimeout)
	setBits(d, 47, 5, 3, m.RetryCount)
	binary.BigEndian.PutUint16(d[48:], m.PKey)
	setBits(d, 50, 0, 4, m.PathMTU)
	setBits(d, 50, 4, 1, b2u(m.RDCExists))
	setBits(d, 50, 5, 3, m.RNRRetryCount)
	setBits(d, 51, 0, 4, m.MaxCMRetries)
	setBits(d, 51, 4, 1, b2u(m.SRQ))
	setBits(d, 51, 5, 3, m.ExtendedTransportType)
	m.Primary.encode(d[52 : 52+pathLen])
	m.Alternate.encode(d[96 : 96+pathLen])
	setBits(d, 139, 5, 1, b2u(m.SAPSupported))
	copy(d[140:], m.PrivateData[:])
}

// MRA is a Message Receipt Acknowledgement (IBTA Table 107). A plain value.
type MRA struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              uint8 // 2 bits: 0 REQ, 1 REP, 2 LAP
	ServiceTimeout            uint8 // 5 bits
	PrivateData               [MRAPrivateLen]byte
}

func (*MRA) Attr() AttrID { return AttrMRA }

func (m *MRA) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.MessageMRAed = getBits(d, 8, 0, 2)
	m.ServiceTimeout = getBits(d, 9, 0, 5)
	copy(m.PrivateData[:], d[10:])
}

func (m *MRA) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	setBits(d, 8, 0, 2, m.MessageMRAed)
	setBits(d, 9, 0, 5, m.ServiceTimeout)
	copy(d[10:], m.PrivateData[:])
}

// REJ is a Reject (IBTA Table 108). A plain value.
type REJ struct {
	LocalCommID, RemoteCommID uint32
	MessageRejected           uint8 // 2 bits: 0 REQ, 1 REP, 2 other
	RejectedInfoLength        uint8 // 7 bits
	Reason                    uint16
	ARI                       [REJARILen]byte
	PrivateData               [REJPrivateLen]byte
}

func (*REJ) Attr() AttrID { return AttrREJ }

func (m *REJ) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.MessageRejected = getBits(d, 8, 0, 2)
	m.RejectedInfoLength = getBits(d, 9, 0, 7)
	m.Reason = binary.BigEndian.Uint16(d[10:])
	copy(m.ARI[:], d[12:84])
	copy(m.PrivateData[:], d[84:])
}

func (m *REJ) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	setBits(d, 8, 0, 2, m.MessageRejected)
	setBits(d, 9, 0, 7, m.RejectedInfoLength)
	binary.BigEndian.PutUint16(d[10:], m.Reason)
	copy(d[12:84], m.ARI[:])
	copy(d[84:], m.PrivateData[:])
}

// REP is a Reply to a REQ (IBTA Table 110). A plain value.
type REP struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32 // 24 bits
	LocalEECN                 uint32 // 24 bits
	StartingPSN               uint32 // 24 bits: the PSN the sender expects to receive
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	EndToEndFlowControl       bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	PrivateData               [REPPrivateLen]byte
}

func (*REP) Attr() AttrID { return AttrREP }

func (m *REP) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.LocalQKey = binary.BigEndian.Uint32(d[8:])
	m.LocalQPN = get32(d, 12, 24)
	m.LocalEECN = get32(d, 16, 24)
	m.StartingPSN = get32(d, 20, 24)
	m.ResponderResources = d[24]
	m.InitiatorDepth = d[25]
	m.TargetACKDelay = getBits(d, 26, 0, 5)
	m.FailoverAccepted = getBits(d, 26, 5, 2)
	m.EndToEndFlowControl = getBits(d, 26, 7, 1) != 0
	m.RNRRetryCount = getBits(d, 27, 0, 3)
	m.SRQ = getBits(d, 27, 3, 1) != 0
	m.LocalCAGUID = binary.BigEndian.Uint64(d[28:])
	copy(m.PrivateData[:], d[36:])
}

func (m *REP) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	binary.BigEndian.PutUint32(d[8:], m.LocalQKey)
	set32(d, 12, 24, m.LocalQPN)
	set32(d, 16, 24, m.LocalEECN)
	set32(d, 20, 24, m.StartingPSN)
	d[24] = m.ResponderResources
	d[25] = m.InitiatorDepth
	setBits(d, 26, 0, 5, m.TargetACKDelay)
	setBits(d, 26, 5, 2, m.FailoverAccepted)
	setBits(d, 26, 7, 1, b2u(m.EndToEndFlowControl))
	setBits(d, 27, 0, 3, m.RNRRetryCount)
	setBits(d, 27, 3, 1, b2u(m.SRQ))
	binary.BigEndian.PutUint64(d[28:], m.LocalCAGUID)
	copy(d[36:], m.PrivateData[:])
}

// RTU is Ready To Use (IBTA Table 111). A plain value.
type RTU struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               [RTUPrivateLen]byte
}

func (*RTU) Attr() AttrID { return AttrRTU }

func (m *RTU) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	copy(m.PrivateData[:], d[8:])
}

func (m *RTU) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	copy(d[8:], m.PrivateData[:])
}

// DREQ is a Disconnect Request (IBTA Table 112). A plain value.
type DREQ struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits: the receiver's QPN (or EECN)
	PrivateData               [DREQPrivateLen]byte
}

func (*DREQ) Attr() AttrID { return AttrDREQ }

func (m *DREQ) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.RemoteQPN = get32(d, 8, 24)
	copy(m.PrivateData[:], d[12:])
}

func (m *DREQ) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	set32(d, 8, 24, m.RemoteQPN)
	copy(d[12:], m.PrivateData[:])
}

// DREP is a Disconnect Reply (IBTA Table 113). A plain value.
type DREP struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               [DREPPrivateLen]byte
}

func (*DREP) Attr() AttrID { return AttrDREP }

func (m *DREP) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	copy(m.PrivateData[:], d[8:])
}

func (m *DREP) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	copy(d[8:], m.PrivateData[:])
}

// SIDRREQ is a Service ID Resolution Request (IBTA Table 119), for UD QPs. A
// plain value.
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRREQPrivateLen]byte
}

func (*SIDRREQ) Attr() AttrID { return AttrSIDRREQ }

func (m *SIDRREQ) Decode(d []byte) {
	m.RequestID = binary.BigEndian.Uint32(d[0:])
	m.PKey = binary.BigEndian.Uint16(d[4:])
	m.ServiceID = binary.BigEndian.Uint64(d[8:])
	copy(m.PrivateData[:], d[16:])
}

func (m *SIDRREQ) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.RequestID)
	binary.BigEndian.PutUint16(d[4:], m.PKey)
	binary.BigEndian.PutUint64(d[8:], m.ServiceID)
	copy(d[16:], m.PrivateData[:])
}

// SIDRREP is a Service ID Resolution Response (IBTA Table 120). A plain value.
type SIDRREP struct {
	RequestID      uint32
	Status         uint8
	AddInfoLength  uint8
	QPN            uint32 // 24 bits
	ServiceID      uint64
	QKey           uint32
	AdditionalInfo [SIDRREPInfoLen]byte
	PrivateData    [SIDRREPPrivateLen]byte
}

func (*SIDRREP) Attr() AttrID { return AttrSIDRREP }

func (m *SIDRREP) Decode(d []byte) {
	m.RequestID = binary.BigEndian.Uint32(d[0:])
	m.Status = d[4]
	m.AddInfoLength = d[5]
	m.QPN = get32(d, 8, 24)
	m.ServiceID = binary.BigEndian.Uint64(d[12:])
	m.QKey = binary.BigEndian.Uint32(d[20:])
	copy(m.AdditionalInfo[:], d[24:96])
	copy(m.PrivateData[:], d[96:])
}

func (m *SIDRREP) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.RequestID)
	d[4] = m.Status
	d[5] = m.AddInfoLength
	set32(d, 8, 24, m.QPN)
	binary.BigEndian.PutUint64(d[12:], m.ServiceID)
	binary.BigEndian.PutUint32(d[20:], m.QKey)
	copy(d[24:96], m.AdditionalInfo[:])
	copy(d[96:], m.PrivateData[:])
}

// LAP is a Load Alternate Path (IBTA Table 115, the kernel's offsets). Linux
// drops it on RoCE (cm_lap_handler); so does xrnic's CM. A plain value.
type LAP struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits
	RemoteCMResponseTimeout   uint8  // 5 bits
	AltLocalLID, AltRemoteLID uint16
	AltLocalGID, AltRemoteGID [16]byte
	AltFlowLabel              uint32 // 20 bits
	AltTrafficClass           uint8
	AltHopLimit               uint8
	AltPacketRate             uint8 // 6 bits
	AltSL                     uint8 // 4 bits
	AltSubnetLocal            bool
	AltLocalACKTimeout        uint8 // 5 bits
	PrivateData               [LAPPrivateLen]byte
}

// LAPPrivateLen and APR's sizes (IB_CM_LAP_PRIVATE_DATA_SIZE, ...).
const (
	LAPPrivateLen = 168
	APRInfoLen    = 72
	APRPrivateLen = 148
)

func (*LAP) Attr() AttrID { return AttrLAP }

func (m *LAP) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.RemoteQPN = get32(d, 12, 24)
	m.RemoteCMResponseTimeout = getBits(d, 15, 0, 5)
	m.AltLocalLID = binary.BigEndian.Uint16(d[20:])
	m.AltRemoteLID = binary.BigEndian.Uint16(d[22:])
	copy(m.AltLocalGID[:], d[24:40])
	copy(m.AltRemoteGID[:], d[40:56])
	m.AltFlowLabel = get32(d, 56, 20)
	m.AltTrafficClass = d[59]
	m.AltHopLimit = d[60]
	m.AltPacketRate = getBits(d, 61, 2, 6)
	m.AltSL = getBits(d, 62, 0, 4)
	m.AltSubnetLocal = getBits(d, 62, 4, 1) != 0
	m.AltLocalACKTimeout = getBits(d, 63, 0, 5)
	copy(m.PrivateData[:], d[64:])
}

func (m *LAP) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	set32(d, 12, 24, m.RemoteQPN)
	setBits(d, 15, 0, 5, m.RemoteCMResponseTimeout)
	binary.BigEndian.PutUint16(d[20:], m.AltLocalLID)
	binary.BigEndian.PutUint16(d[22:], m.AltRemoteLID)
	copy(d[24:40], m.AltLocalGID[:])
	copy(d[40:56], m.AltRemoteGID[:])
	set32(d, 56, 20, m.AltFlowLabel)
	d[59] = m.AltTrafficClass
	d[60] = m.AltHopLimit
	setBits(d, 61, 2, 6, m.AltPacketRate)
	setBits(d, 62, 0, 4, m.AltSL)
	setBits(d, 62, 4, 1, b2u(m.AltSubnetLocal))
	setBits(d, 63, 0, 5, m.AltLocalACKTimeout)
	copy(d[64:], m.PrivateData[:])
}

// APR is an Alternate Path Response (IBTA Table 116). A plain value.
type APR struct {
	LocalCommID, RemoteCommID uint32
	AddInfoLength             uint8
	Status                    uint8
	AdditionalInfo            [APRInfoLen]byte
	PrivateData               [APRPrivateLen]byte
}

func (*APR) Attr() AttrID { return AttrAPR }

func (m *APR) Decode(d []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(d[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(d[4:])
	m.AddInfoLength = d[8]
	m.Status = d[9]
	copy(m.AdditionalInfo[:], d[12:84])
	copy(m.PrivateData[:], d[84:])
}

func (m *APR) Encode(d []byte) {
	binary.BigEndian.PutUint32(d[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(d[4:], m.RemoteCommID)
	d[8] = m.AddInfoLength
	d[9] = m.Status
	copy(d[12:84], m.AdditionalInfo[:])
	copy(d[84:], m.PrivateData[:])
}
