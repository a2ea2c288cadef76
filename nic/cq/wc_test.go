// The WC enums against rdma-core's values and strings.

package cq

import (
	"testing"
	"unsafe"
)

// From rdma-core libibverbs/verbs.h and enum_strs.c (ibv_wc_status_str), commit
// 691953d8d502f54088f776c5ba2aeed0a5ac945d.
func TestStatusMatchesRDMACore(t *testing.T) {
	tests := []struct {
		s    Status
		num  int
		want string
	}{
		{Success, 0, "success"},
		{LocLenErr, 1, "local length error"},
		{LocQPOpErr, 2, "local QP operation error"},
		{LocEECOpErr, 3, "local EE context operation error"},
		{LocProtErr, 4, "local protection error"},
		{WRFlushErr, 5, "Work Request Flushed Error"},
		{MWBindErr, 6, "memory management operation error"},
		{BadRespErr, 7, "bad response error"},
		{LocAccessErr, 8, "local access error"},
		{RemInvReqErr, 9, "remote invalid request error"},
		{RemAccessErr, 10, "remote access error"},
		{RemOpErr, 11, "remote operation error"},
		{RetryExcErr, 12, "transport retry counter exceeded"},
		{RNRRetryExcErr, 13, "RNR retry counter exceeded"},
		{LocRDDViolErr, 14, "local RDD violation error"},
		{RemInvRDReqErr, 15, "remote invalid RD request"},
		{RemAbortErr, 16, "aborted error"},
		{InvEECNErr, 17, "invalid EE context number"},
		{InvEECStateErr, 18, "invalid EE context state"},
		{FatalErr, 19, "fatal error"},
		{RespTimeoutErr, 20, "response timeout error"},
		{GeneralErr, 21, "general error"},
		{TMErr, 22, "TM error"},
		{TMRndvIncomplete, 23, "TM software rendezvous"},
		{24, 24, "unknown"},
		{255, 255, "unknown"},
	}
	for _, tt := range tests {
		if int(tt.s) != tt.num {
			t.Errorf("status %q = %d, want %d", tt.want, tt.s, tt.num)
		}
		if got := tt.s.String(); got != tt.want {
			t.Errorf("Status(%d).String() = %q, want %q", tt.num, got, tt.want)
		}
	}
}

func TestOpcodeMatchesRDMACore(t *testing.T) {
	tests := []struct {
		op   Opcode
		num  int
		want string
		recv bool
	}{
		{Send, 0, "send", false},
		{RDMAWrite, 1, "rdma-write", false},
		{RDMARead, 2, "rdma-read", false},
		{CompSwap, 3, "atomic-cmp-and-swp", false},
		{FetchAdd, 4, "atomic-fetch-and-add", false},
		{BindMW, 5, "bind-mw", false},
		{LocalInv, 6, "local-inv", false},
		{TSO, 7, "tso", false},
		{Flush, 8, "flush", false},
		{AtomicWrite, 9, "atomic-write", false},
		{Recv, 128, "recv", true},
		{RecvRDMAWithImm, 129, "recv-rdma-with-imm", true},
		{TMAdd, 130, "tm-add", true},
		{TMDel, 131, "tm-del", true},
		{TMSync, 132, "tm-sync", true},
		{TMRecv, 133, "tm-recv", true},
		{TMNoTag, 134, "tm-no-tag", true},
		{Driver1, 135, "driver1", true},
		{Driver2, 136, "driver2", true},
		{Driver3, 137, "driver3", true},
		{RegMR, 10, "reg-mr", false},
		{11, 11, "unknown", false},
		{138, 138, "unknown", true},
	}
	for _, tt := range tests {
		if int(tt.op) != tt.num {
			t.Errorf("opcode %q = %d, want %d", tt.want, tt.op, tt.num)
		}
		if got := tt.op.String(); got != tt.want {
			t.Errorf("Opcode(%d).String() = %q, want %q", tt.num, got, tt.want)
		}
		if got := tt.op.IsRecv(); got != tt.recv {
			t.Errorf("Opcode(%d).IsRecv() = %v, want %v", tt.num, got, tt.recv)
		}
	}
}

func TestFlagsMatchRDMACore(t *testing.T) {
	for _, tt := range []struct {
		f    Flags
		want Flags
	}{
		{GRH, 1}, {WithImm, 2}, {IPCSumOK, 4}, {WithInv, 8},
		{TMSyncReq, 16}, {TMMatch, 32}, {TMDataValid, 64},
	} {
		if tt.f != tt.want {
			t.Errorf("flag %v = %d, want %d", tt.f, uint16(tt.f), uint16(tt.want))
		}
	}
	for _, tt := range []struct {
		f    Flags
		want string
	}{
		{0, "0"},
		{GRH, "GRH"},
		{GRH | WithImm, "GRH|WithImm"},
		{WithInv | TMDataValid, "WithInv|TMDataValid"},
		{WithImm | 0x300, "WithImm|0x300"},
		{0x8000, "0x8000"},
	} {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("Flags(%#x).String() = %q, want %q", uint16(tt.f), got, tt.want)
		}
	}
}

// The ring copies WCs by value; keep them small.
func TestWCSize(t *testing.T) {
	if got := unsafe.Sizeof(WC{}); got != 48 {
		t.Errorf("sizeof(WC) = %d, want 48", got)
	}
}
