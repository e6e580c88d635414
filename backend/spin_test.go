package backend

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/deepgo-ml/deepgo/tensor"
)

// DEEPGO_POOL_SPIN sets the pool's spin: any duration from 0 to 1s gives
// a backend whose kernels compute what the default pool computes; anything
// else is refused with the variable, the value and what is allowed.
func TestSpinEnv(t *testing.T) {
	const n = 1 << 18 // past the size kernels run inline at
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%1000) * 0.5
	}
	sum := func(t *testing.T, be *CPU) []float32 {
		x := fill(t, tensor.Float32, vals)
		out := mustEmpty(t, tensor.Float32, n)
		require.NoError(t, be.Add(out, x, x, n))
		got, err := out.Float32s()
		require.NoError(t, err)
		return append([]float32(nil), got...)
	}
	want := sum(t, newCPU(t, 2))
	for _, v := range []string{"", "0", "200us", "1s"} {
		t.Run("ok/"+v, func(t *testing.T) {
			t.Setenv(SpinEnv, v)
			require.Equal(t, want, sum(t, newCPU(t, 2)))
		})
	}
	for _, v := range []string{"-1us", "2s", "fast", "100"} {
		t.Run("bad/"+v, func(t *testing.T) {
			t.Setenv(SpinEnv, v)
			_, err := NewCPU(2)
			require.ErrorContains(t, err, SpinEnv+`="`+v+`"`)
			require.ErrorContains(t, err, "from 0 to 1s")
		})
	}
}
