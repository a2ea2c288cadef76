package attach

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// The payloads' sizes are docs/attach.md's: a C client declares the same
// structs, so a size that changes is a protocol change.
func TestPayloadSizes(t *testing.T) {
	for _, c := range []struct {
		p    any
		size int
	}{
		{HelloReq{}, 8}, {HelloRep{}, 48}, {DeviceRep{}, 128}, {PortRep{}, 24}, {GIDReq{}, 8}, {GIDRep{}, 16},
		{HandleRep{}, 8}, {RegMRReq{}, 32}, {RegMRRep{}, 16}, {CreateCQReq{}, 8}, {CreateCQRep{}, 16},
		{CreateQPReq{}, 48}, {CreateQPRep{}, 56}, {AV{}, 24}, {QPAttr{}, 80}, {ModifyQPReq{}, 88},
		{CreateAHReq{}, 32}, {DestroyReq{}, 8}, {McastReq{}, 24}, {EventMsg{}, 16}, {CreateSRQReq{}, 16}, {CreateSRQRep{}, 24},
		{ModifySRQReq{}, 16}, {QuerySRQRep{}, 16}, {SockAddr{}, 24}, {CMParam{}, 216}, {CMIDReq{}, 8}, {CMJoinReq{}, 32}, {CMAddrReq{}, 56},
		{CMConnReq{}, 224}, {CMOptionReq{}, 16}, {CMInitQPAttrRep{}, 88}, {CMEventMsg{}, 304},
	} {
		if n := binary.Size(c.p); n != c.size {
			t.Errorf("%T: %d bytes, docs/attach.md says %d", c.p, n, c.size)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	msg, err := Encode(nil, OpRegMR, 7, 0, &RegMRReq{Addr: 1, Length: 2, FileOff: 3, PD: 4, Access: 5})
	if err != nil {
		t.Fatal(err)
	}
	h, p, err := DecodeHeader(msg)
	if err != nil || h.Op != OpRegMR || h.Seq != 7 || h.Len != 32 {
		t.Fatalf("%+v %v", h, err)
	}
	var r RegMRReq
	if err := DecodePayload(p, &r); err != nil || r != (RegMRReq{1, 2, 3, 4, 5}) {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range [][]byte{nil, msg[:15], msg[:20], append(msg, 0)} {
		if _, _, err := DecodeHeader(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("%d bytes: %v", len(bad), err)
		}
	}
	if err := DecodePayload(p[:31], &r); !errors.Is(err, ErrProtocol) {
		t.Errorf("short payload: %v", err)
	}
}

// The errnos go both ways: a sentinel's errno names the same sentinel back.
func TestErrnos(t *testing.T) {
	for _, e := range errnos {
		if got := Errno(fmt.Errorf("wrapped: %w", e.sentinel)); got != int32(e.errno) {
			t.Errorf("%v: errno %d, want %d", e.sentinel, got, e.errno)
		}
		if s := Sentinel(e.errno); Errno(s) != int32(e.errno) {
			t.Errorf("errno %d: sentinel %v", e.errno, s)
		}
	}
	if Errno(nil) != 0 || Errno(errors.New("other")) != int32(unix.EINVAL) || Errno(unix.EAGAIN) != int32(unix.EAGAIN) {
		t.Error("nil, an unknown error or an errno itself")
	}
}
