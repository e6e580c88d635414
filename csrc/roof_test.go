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

// TestRoofCast: the cast roof writes each source line twice (widening) or
// the XOR of each pair of lines (narrowing), the vector body, the streamed
// body and the tail alike, on 1 and 2 threads and every ISA the CPU has,
// and refuses other ratios.
func TestRoofCast(t *testing.T) {
	for _, tc := range []struct {
		threads int
		isa     ISA
	}{{1, ISAScalar}, {2, ISAScalar}, {1, ISAAVX2}, {2, ISAAVX2}, {1, ISAAVX512}, {2, ISAAVX512}} {
		if tc.isa > BestISA() {
			continue
		}
		threads := tc.threads
		x, err := NewCtx(threads)
		require.NoError(t, err)
		require.NoError(t, x.SetISA(tc.isa))
		// 40 MiB of source streams its 20 and 80 MiB of output
		for _, n := range []int{0, 2, 64, 130, 4096, 70002, 40 << 20} {
			src := make([]byte, n+2)
			for i := range src {
				src[i] = byte(i*7 + i>>8)
			}
			wide := make([]byte, 2*n+1)
			require.NoError(t, x.RoofCast(unsafe.Pointer(unsafe.SliceData(wide)), 2*n, unsafe.Pointer(unsafe.SliceData(src)), n), "widen %d", n)
			narrow := make([]byte, n/2+1)
			require.NoError(t, x.RoofCast(unsafe.Pointer(unsafe.SliceData(narrow)), n/2, unsafe.Pointer(unsafe.SliceData(src)), n), "narrow %d", n)
			// widening: line l of src lands at lines 2l and 2l+1 (a short
			// tail is written twice in a row); narrowing: pairs XOR
			for i := 0; i < n; i++ {
				l, o := i/64, i%64
				if (l+1)*64 <= n {
					if wide[2*l*64+o] != src[i] || wide[(2*l+1)*64+o] != src[i] {
						t.Fatalf("%v %dt widen %d: byte %d not written twice", tc.isa, threads, n, i)
					}
				} else {
					tail, r := n-l*64, i-l*64
					if wide[2*l*64+r] != src[i] || wide[2*l*64+tail+r] != src[i] {
						t.Fatalf("%v %dt widen %d: tail byte %d not written twice", tc.isa, threads, n, i)
					}
				}
			}
			for i := 0; i < n/2; i++ {
				var want byte
				if pr := i / 64; (pr+1)*128 <= n { // line pairs: (0,1) -> out line 0, (2,3) -> 1
					want = src[pr*128+i%64] ^ src[pr*128+64+i%64]
				} else { // the tail: byte pairs
					want = src[2*i] ^ src[2*i+1]
				}
				if narrow[i] != want {
					t.Fatalf("%v %dt narrow %d: byte %d = %d, want %d", tc.isa, threads, n, i, narrow[i], want)
				}
			}
			require.Zero(t, wide[2*n], "widen %d wrote past the end", n)
			require.Zero(t, narrow[n/2], "narrow %d wrote past the end", n)
		}
		b := make([]byte, 64)
		p := unsafe.Pointer(&b[0])
		require.Error(t, x.RoofCast(p, 3, p, 7))
		require.Error(t, x.RoofCast(p, 10, p, 4))
		require.Error(t, x.RoofCast(nil, 8, nil, 4))
		x.Close()
	}
}
