//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// The GPU quantizer gives the CPU's int8 values, scales and dequantized
// bits (dg_quant_math.h on both) for every float dtype, finite data and
// data with Inf and NaN (a NaN the arithmetic makes matches any NaN), one
// group and many, groups larger than a block.
func TestQuantizeInt8(t *testing.T) {
	cpu, gpu := setup(t)
	r := rand.New(rand.NewPCG(3, 9))
	for _, dt := range floats {
		for _, c := range []struct {
			n, groups int
			finite    bool
		}{{8, 1, true}, {4096, 8, true}, {24000, 3, true}, {1 << 20, 128, true}, {4096, 8, false}} {
			name := fmt.Sprintf("%v/n%d/g%d/finite%v", dt, c.n, c.groups, c.finite)
			hx := hostRand(t, r, dt, c.n, c.finite)
			t.Cleanup(func() { hx.Free() })
			dx := toDevice(t, hx)
			hq, err := tensor.Empty(tensor.Uint8, c.n)
			require.NoError(t, err)
			hs, err := tensor.Empty(tensor.Float32, c.groups)
			require.NoError(t, err)
			hy, err := tensor.Empty(dt, c.n)
			require.NoError(t, err)
			t.Cleanup(func() { hq.Free(); hs.Free(); hy.Free() })
			dq, ds, dy := toDevice(t, hq), toDevice(t, hs), toDevice(t, hy)
			require.NoError(t, cpu.QuantizeInt8(hq, hs, hx), name)
			require.NoError(t, gpu.QuantizeInt8(dq, ds, dx), name)
			require.NoError(t, cpu.DequantizeInt8(hy, hq, hs), name)
			require.NoError(t, gpu.DequantizeInt8(dy, dq, ds), name)
			same(t, name+" q", hq, dq, false)
			same(t, name+" scales", hs, ds, false)
			same(t, name+" y", hy, dy, true)
		}
	}
}
