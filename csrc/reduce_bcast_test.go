package csrc

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// ReduceBcast must give ReduceInto's bits in every destination, including
// destinations that are the sources themselves, and fold Avg's scale.
func TestReduceBcast(t *testing.T) {
	x, err := NewCtx(2)
	require.NoError(t, err)
	defer x.Close()
	const n = 100003
	bufs := make([]unsafe.Pointer, 4)
	for i := range bufs {
		p, err := Alloc(4*n, 64)
		require.NoError(t, err)
		defer Free(p)
		bufs[i] = p
	}
	f := func(p unsafe.Pointer) []float32 { return unsafe.Slice((*float32)(p), n) }
	for i := range n {
		f(bufs[0])[i] = float32(i%97) * 0.1
		f(bufs[1])[i] = float32(i%89) * -0.3
	}
	srcs := bufs[:2]
	require.NoError(t, x.ReduceInto(F32, Sum, srcs, bufs[2], n))
	require.NoError(t, x.Scale(F32, []unsafe.Pointer{bufs[2]}, []int64{n}, 0.5))
	require.NoError(t, x.ReduceBcast(F32, Sum, srcs, []unsafe.Pointer{bufs[1], bufs[0], bufs[3]}, n, 0.5))
	want := f(bufs[2])
	for _, d := range []unsafe.Pointer{bufs[0], bufs[1], bufs[3]} {
		got := f(d)
		for i := range n {
			// compared here, not by require.Equal on 100003-element slices,
			// whose failure report would print them whole
			if got[i] != want[i] {
				require.Failf(t, "ReduceBcast differs from ReduceInto", "element %d: %v, want %v", i, got[i], want[i])
			}
		}
	}
	require.Error(t, x.ReduceBcast(I32, Sum, srcs, srcs, n, 0.5), "integer scale accepted")
}
