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

// AxpyMixed adds a float32 list into a bfloat16 one, rounding once.
func TestAxpyMixed(t *testing.T) {
	x, err := NewCtx(1)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	xp, _ := Alloc(8, 64)
	yp, _ := Alloc(4, 64)
	defer Free(xp)
	defer Free(yp)
	xs := unsafe.Slice((*float32)(xp), 2)
	ys := unsafe.Slice((*uint16)(yp), 2)
	copy(xs, []float32{0.5, 1e-3})
	copy(ys, []uint16{0x3f80, 0x4000}) // bfloat16 1, 2
	if err := x.AxpyMixed(F32, BF16, 1, []unsafe.Pointer{xp}, []unsafe.Pointer{yp}, []int64{2}); err != nil {
		t.Fatal(err)
	}
	// 1 + 0.5 = 1.5; 2 + 0.001 rounds back to 2 (bfloat16's step there is 2^-6)
	if ys[0] != 0x3fc0 || ys[1] != 0x4000 {
		t.Errorf("y = %#04x, want [0x3fc0 0x4000]", ys)
	}
	if err := x.AxpyMixed(F32, I32, 1, []unsafe.Pointer{xp}, []unsafe.Pointer{yp}, []int64{2}); !errors.Is(err, BadDType) {
		t.Errorf("AxpyMixed into int32 = %v, want BadDType", err)
	}
	if _, err := x.ScratchPeak(true); err != nil {
		t.Fatal(err)
	}
}
