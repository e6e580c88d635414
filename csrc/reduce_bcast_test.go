package csrc

import (
	"testing"
	"unsafe"
)

// ReduceBcast must give ReduceInto's bits in every destination, including
// destinations that are the sources themselves, and fold Avg's scale.
func TestReduceBcast(t *testing.T) {
	x, err := NewCtx(2)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	const n = 100003
	bufs := make([]unsafe.Pointer, 4)
	for i := range bufs {
		p, err := Alloc(4*n, 64)
		if err != nil {
			t.Fatal(err)
		}
		defer Free(p)
		bufs[i] = p
	}
	f := func(p unsafe.Pointer) []float32 { return unsafe.Slice((*float32)(p), n) }
	for i := range n {
		f(bufs[0])[i] = float32(i%97) * 0.1
		f(bufs[1])[i] = float32(i%89) * -0.3
	}
	srcs := bufs[:2]
	if err := x.ReduceInto(F32, Sum, srcs, bufs[2], n); err != nil {
		t.Fatal(err)
	}
	if err := x.Scale(F32, []unsafe.Pointer{bufs[2]}, []int64{n}, 0.5); err != nil {
		t.Fatal(err)
	}
	if err := x.ReduceBcast(F32, Sum, srcs, []unsafe.Pointer{bufs[1], bufs[0], bufs[3]}, n, 0.5); err != nil {
		t.Fatal(err)
	}
	want := f(bufs[2])
	for _, d := range []unsafe.Pointer{bufs[0], bufs[1], bufs[3]} {
		got := f(d)
		for i := range n {
			if got[i] != want[i] {
				t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
			}
		}
	}
	if err := x.ReduceBcast(I32, Sum, srcs, srcs, n, 0.5); err == nil {
		t.Fatal("integer scale accepted")
	}
}
