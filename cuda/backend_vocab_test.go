//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// vocabLogits are n rows of v logits, N(0, 10) but for row 0 (edge32's
// specials, NaNs and infinities among them), row 1 (every third -Inf),
// row 2 (only ±0) and row 3 (near 87, no spread).
func vocabLogits(t *testing.T, r *rand.Rand, n, v int) *tensor.Tensor {
	t.Helper()
	h, err := tensor.Empty(tensor.Float32, n*v)
	require.NoError(t, err)
	t.Cleanup(func() { h.Free() })
	x, _ := h.Float32s()
	for i := range x {
		row, j := i/v, i%v
		x[i] = float32(r.NormFloat64() * 10)
		switch {
		case row == 0 && j < len(edge32):
			x[i] = math.Float32frombits(edge32[j])
		case row == 1 && j%3 == 0:
			x[i] = float32(math.Inf(-1))
		case row == 2:
			x[i] = float32(math.Copysign(0, float64(j%2)-0.5))
		case row == 3:
			x[i] = x[i]*1e-4 + 87
		}
	}
	return h
}

// The VocabParallel kernels give the CPU backend's bits on the GPU (no log
// enters them; a NaN row's NaNs may differ), over the middle slice [v, 2v)
// of a vocabulary of 3v, rows short and past a warp's 32, one row of a
// GPT-2 vocabulary's size; and a target outside the vocabulary is the
// CPU's *ArgError with nothing written.
func TestBackendVocabParallel(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(21, 22))
	for _, sz := range [][2]int{{37, 1000}, {5, 7}, {4, 25129}} {
		n, v := sz[0], sz[1]
		t.Run(fmt.Sprintf("n%d-v%d", n, v), func(t *testing.T) {
			hx := vocabLogits(t, r, n, v)
			ht, err := tensor.Empty(tensor.Int32, n)
			require.NoError(t, err)
			t.Cleanup(func() { ht.Free() })
			tv, _ := ht.Int32s()
			for i := range tv {
				tv[i] = int32(r.IntN(3 * v))
			}
			tv[0] = int32(v + 1) // held here, on a special value
			hrow := make([]*tensor.Tensor, 3)
			for i := range hrow {
				h, err := tensor.Empty(tensor.Float32, n)
				require.NoError(t, err)
				t.Cleanup(func() { h.Free() })
				hrow[i] = h
			}
			dx, dt := toDevice(t, hx), toDevice(t, ht)
			drow := []*tensor.Tensor{toDevice(t, hrow[0]), toDevice(t, hrow[1]), toDevice(t, hrow[2])}
			for _, k := range []struct {
				be      backend.NN
				x, tg   *tensor.Tensor
				m, s, l *tensor.Tensor
			}{{cpu, hx, ht, hrow[0], hrow[1], hrow[2]}, {gpu, dx, dt, drow[0], drow[1], drow[2]}} {
				require.NoError(t, k.be.VocabXentMax(k.m, k.x, n, v))
				require.NoError(t, k.be.VocabXentExp(k.x, k.s, k.l, k.m, k.tg, n, v, v, 3*v))
			}
			same(t, "maxes", hrow[0], drow[0], true)
			same(t, "weights", hx, dx, true)
			same(t, "sums", hrow[1], drow[1], true)
			same(t, "target logits", hrow[2], drow[2], true)
			require.NoError(t, cpu.VocabXentGrad(hx, hrow[1], ht, 0.37, n, v, v))
			require.NoError(t, gpu.VocabXentGrad(dx, drow[1], dt, 0.37, n, v, v))
			same(t, "gradient", hx, dx, true)
			require.NoError(t, cpu.VocabClearRows(hx, ht, n, v, v, v))
			require.NoError(t, gpu.VocabClearRows(dx, dt, n, v, v, v))
			same(t, "cleared rows", hx, dx, true)

			tv[n-1] = int32(3 * v)
			bad := toDevice(t, ht)
			err = gpu.VocabXentExp(dx, drow[1], drow[2], drow[0], bad, n, v, v, 3*v)
			var ae *backend.ArgError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, "targets", ae.Arg)
			require.Equal(t, cpu.VocabXentExp(hx, hrow[1], hrow[2], hrow[0], ht, n, v, v, 3*v).Error(), err.Error())
			same(t, "logits after a refused call", hx, dx, true)
		})
	}
}
