package mad

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	"github.com/xrnic/xrnic/nic/errs"
)

// randomize fills every field of m with random values, by encoding random CM
// data and decoding it.
func randomize(r *rand.Rand, m Message) {
	d := make([]byte, DataLen)
	for i := range d {
		d[i] = byte(r.Uint32())
	}
	m.Decode(d)
}

// Every message survives Encode then Decode unchanged, and Encode writes only
// into the CM data (the fields of different messages do not overlap).
func TestMessagesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, a := range []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRREQ, AttrSIDRREP,
		AttrLAP, AttrAPR} {
		for range 100 {
			m, err := NewMessage(a)
			if err != nil {
				t.Fatal(err)
			}
			randomize(r, m)
			b := make([]byte, Size)
			Marshal(b, r.Uint64(), m)
			h, back, err := Parse(b)
			if err != nil || h.AttrID != a || h.Method != MethodSend {
				t.Fatalf("%v: %v, %+v", a, err, h)
			}
			if !reflect.DeepEqual(back, m) {
				t.Fatalf("%v: round trip\n got %+v\nwant %+v", a, back, m)
			}
		}
	}
}

func TestParseRefuses(t *testing.T) {
	b := make([]byte, Size)
	Marshal(b, 7, &RTU{LocalCommID: 1})
	if _, _, err := Parse(b[:Size-1]); !errors.Is(err, ErrTruncated) || !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("short MAD: %v", err)
	}
	b[1] = 0x81 // another class
	if _, _, err := Parse(b); !errors.Is(err, ErrNotCM) {
		t.Errorf("SA MAD: %v", err)
	}
	b[1] = ClassCM
	b[17] = 0x1B // past APR: no CM message
	if _, _, err := Parse(b); !errors.Is(err, ErrAttr) || !errors.Is(err, errs.ErrUnsupported) {
		t.Errorf("attribute 0x1b: %v", err)
	}
}

// TestLAPAPRLayout: the fields sit where ib_cm's ibta_vol1_c12.h puts them
// (Tables 115 and 116).
func TestLAPAPRLayout(t *testing.T) {
	d := make([]byte, DataLen)
	(&LAP{RemoteQPN: 0xabcdef, RemoteCMResponseTimeout: 0x1f, AltFlowLabel: 0xfffff, AltHopLimit: 0x40,
		AltPacketRate: 0x3f, AltSL: 0xf, AltSubnetLocal: true, AltLocalACKTimeout: 0x13,
		PrivateData: [LAPPrivateLen]byte{0: 0xaa}}).Encode(d)
	want := map[int]byte{12: 0xab, 13: 0xcd, 14: 0xef, 15: 0xf8, 56: 0xff, 57: 0xff, 58: 0xf0, 60: 0x40,
		61: 0x3f, 62: 0xf8, 63: 0x98, 64: 0xaa}
	for i, b := range d {
		if b != want[i] {
			t.Errorf("LAP byte %d = %#x, want %#x", i, b, want[i])
		}
	}
	d = make([]byte, DataLen)
	(&APR{LocalCommID: 1, AddInfoLength: 72, Status: 3, AdditionalInfo: [APRInfoLen]byte{0: 0xbb},
		PrivateData: [APRPrivateLen]byte{0: 0xcc}}).Encode(d)
	if d[3] != 1 || d[8] != 72 || d[9] != 3 || d[12] != 0xbb || d[84] != 0xcc {
		t.Errorf("APR: %x", d[:96])
	}
}

func TestCMAHeader(t *testing.T) {
	for _, c := range []struct{ src, dst string }{{"192.0.2.1", "192.0.2.2"}, {"2001:db8::1", "2001:db8::2"}} {
		h := CMAHeader{SrcPort: 0xd3e6, Src: netip.MustParseAddr(c.src), Dst: netip.MustParseAddr(c.dst)}
		p := make([]byte, REQPrivateLen)
		if err := h.Encode(p); err != nil {
			t.Fatal(err)
		}
		got, err := ParseCMAHeader(p)
		if err != nil || got != h {
			t.Fatalf("%v: got %+v, %v", c, got, err)
		}
	}
	mixed := CMAHeader{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("2001:db8::2")}
	if err := mixed.Encode(make([]byte, CMAHeaderLen)); !errors.Is(err, ErrCMAHeader) {
		t.Errorf("mixed families: %v", err)
	}
	if _, err := ParseCMAHeader(make([]byte, CMAHeaderLen)); !errors.Is(err, ErrCMAHeader) {
		t.Errorf("IP version 0: %v", err)
	}
	if ps, port, ok := SplitServiceID(ServiceID(PortSpaceTCP, 7174)); !ok || ps != PortSpaceTCP || port != 7174 {
		t.Errorf("service ID: %#x %d %v", ps, port, ok)
	}
}

// FuzzParse: no input panics the parser, and a parsed message encodes to bytes
// that parse to the same message.
func FuzzParse(f *testing.F) {
	b := make([]byte, Size)
	Marshal(b, 1, &REQ{LocalCommID: 1, ServiceID: ServiceID(PortSpaceTCP, 1)})
	f.Add(b)
	f.Add([]byte{1, 7, 2, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		h, m, err := Parse(in)
		if err != nil {
			return
		}
		out := make([]byte, Size)
		Marshal(out, h.TID, m)
		h2, m2, err := Parse(out)
		if err != nil || h2.AttrID != h.AttrID || !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-parse: %v %+v", err, m2)
		}
		if r, ok := m.(*REQ); ok {
			ParseCMAHeader(r.PrivateData[:])
		}
	})
}
