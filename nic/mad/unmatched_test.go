package mad

import (
	"bytes"
	"testing"
)

// A Get or Set on QP1 that no agent takes is answered GetResp, "unsupported
// method/attribute" (generate_unmatched_resp); anything else gets no answer:
// other methods, SMP classes (QP0's), another base version, a short MAD.
func TestUnmatchedResponse(t *testing.T) {
	req := make([]byte, Size)
	h := Header{BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: CMClassVersion, Method: MethodGet,
		TID: 0x1122334455667788, AttrID: 0x0001, AttrMod: 7}
	h.Encode(req)
	req[100] = 0xAB
	resp := make([]byte, Size)
	if !UnmatchedResponse(req, resp) {
		t.Fatal("a Get of the CM's ClassPortInfo: no answer")
	}
	got, _ := ParseHeader(resp)
	want := h
	want.Method, want.Status = MethodGetResp, StatusUnsupportedMethodAttr
	if got != want || resp[100] != 0xAB || !bytes.Equal(resp[HeaderLen:], req[HeaderLen:]) {
		t.Fatalf("answer %+v, want %+v and the request's data", got, want)
	}
	req[3] = MethodSet
	if !UnmatchedResponse(req, resp) || resp[3] != MethodGetResp {
		t.Fatal("a Set: no GetResp")
	}
	for name, mod := range map[string]func(b []byte){
		"Send":           func(b []byte) { b[3] = MethodSend },
		"GetResp":        func(b []byte) { b[3] = MethodGetResp },
		"an SMP":         func(b []byte) { b[1] = classSubnLIDRouted },
		"a directed SMP": func(b []byte) { b[1] = classSubnDirectedRouted },
		"base version 2": func(b []byte) { b[0] = 2 },
		"a CM REQ":       func(b []byte) { b[16], b[17] = 0, byte(AttrREQ) }, // validate_mad drops it
	} {
		b := append([]byte(nil), req...)
		mod(b)
		if UnmatchedResponse(b, make([]byte, Size)) {
			t.Errorf("%s: answered", name)
		}
	}
	if UnmatchedResponse(req[:Size-1], resp) {
		t.Error("a short MAD: answered")
	}
}
