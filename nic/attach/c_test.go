package attach

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xrnic/xrnic/internal/testutil"
	"github.com/xrnic/xrnic/nic/shm"
)

// buildPeer compiles clib/test/ring_peer.c with the Debian C toolchain,
// warnings as errors.
func buildPeer(t *testing.T) string {
	t.Helper()
	gcc := testutil.RequireCommand(t, "gcc")
	root := testutil.RepoRoot(t)
	bin := filepath.Join(t.TempDir(), "ring_peer")
	out, err := exec.Command(gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2",
		"-I", filepath.Join(root, "clib", "include"), "-o", bin,
		filepath.Join(root, "clib", "test", "ring_peer.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// offset is the byte offset of field name in the Go struct t, laid out as
// encoding/binary lays it out (as docs/attach.md does).
func offset(t *testing.T, v any, name string) int {
	t.Helper()
	rt := reflect.TypeOf(v)
	off := 0
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.Name == name {
			return off
		}
		off += binary.Size(reflect.New(f.Type).Elem().Interface())
	}
	t.Fatalf("%T has no field %s", v, name)
	return 0
}

// TestCLayout holds clib's C declarations of the protocol to the Go side's:
// every struct's size, and the offsets of the fields past which a mistake
// would shift the rest. The rings' and entries' offsets are nic/shm's.
func TestCLayout(t *testing.T) {
	out, err := exec.Command(buildPeer(t), "layout").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		n, _ := strconv.Atoi(f[1])
		got[f[0]] = n
	}
	want := map[string]int{
		"version": Version, "max_message": MaxMessage, "max_fds": MaxFDs, "op_cm_leave_mcast": int(OpCMLeaveMcast),
		"xrnic_hdr": HeaderLen, "xrnic_ring_hdr": shm.HeaderLen, "xrnic_sge": 16, "xrnic_send_wqe": shm.SendHeadLen,
		"xrnic_recv_wqe": shm.RecvEntrySize(0), "xrnic_cqe": shm.CQEntrySize,
		// The rings' header and the entries, as nic/shm lays them.
		"xrnic_ring_hdr.cons": 64, "xrnic_ring_hdr.flags": 128, "xrnic_ring_hdr.arm": 192, "xrnic_ring_hdr.events": 196,
		"xrnic_send_wqe.imm": 16, "xrnic_send_wqe.num_sge": 20, "xrnic_send_wqe.remote_addr": 24,
		"xrnic_send_wqe.ah": 36, "xrnic_send_wqe.compare_add": 48, "xrnic_send_wqe.swap": 56,
		"xrnic_cqe.imm": 24, "xrnic_cqe.qp_num": 28, "xrnic_cqe.wc_flags": 36, "xrnic_cqe.pkey_index": 40,
		"xrnic_cqe.sl": 44, "xrnic_cqe.dlid_path_bits": 45,
	}
	for c, g := range map[string]any{
		"xrnic_hello_req": HelloReq{}, "xrnic_hello_rep": HelloRep{}, "xrnic_device": DeviceRep{}, "xrnic_port": PortRep{},
		"xrnic_gid_req": GIDReq{}, "xrnic_gid_rep": GIDRep{}, "xrnic_handle_rep": HandleRep{}, "xrnic_reg_mr": RegMRReq{},
		"xrnic_reg_mr_rep": RegMRRep{}, "xrnic_create_cq": CreateCQReq{}, "xrnic_create_cq_rep": CreateCQRep{},
		"xrnic_create_qp": CreateQPReq{}, "xrnic_create_qp_rep": CreateQPRep{}, "xrnic_av": AV{}, "xrnic_qp_attr": QPAttr{},
		"xrnic_modify_qp": ModifyQPReq{}, "xrnic_create_ah": CreateAHReq{}, "xrnic_destroy": DestroyReq{}, "xrnic_mcast": McastReq{},
		"xrnic_event": EventMsg{}, "xrnic_create_srq": CreateSRQReq{}, "xrnic_create_srq_rep": CreateSRQRep{},
		"xrnic_modify_srq": ModifySRQReq{}, "xrnic_query_srq_rep": QuerySRQRep{}, "xrnic_sockaddr": SockAddr{}, "xrnic_conn_param": CMParam{},
		"xrnic_cm_id_req": CMIDReq{}, "xrnic_cm_join": CMJoinReq{}, "xrnic_cm_addr": CMAddrReq{}, "xrnic_cm_conn": CMConnReq{}, "xrnic_cm_option": CMOptionReq{},
		"xrnic_cm_init_qp_attr_rep": CMInitQPAttrRep{}, "xrnic_cm_event": CMEventMsg{},
	} {
		want[c] = binary.Size(g)
	}
	for c, f := range map[string]struct {
		v    any
		name string
	}{
		"xrnic_device.fw_ver": {DeviceRep{}, "FWVer"}, "xrnic_qp_attr.pkey_index": {QPAttr{}, "PKeyIndex"},
		"xrnic_qp_attr.sq_draining": {QPAttr{}, "SQDrainNotify"}, "xrnic_qp_attr.ah_attr": {QPAttr{}, "AV"},
		"xrnic_conn_param.private_data": {CMParam{}, "Private"}, "xrnic_cm_event.param": {CMEventMsg{}, "Param"},
		"xrnic_cm_event.ah_attr": {CMEventMsg{}, "AV"}, "xrnic_mcast.qp": {McastReq{}, "QP"},
		"xrnic_mcast.mlid": {McastReq{}, "MLID"}, "xrnic_port.active_width": {PortRep{}, "ActiveWidth"},
		"xrnic_port.active_speed": {PortRep{}, "ActiveSpeed"},
	} {
		want[c] = offset(t, f.v, f.name)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: C says %d (printed: %v), Go %d", k, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("C printed %d layouts, the test knows %d", len(got), len(want))
	}
}

// stuckAfter returns a check for a spinning loop: it fails the test once d
// has passed (the other process died, or its side of the ring is wrong).
func stuckAfter(t *testing.T, d time.Duration) func() {
	end, spins := time.Now().Add(d), 0
	return func() {
		if spins++; spins%4096 == 0 && time.Now().After(end) {
			t.Fatalf("the ring did not move for %v", d)
		}
	}
}

// TestCRing runs the rings across the language boundary, in two processes:
// a C producer's send WQEs read by Go's consumer, and Go's completions read by
// a C consumer, each through many wraps of a small ring.
func TestCRing(t *testing.T) {
	peer := buildPeer(t)
	const n, count = 8, 20000
	t.Run("C produces", func(t *testing.T) {
		esize := shm.SendEntrySize(1, 0)
		mem, err := shm.Create("c-send", shm.RingSize(n, esize))
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		ring, err := shm.NewRing(mem.Bytes(), 0, n, esize, false)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(peer, "produce", strconv.Itoa(len(mem.Bytes())), "0", strconv.Itoa(n),
			strconv.Itoa(esize), strconv.Itoa(count))
		cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(mem.FD()), "ring")}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sges := make([]shm.SGE, 1)
		stuck := stuckAfter(t, 30*time.Second)
		for i := uint32(0); i < count; {
			e, err := ring.Peek(0)
			if err != nil {
				t.Fatal(err)
			}
			if e == nil {
				stuck()
				continue
			}
			var w shm.SendWQE
			shm.GetSendWQE(e, &w)
			want := shm.SendWQE{WRID: uint64(i), Opcode: i % 11, Flags: 2, Imm: [4]byte{byte(i), 1, 2, 3}, NumSGE: 1,
				RemoteAddr: uint64(i) << 20, RKey: 0xabc00 + i, AH: 7, RemoteQPN: 0x11, RemoteQKey: 0x22,
				CompareAdd: ^uint64(i), Swap: uint64(i) * 3}
			if err := shm.GetSGEs(shm.SendTail(e), 1, sges); err != nil || w != want ||
				sges[0] != (shm.SGE{Addr: 0x1000 + uint64(i), Length: i * 3, LKey: 0x77}) {
				t.Fatalf("WQE %d: %+v %+v, want %+v", i, w, sges[0], want)
			}
			ring.Release(1)
			i++
		}
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("C consumes", func(t *testing.T) {
		mem, err := shm.Create("c-cq", shm.RingSize(n, shm.CQEntrySize))
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		ring, err := shm.NewRing(mem.Bytes(), 0, n, shm.CQEntrySize, true)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(peer, "consume", strconv.Itoa(len(mem.Bytes())), "0", strconv.Itoa(n), strconv.Itoa(count))
		cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(mem.FD()), "ring")}
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		var werr error
		go func() {
			defer wg.Done()
			werr = cmd.Wait()
		}()
		stuck := stuckAfter(t, 30*time.Second)
		for i := uint32(0); i < count; {
			e, err := ring.Reserve(0)
			if err != nil {
				t.Fatal(err)
			}
			if e == nil {
				stuck()
				continue
			}
			shm.PutCQE(e, &shm.CQE{WRID: uint64(i), Status: i % 22, Opcode: 128 + i%2, ByteLen: i * 7,
				Imm: [4]byte{1, 2, 3, byte(i)}, QPN: 0x11, SrcQP: i, Flags: 3, PKeyIndex: 9, SL: 4, DLIDPathBits: 5})
			ring.Commit(1)
			i++
		}
		wg.Wait()
		if werr != nil || strings.TrimSpace(out.String()) != "ok" {
			t.Fatalf("the C consumer: %v %q", werr, out.String())
		}
	})
}
