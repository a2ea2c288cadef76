// Goroutine leak check and helpers shared by the package tests.

package mr

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// All rights a region can grant, for tests that do not care.
const allRights = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic

func mustRegister(t testing.TB, tb *Table, pd uint32, buf []byte, iova uint64, access Access) *Region {
	t.Helper()
	r, err := tb.Register(pd, buf, iova, access)
	if err != nil {
		t.Fatalf("Register(pd %d, %d bytes, iova %#x, %v): %v", pd, len(buf), iova, access, err)
	}
	return r
}

func mustDeregister(t testing.TB, tb *Table, r *Region) {
	t.Helper()
	if err := tb.Deregister(r); err != nil {
		t.Fatalf("Deregister(key %#x): %v", r.LKey(), err)
	}
}

// pattern returns n bytes that are each a function of their offset, so a slice's
// contents show where in the buffer it starts.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) ^ seed
	}
	return b
}

// sameMemory reports whether a and b are the same bytes of memory, not just equal.
func sameMemory(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// testQP is the QP number remote lookups in these tests come from.
const testQP = 17

// qpOf is Lookup's qpn for a remote (R_Key) or local (L_Key) lookup.
func qpOf(remote bool) uint32 {
	if remote {
		return testQP
	}
	return Local
}

// fastReg maps buf as a one-buffer page list and registers it, as a ULP's
// ib_map_mr_sg and REG_MR work request do.
func fastReg(t testing.TB, tb *Table, r *Region, key, pd uint32, buf []byte, iova uint64, access Access) error {
	t.Helper()
	if _, err := tb.MapSG(r, [][]byte{buf}, 4096, iova); err != nil {
		return err
	}
	return tb.FastReg(r, key, pd, access)
}
