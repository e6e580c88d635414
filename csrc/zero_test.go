package csrc

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestZero: dg_zero clears every byte of every buffer in the list, across
// the split between threads, and nothing past them.
func TestZero(t *testing.T) {
	for _, threads := range []int{1, 2} {
		x, err := NewCtx(threads)
		require.NoError(t, err)
		sizes := []int{0, 1, 4095, 4097, 1 << 20, 3}
		bufs := make([][]byte, len(sizes))
		ps, ns := make([]unsafe.Pointer, len(sizes)), make([]int64, len(sizes))
		for i, n := range sizes {
			bufs[i] = make([]byte, n+1)
			for k := range bufs[i] {
				bufs[i][k] = 0xa5
			}
			ps[i], ns[i] = unsafe.Pointer(&bufs[i][0]), int64(n)
		}
		require.NoError(t, x.Zero(ps, ns))
		for i, n := range sizes {
			for k := 0; k < n; k++ {
				if bufs[i][k] != 0 {
					t.Fatalf("%d threads: buffer %d byte %d = %#x", threads, i, k, bufs[i][k])
				}
			}
			require.Equal(t, byte(0xa5), bufs[i][n], "%d threads: byte past buffer %d", threads, i)
		}
		require.Error(t, x.Zero([]unsafe.Pointer{nil}, []int64{4}))
		x.Close()
	}
}
