// Header sizes, EtherTypes, ports and well-known values of the RoCEv2 format.

package wire

// Sizes and fixed numbers of the RoCEv2 wire format, in one place.
const (
	EthernetLen  = 14 // destination, source, EtherType
	VLANLen      = 4  // 802.1Q TCI + inner EtherType, after the outer EtherType
	IPv4Len      = 20 // no options: rxe's ICRC covers a 20-byte header only
	IPv6Len      = 40
	UDPLen       = 8
	BTHLen       = 12
	RETHLen      = 16
	AETHLen      = 4
	AtomicETHLen = 28
	AtomicAckLen = 8 // AtomicAckETH
	ImmDtLen     = 4
	IETHLen      = 4
	DETHLen      = 8
	FETHLen      = 4
	ICRCLen      = 4
	CNPLen       = 16 // reserved bytes after the BTH of a CNP (Annex A17.9)

	// MaxHeaderLen is the longest BTH plus extension headers of any opcode.
	MaxHeaderLen = BTHLen + AtomicETHLen

	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	EtherTypeVLAN = 0x8100 // 802.1Q TPID
	EtherTypeQinQ = 0x88A8 // 802.1ad (S-tag) TPID

	IPProtoUDP = 17

	// UDPPortRoCEv2 is the IANA-assigned RoCEv2 port (ROCE_V2_UDP_DPORT in rxe).
	UDPPortRoCEv2 = 4791

	// DefaultPKey is the full-membership default partition key rxe uses.
	DefaultPKey = 0xFFFF

	// QP1QKey is the well-known Q_Key of the GSI QP (IB_QP1_QKEY, rdma/ib_mad.h).
	QP1QKey = 0x80010000
)
