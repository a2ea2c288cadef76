package mad

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/xrnic/xrnic/nic/errs"
)

// Sizes (IBTA 13.4.2): every MAD on QP1 is 256 bytes.
const (
	Size      = 256
	HeaderLen = 24
	DataLen   = Size - HeaderLen // the CM data
)

// The CM's class (IBTA 12.11, Linux IB_MGMT_CLASS_CM and IB_CM_CLASS_VERSION).
const (
	BaseVersion    = 1
	ClassCM        = 0x07
	CMClassVersion = 2
	MethodSend     = 0x03 // the CM sends every message with Send()
	// QP1QKey is the well-known Q_Key of QP1 (IBTA 13.5.3).
	QP1QKey = 0x80010000
)

// AttrID is the attribute ID that names a CM message (IBTA Table 103).
type AttrID uint16

const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

var attrNames = map[AttrID]string{AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA",
	AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP",
	AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR"}

func (a AttrID) String() string {
	if n, ok := attrNames[a]; ok {
		return n
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// Errors. Each wraps ErrInvalid of the errs vocabulary.
var (
	ErrTruncated = fmt.Errorf("mad: shorter than %d bytes: %w", Size, errs.ErrInvalid)
	ErrNotCM     = fmt.Errorf("mad: not a CM class %d version %d MAD: %w", ClassCM, CMClassVersion, errs.ErrInvalid)
	ErrAttr      = errors.New("mad: unknown CM attribute")
)

// Header is the common MAD header (IBTA 13.4.2, struct ib_mad_hdr). A plain value.
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64 // transaction ID
	AttrID        AttrID
	AttrMod       uint32
}

// ParseHeader reads the header at the start of b.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrTruncated
	}
	return Header{
		BaseVersion: b[0], MgmtClass: b[1], ClassVersion: b[2], Method: b[3],
		Status:        binary.BigEndian.Uint16(b[4:]),
		ClassSpecific: binary.BigEndian.Uint16(b[6:]),
		TID:           binary.BigEndian.Uint64(b[8:]),
		AttrID:        AttrID(binary.BigEndian.Uint16(b[16:])),
		AttrMod:       binary.BigEndian.Uint32(b[20:]),
	}, nil
}

// Encode writes the header into the first HeaderLen bytes of b (the reserved
// field is zeroed).
func (h *Header) Encode(b []byte) {
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	binary.BigEndian.PutUint16(b[4:], h.Status)
	binary.BigEndian.PutUint16(b[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(b[8:], h.TID)
	binary.BigEndian.PutUint16(b[16:], uint16(h.AttrID))
	b[18], b[19] = 0, 0
	binary.BigEndian.PutUint32(b[20:], h.AttrMod)
}

// CMHeader returns the header of a CM message: Send() of attr with tid.
func CMHeader(attr AttrID, tid uint64) Header {
	return Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, TID: tid, AttrID: attr}
}

// ParseCM checks that b is a whole CM MAD and returns its header and its CM data.
func ParseCM(b []byte) (Header, []byte, error) {
	if len(b) < Size {
		return Header{}, nil, ErrTruncated
	}
	h, _ := ParseHeader(b)
	if h.BaseVersion != BaseVersion || h.MgmtClass != ClassCM || h.ClassVersion != CMClassVersion {
		return h, nil, ErrNotCM
	}
	return h, b[HeaderLen:Size], nil
}

// Message is one CM message's fields. Decode reads them from the CM data (DataLen
// bytes); Encode writes them into zeroed CM data.
type Message interface {
	Attr() AttrID
	Decode(d []byte)
	Encode(d []byte)
}

// NewMessage returns a zero message of the given attribute, or ErrAttr.
func NewMessage(a AttrID) (Message, error) {
	switch a {
	case AttrREQ:
		return new(REQ), nil
	case AttrMRA:
		return new(MRA), nil
	case AttrREJ:
		return new(REJ), nil
	case AttrREP:
		return new(REP), nil
	case AttrRTU:
		return new(RTU), nil
	case AttrDREQ:
		return new(DREQ), nil
	case AttrDREP:
		return new(DREP), nil
	case AttrSIDRREQ:
		return new(SIDRREQ), nil
	case AttrSIDRREP:
		return new(SIDRREP), nil
	case AttrLAP:
		return new(LAP), nil
	case AttrAPR:
		return new(APR), nil
	}
	return nil, fmt.Errorf("%w %v: %w", ErrAttr, a, errs.ErrUnsupported)
}

// Parse decodes a whole CM MAD.
func Parse(b []byte) (Header, Message, error) {
	h, d, err := ParseCM(b)
	if err != nil {
		return h, nil, err
	}
	m, err := NewMessage(h.AttrID)
	if err != nil {
		return h, nil, err
	}
	m.Decode(d)
	return h, m, nil
}

// Marshal encodes a whole CM MAD into b (Size bytes): the header of m's attribute
// with tid, then m.
func Marshal(b []byte, tid uint64, m Message) {
	clear(b[:Size])
	h := CMHeader(m.Attr(), tid)
	h.Encode(b)
	m.Encode(b[HeaderLen:Size])
}
