package engine

import (
	"testing"
)

// TestQPTable: numbers from the wire beyond any QP find nothing, pages come
// and go with their QPs, all walks in number order and survives removal of
// the QP it is on, and a lookup allocates nothing.
func TestQPTable(t *testing.T) {
	var tb qpTable
	nums := []uint32{gsiQPN, minQPN, minQPN + 1, qpPage - 1, qpPage, 3*qpPage + 7, maxQPN - 1}
	for _, n := range nums {
		tb.put(&QP{qpn: n})
	}
	for _, n := range nums {
		if qp := tb.get(n); qp == nil || qp.qpn != n {
			t.Fatalf("get(%#x) = %v", n, qp)
		}
	}
	for _, n := range []uint32{0, minQPN + 2, 2 * qpPage, maxQPN, maxQPN + qpPage, 1<<24 - 1, ^uint32(0)} {
		if qp := tb.get(n); qp != nil {
			t.Fatalf("get(%#x) = QP %#x", n, qp.qpn)
		}
	}
	var seen []uint32
	tb.all(func(qp *QP) {
		seen = append(seen, qp.qpn)
		tb.remove(qp.qpn)
	})
	if len(seen) != len(nums) {
		t.Fatalf("all saw %#x, want %#x", seen, nums)
	}
	for i := range seen {
		if seen[i] != nums[i] {
			t.Fatalf("all saw %#x, want %#x in order", seen, nums)
		}
	}
	for i, p := range tb.pages {
		if p != nil {
			t.Fatalf("page %d kept with %d QPs after every QP went", i, p.n)
		}
	}
	// A page stays while one of its QPs does; removing twice counts once.
	tb.put(&QP{qpn: minQPN})
	tb.put(&QP{qpn: minQPN + 1})
	tb.remove(minQPN)
	tb.remove(minQPN)
	if tb.get(minQPN+1) == nil {
		t.Fatal("the page went with a QP still on it")
	}
	tb.remove(minQPN + 1)
	if tb.pages[0] != nil {
		t.Fatal("the empty page stayed")
	}
	tb.put(&QP{qpn: 5 * qpPage})
	if a := testing.AllocsPerRun(100, func() { tb.get(5 * qpPage); tb.get(1<<24 - 1) }); a != 0 {
		t.Fatalf("%v allocations a lookup", a)
	}
}
