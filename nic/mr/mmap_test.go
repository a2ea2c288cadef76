package mr

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/xrnic/xrnic/internal/testutil"
	"golang.org/x/sys/unix"
)

func TestMapAnonymous(t *testing.T) {
	b, err := MapAnonymous(10000)
	if err != nil {
		t.Fatalf("MapAnonymous: %v", err)
	}
	if len(b) != 10000 {
		t.Errorf("len %d, want 10000", len(b))
	}
	if p := uintptr(unsafe.Pointer(&b[0])); p%uintptr(os.Getpagesize()) != 0 {
		t.Errorf("address %#x is not page-aligned", p)
	}
	for i, c := range b {
		if c != 0 {
			t.Fatalf("byte %d is %#x, want zeroed memory", i, c)
		}
	}
	b[0], b[9999] = 1, 2

	tb := NewTable(4)
	whole := mustRegister(t, tb, 1, b, 0, allRights)
	part := mustRegister(t, tb, 1, b[4096:5000], 0, allRights)
	if err := Unmap(b); !errors.Is(err, ErrInUse) {
		t.Fatalf("Unmap with two regions: %v, want ErrInUse", err)
	}
	mustDeregister(t, tb, whole)
	if err := Unmap(b); !errors.Is(err, ErrInUse) {
		t.Fatalf("Unmap with a sub-slice region: %v, want ErrInUse", err)
	}
	// Reregistering the translation elsewhere releases the mapping.
	if _, err := tb.Reregister(part, ReregTranslation, 0, make([]byte, 8), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := Unmap(b); err != nil {
		t.Fatalf("Unmap: %v", err)
	}
	if err := Unmap(b); !errors.Is(err, ErrInvalid) {
		t.Errorf("second Unmap: %v, want ErrInvalid", err)
	}
	mustDeregister(t, tb, part) // its buffer is on the heap now: no pin to drop
}

func TestMapAnonymousFastRegPins(t *testing.T) {
	b, err := MapAnonymous(4096)
	if err != nil {
		t.Fatal(err)
	}
	tb := NewTable(2)
	fr, _ := tb.AllocFastReg(1, MaxFastRegPages)
	if err := fastReg(t, tb, fr, fr.LKey(), 1, b, 0, LocalWrite); err != nil {
		t.Fatal(err)
	}
	if err := Unmap(b); !errors.Is(err, ErrInUse) {
		t.Fatalf("Unmap under a fast registration: %v, want ErrInUse", err)
	}
	mustDeregister(t, tb, fr)
	if err := Unmap(b); err != nil {
		t.Fatal(err)
	}
}

func TestMapAnonymousErrors(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := MapAnonymous(n); !errors.Is(err, ErrBadLength) {
			t.Errorf("MapAnonymous(%d): %v, want ErrBadLength", n, err)
		}
	}
	if _, err := MapAnonymous(1 << 62); !errors.Is(err, ErrNoMemory) {
		t.Errorf("MapAnonymous(2^62): %v, want ErrNoMemory", err)
	}
	for name, b := range map[string][]byte{"heap": make([]byte, 4096), "nil": nil} {
		if err := Unmap(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("Unmap(%s): %v, want ErrInvalid", name, err)
		}
	}
	b, err := MapAnonymous(8192)
	if err != nil {
		t.Fatal(err)
	}
	if err := Unmap(b[4096:]); !errors.Is(err, ErrInvalid) {
		t.Errorf("Unmap of a sub-slice: %v, want ErrInvalid", err)
	}
	if err := Unmap(b); err != nil {
		t.Fatal(err)
	}
}

func TestMapAnonymousPinned(t *testing.T) {
	b, err := MapAnonymousPinned(4096)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOMEM) {
		if testutil.InCI() {
			t.Fatalf("mlock refused under CI: %v", err)
		}
		t.Skipf("RLIMIT_MEMLOCK too small without CAP_IPC_LOCK: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b[100] = 1
	if err := Unmap(b); err != nil {
		t.Fatal(err)
	}
}
