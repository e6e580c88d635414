package csrc

import (
	"errors"
	"testing"
	"unsafe"
)

// The binding maps C statuses to *Error values usable with errors.Is.
func TestStatusErrors(t *testing.T) {
	if _, err := Alloc(64, 48); !errors.Is(err, Misaligned) {
		t.Errorf("Alloc with align 48 = %v, want Misaligned", err)
	}
	p, err := Alloc(0, 64)
	if err != nil || p == nil {
		t.Fatalf("Alloc(0) = %v, %v; want a unique valid pointer", p, err)
	}
	Free(p)
	x, err := NewCtx(2)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.Threads() != 2 {
		t.Errorf("Threads = %d", x.Threads())
	}
	if err := x.SetISA(ISAScalar); err != nil || x.ISA() != ISAScalar {
		t.Errorf("SetISA(scalar) = %v, isa %v", err, x.ISA())
	}
	// a list pointer that is nil with a nonzero count is refused by C, not dereferenced
	err = x.Scale(F32, []unsafe.Pointer{nil}, []int64{4}, 2)
	var ce *Error
	if !errors.As(err, &ce) || ce.Op != "dg_scale" || ce.Code != Invalid {
		t.Errorf("Scale(nil ptr) = %v, want dg_scale: invalid", err)
	}
	if err := x.Cast(F32, F16, nil, []unsafe.Pointer{nil}, nil); !errors.Is(err, BadSize) {
		t.Errorf("Cast with mismatched lists = %v, want BadSize", err)
	}
	if s := Internal.String(); s == "" {
		t.Error("dg_strerror returned nothing")
	}
}
