package csrc

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestRoofUpdate: the update roof adds g into p, m and v in place on every
// element, the vector body and the tail alike, on 1 and 2 threads.
func TestRoofUpdate(t *testing.T) {
	for _, threads := range []int{1, 2} {
		for _, n := range []int{0, 1, 15, 16, 17, 4097, 70001} {
			t.Run(fmt.Sprintf("%dt/%d", threads, n), func(t *testing.T) {
				x, err := NewCtx(threads)
				require.NoError(t, err)
				defer x.Close()
				p, g, m, v := make([]float32, n+1), make([]float32, n+1), make([]float32, n+1), make([]float32, n+1)
				g[n] = 1 // must not be added anywhere
				for i := range n {
					p[i], g[i], m[i], v[i] = float32(i), float32(i%7)-3, float32(-i), 0.5
				}
				require.NoError(t, x.RoofUpdate(unsafe.Pointer(&p[0]), unsafe.Pointer(&g[0]), unsafe.Pointer(&m[0]),
					unsafe.Pointer(&v[0]), n, 1))
				for i := range n {
					gi := float32(i%7) - 3
					require.Equal(t, float32(i)+gi, p[i], "p[%d]", i)
					require.Equal(t, float32(-i)+gi, m[i], "m[%d]", i)
					require.Equal(t, 0.5+gi, v[i], "v[%d]", i)
				}
				// the element past the end is untouched
				require.Zero(t, p[n])
				require.Zero(t, v[n])
			})
		}
	}
	x, err := NewCtx(1)
	require.NoError(t, err)
	defer x.Close()
	require.Error(t, x.RoofUpdate(nil, nil, nil, nil, 4, 1))
	// s = 0 leaves the buffers as they were
	p, g := []float32{1, 2, 3}, []float32{4, 5, 6}
	m, v := []float32{7, 8, 9}, []float32{10, 11, 12}
	require.NoError(t, x.RoofUpdate(unsafe.Pointer(&p[0]), unsafe.Pointer(&g[0]), unsafe.Pointer(&m[0]), unsafe.Pointer(&v[0]), 3, 0))
	require.Equal(t, []float32{1, 2, 3}, p)
	require.Equal(t, []float32{7, 8, 9}, m)
	require.Equal(t, []float32{10, 11, 12}, v)
}
