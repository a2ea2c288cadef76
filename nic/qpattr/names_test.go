// Enum values against the verbs headers, String forms, and the state predicates.

package qpattr

import "testing"

func TestValuesMatchVerbsHeaders(t *testing.T) {
	// enum ibv_qp_attr_mask (libibverbs/verbs.h).
	for _, tc := range []struct {
		got  AttrMask
		want uint32
	}{
		{AttrState, 1 << 0}, {AttrCurState, 1 << 1}, {AttrEnSQDAsyncNotify, 1 << 2},
		{AttrAccessFlags, 1 << 3}, {AttrPKeyIndex, 1 << 4}, {AttrPort, 1 << 5},
		{AttrQKey, 1 << 6}, {AttrAV, 1 << 7}, {AttrPathMTU, 1 << 8}, {AttrTimeout, 1 << 9},
		{AttrRetryCnt, 1 << 10}, {AttrRNRRetry, 1 << 11}, {AttrRQPSN, 1 << 12},
		{AttrMaxQPRdAtomic, 1 << 13}, {AttrAltPath, 1 << 14}, {AttrMinRNRTimer, 1 << 15},
		{AttrSQPSN, 1 << 16}, {AttrMaxDestRdAtomic, 1 << 17}, {AttrPathMigState, 1 << 18},
		{AttrCap, 1 << 19}, {AttrDestQPN, 1 << 20}, {AttrRateLimit, 1 << 25},
		{AttrKnown, 0x21fffff},
	} {
		if uint32(tc.got) != tc.want {
			t.Errorf("%v = %#x, want %#x", tc.got, uint32(tc.got), tc.want)
		}
	}
	// enum ibv_qp_state, enum ib_qp_type, enum ibv_mtu, enum ibv_mig_state,
	// enum ibv_access_flags.
	for _, tc := range []struct {
		name      string
		got, want int
	}{
		{"RESET", int(Reset), 0}, {"INIT", int(Init), 1}, {"RTR", int(RTR), 2}, {"RTS", int(RTS), 3},
		{"SQD", int(SQD), 4}, {"SQE", int(SQE), 5}, {"ERR", int(Err), 6},
		{"GSI", int(GSI), 1}, {"RC", int(RC), 2}, {"UC", int(UC), 3}, {"UD", int(UD), 4},
		{"MTU256", int(MTU256), 1}, {"MTU4096", int(MTU4096), 5},
		{"MIGRATED", int(MigMigrated), 0}, {"REARM", int(MigRearm), 1}, {"ARMED", int(MigArmed), 2},
		{"LOCAL_WRITE", AccessLocalWrite, 1}, {"REMOTE_WRITE", AccessRemoteWrite, 2},
		{"REMOTE_READ", AccessRemoteRead, 4}, {"REMOTE_ATOMIC", AccessRemoteAtomic, 8},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct {
		got  string
		want string
	}{
		{Reset.String(), "RESET"}, {Init.String(), "INIT"}, {RTR.String(), "RTR"},
		{RTS.String(), "RTS"}, {SQD.String(), "SQD"}, {SQE.String(), "SQE"},
		{Err.String(), "ERR"}, {State(7).String(), "State(7)"},
		{RC.String(), "RC"}, {UC.String(), "UC"}, {UD.String(), "UD"}, {GSI.String(), "GSI"},
		{Type(0).String(), "Type(0)"}, {Type(9).String(), "Type(9)"},
		{MTU256.String(), "256"}, {MTU1024.String(), "1024"}, {MTU4096.String(), "4096"},
		{MTU(0).String(), "MTU(0)"}, {MTU(6).String(), "MTU(6)"},
		{MigArmed.String(), "ARMED"}, {MigState(3).String(), "MigState(3)"},
		{AttrMask(0).String(), "0"},
		{(AttrState | AttrPKeyIndex).String(), "STATE|PKEY_INDEX"},
		{(AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags).String(), "STATE|ACCESS_FLAGS|PKEY_INDEX|PORT"},
		{(AttrDestQPN | AttrRateLimit).String(), "DEST_QPN|RATE_LIMIT"},
		{(AttrState | 1<<21 | 1<<31).String(), "STATE|0x80200000"},
		{AttrMask(1 << 24).String(), "0x1000000"},
		{AttrKnown.String(), "STATE|CUR_STATE|EN_SQD_ASYNC_NOTIFY|ACCESS_FLAGS|PKEY_INDEX|PORT|QKEY|AV|" +
			"PATH_MTU|TIMEOUT|RETRY_CNT|RNR_RETRY|RQ_PSN|MAX_QP_RD_ATOMIC|ALT_PATH|MIN_RNR_TIMER|" +
			"SQ_PSN|MAX_DEST_RD_ATOMIC|PATH_MIG_STATE|CAP|DEST_QPN|RATE_LIMIT"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		m     MTU
		bytes int
	}{{MTU256, 256}, {MTU512, 512}, {MTU1024, 1024}, {MTU2048, 2048}, {MTU4096, 4096}, {0, 0}, {6, 0}} {
		if got := tc.m.Bytes(); got != tc.bytes {
			t.Errorf("%v.Bytes() = %d, want %d", tc.m, got, tc.bytes)
		}
		if tc.bytes == 0 {
			continue
		}
		if m, ok := MTUFromBytes(tc.bytes); !ok || m != tc.m {
			t.Errorf("MTUFromBytes(%d) = %v, %v; want %v, true", tc.bytes, m, ok, tc.m)
		}
	}
	for _, n := range []int{0, 255, 1000, 1500, 4097, -1} {
		if m, ok := MTUFromBytes(n); ok {
			t.Errorf("MTUFromBytes(%d) = %v, true; want false", n, m)
		}
	}
	for _, tc := range []struct {
		n  int
		m  MTU
		ok bool
	}{{255, 0, false}, {256, MTU256, true}, {1500 - 58, MTU1024, true}, {9000, MTU4096, true}, {4095, MTU2048, true}} {
		if m, ok := MTUFloor(tc.n); m != tc.m || ok != tc.ok {
			t.Errorf("MTUFloor(%d) = %v, %v; want %v, %v", tc.n, m, ok, tc.m, tc.ok)
		}
	}
}

// TestStatePredicates is IBTA §10.3.1 and §11.4.1, state by state.
func TestStatePredicates(t *testing.T) {
	for _, tc := range []struct {
		s                                                State
		postSend, postRecv, incoming, starts, fl, flSend bool
	}{
		{Reset, false, false, false, false, false, false},
		{Init, false, true, false, false, false, false},
		{RTR, false, true, true, false, false, false},
		{RTS, true, true, true, true, false, false},
		{SQD, true, true, true, false, false, false},
		{SQE, true, true, true, false, false, true},
		{Err, true, true, false, false, true, true},
		{State(7), false, false, false, false, false, false},
	} {
		got := [6]bool{CanPostSend(tc.s), CanPostRecv(tc.s), ProcessesIncoming(tc.s), StartsSends(tc.s), Flushes(tc.s), FlushesSend(tc.s)}
		want := [6]bool{tc.postSend, tc.postRecv, tc.incoming, tc.starts, tc.fl, tc.flSend}
		if got != want {
			t.Errorf("%v: [CanPostSend CanPostRecv ProcessesIncoming StartsSends Flushes FlushesSend] = %v, want %v", tc.s, got, want)
		}
	}
}
