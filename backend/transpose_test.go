package backend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// TransposeBlocks moves block (i, j) of src[a, b, w] to (j, i) of dst,
// every bit (NaNs included), for shapes with a unit and an empty size.
func TestTransposeBlocks(t *testing.T) {
	be := newCPU(t, 2)
	r := rand.New(rand.NewPCG(4, 5))
	for _, sz := range [][3]int{{3, 5, 7}, {1, 4, 2}, {6, 1, 3}, {2, 3, 0}, {40, 33, 17}} {
		a, b, w := sz[0], sz[1], sz[2]
		vals := randVals(r, a*b*w)
		if len(vals) > 0 {
			vals[0] = math.Float32frombits(0x7fc01234)
		}
		src, dst := fill(t, tensor.Float32, vals), mustEmpty(t, tensor.Float32, a*b*w)
		require.NoError(t, be.TransposeBlocks(dst, src, a, b, w))
		got := read(t, dst)
		for i := range a {
			for j := range b {
				for k := range w {
					require.Equal(t, math.Float32bits(vals[(i*b+j)*w+k]), math.Float32bits(got[(j*a+i)*w+k]), "%v: block (%d, %d) element %d", sz, i, j, k)
				}
			}
		}
	}
}
