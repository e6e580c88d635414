package sim_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Go code cannot read or write device memory; Copy is the way in and out.
func TestHostAccessRefused(t *testing.T) {
	b := newSim(t, 3, -1)
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float16, tensor.Int32, tensor.Int64, tensor.Float64} {
		x, err := b.Empty(dt, 4)
		require.NoError(t, err)
		assert.Equal(t, tensor.Sim(3), x.Device())
		_, err = x.RawBytes()
		assert.ErrorContains(t, err, "not in host memory")
		var accessErr error
		switch dt {
		case tensor.Float32:
			_, accessErr = x.Float32s()
		case tensor.Float16:
			_, accessErr = x.Uint16s()
		case tensor.Int32:
			_, accessErr = x.Int32s()
		case tensor.Int64:
			_, accessErr = x.Int64s()
		case tensor.Float64:
			_, accessErr = x.Float64s()
		}
		assert.ErrorContains(t, accessErr, "is not in host memory", "%v", dt)
		require.NoError(t, x.Free())
	}
	h, err := tensor.FromFloat32([]float32{1, -2, 3.5, 1e30})
	require.NoError(t, err)
	defer h.Free()
	x, err := b.Empty(tensor.Float32, 4)
	require.NoError(t, err)
	defer x.Free()
	require.NoError(t, b.Copy(x, h))
	assert.Equal(t, []float32{1, -2, 3.5, 1e30}, floats(t, b, x))
	// the kernels refuse host tensors, and Copy tensors of another device
	assert.ErrorContains(t, b.Scale([]*tensor.Tensor{h}, 2), "backend.Scale: xs[0]: float32[4]@cpu is on cpu, backend is on sim:3")
	other := newSim(t, 4, -1)
	y, err := other.Empty(tensor.Float32, 4)
	require.NoError(t, err)
	defer y.Free()
	assert.ErrorContains(t, b.Copy(y, x), "backend.Copy: dst: float32[4]@sim:4 is on sim:4: allowed the host or sim:3")
	_, err = b.Empty(tensor.Float32, -1)
	assert.ErrorContains(t, err, "shape[0] = -1")
}

// A bad argument is refused by the call itself, with the CPU backend's
// *backend.ArgError (the device's name in place of cpu), and nothing runs.
func TestArgErrorsMatchCPU(t *testing.T) {
	cpu := newCPU(t)
	sb := newSim(t, 0, time.Millisecond)
	type mk func(dt tensor.DType, n ...int) *tensor.Tensor
	cases := []struct {
		name string
		call func(k kern, m mk) error
	}{
		{"Scale int", func(k kern, m mk) error { return k.Scale([]*tensor.Tensor{m(tensor.Int32, 3)}, 2) }},
		{"Scale nil", func(k kern, m mk) error { return k.Scale([]*tensor.Tensor{m(tensor.Float32, 3), nil}, 2) }},
		{"Cast lens", func(k kern, m mk) error {
			return k.Cast([]*tensor.Tensor{m(tensor.Float16, 3)}, []*tensor.Tensor{m(tensor.Float32, 3), m(tensor.Float32, 2)})
		}},
		{"Axpy counts", func(k kern, m mk) error {
			return k.Axpy(1, []*tensor.Tensor{m(tensor.Float32, 3)}, []*tensor.Tensor{m(tensor.Float32, 4)})
		}},
		{"SumSquares per", func(k kern, m mk) error {
			_, err := k.SumSquares([]*tensor.Tensor{m(tensor.Float32, 3)}, make([]float64, 2))
			return err
		}},
		{"NonFinite mixed", func(k kern, m mk) error {
			_, err := k.NonFinite([]*tensor.Tensor{m(tensor.Float32, 3), m(tensor.BFloat16, 3)})
			return err
		}},
		{"Pack offs", func(k kern, m mk) error {
			return k.Pack(m(tensor.Float32, 10), []int{8}, []*tensor.Tensor{m(tensor.Float32, 3)})
		}},
		{"Unpack dtype", func(k kern, m mk) error {
			return k.Unpack([]*tensor.Tensor{m(tensor.Float16, 3)}, m(tensor.Float32, 10), []int{0})
		}},
		{"Reduce empty", func(k kern, m mk) error { return k.Reduce(backend.Sum, m(tensor.Float32, 3), nil) }},
		{"Reduce op", func(k kern, m mk) error {
			return k.Reduce(backend.ReduceOp(9), m(tensor.Float32, 3), []*tensor.Tensor{m(tensor.Float32, 3)})
		}},
		{"Copy dtype", func(k kern, m mk) error { return k.Copy(m(tensor.Float32, 3), m(tensor.Float16, 3)) }},
		{"Copy count", func(k kern, m mk) error { return k.Copy(m(tensor.Float32, 3), m(tensor.Float32, 4)) }},
		{"Zero nil", func(k kern, m mk) error { return k.Zero([]*tensor.Tensor{m(tensor.Float32, 3), nil}) }},
		{"Linear w", func(k kern, m mk) error {
			return k.LinearForward(m(tensor.Float32, 4), m(tensor.Float32, 2, 2), m(tensor.Float32, 4), nil)
		}},
		{"Linear dout", func(k kern, m mk) error {
			return k.LinearBackward(nil, nil, nil, m(tensor.Float32, 5), m(tensor.Float32, 2, 2), m(tensor.Float32, 2, 2))
		}},
		{"LayerNorm eps", func(k kern, m mk) error {
			return k.LayerNormForward(m(tensor.Float32, 4), m(tensor.Float32, 2), m(tensor.Float32, 2), m(tensor.Float32, 4), m(tensor.Float32, 2), m(tensor.Float32, 2), -1, 2, 2)
		}},
		{"GELU n", func(k kern, m mk) error { return k.GELUForward(m(tensor.Float32, 4), m(tensor.Float32, 4), 5) }},
		{"Add dtype", func(k kern, m mk) error {
			return k.Add(m(tensor.Float32, 4), m(tensor.Float16, 4), m(tensor.Float32, 4), 4)
		}},
		{"Encoder tok dtype", func(k kern, m mk) error {
			return k.EncoderForward(m(tensor.Float32, 8), m(tensor.Float32, 2), m(tensor.Float32, 12), m(tensor.Float32, 8), 1, 2, 4, 3)
		}},
		{"Attention att", func(k kern, m mk) error {
			return k.AttentionForward(m(tensor.Float32, 8), m(tensor.Float32, 3), m(tensor.Float32, 24), 1, 2, 2, 2, 0)
		}},
		{"Xent targets", func(k kern, m mk) error {
			return k.SoftmaxXentForward(m(tensor.Float32, 6), m(tensor.Float32, 2), m(tensor.Float32, 6), m(tensor.Float32, 2), 2, 3)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var errs [2]*backend.ArgError
			for i, k := range []kern{cpu, sb} {
				m := func(dt tensor.DType, n ...int) *tensor.Tensor {
					var x *tensor.Tensor
					var err error
					if i == 0 {
						x, err = tensor.Empty(dt, n...)
					} else {
						x, err = k.Empty(dt, n...)
					}
					require.NoError(t, err)
					t.Cleanup(func() { x.Free() })
					return x
				}
				err := c.call(k, m)
				require.ErrorAs(t, err, &errs[i])
			}
			assert.Equal(t, errs[0].Op, errs[1].Op)
			assert.Equal(t, errs[0].Arg, errs[1].Arg)
			assert.Equal(t, errs[0].Msg, strings.ReplaceAll(errs[1].Msg, "sim:0", "cpu"))
			require.NoError(t, sb.Synchronize(ctx(t)), "a refused call must queue nothing that fails")
		})
	}
}

// A kernel that fails after its call returned (a token id out of range
// found on the device) makes the device's error sticky: Synchronize, copies
// to the host and value-returning calls report it, naming the kernel, with
// the CPU's *ArgError inside.
func TestStickyKernelError(t *testing.T) {
	cpu := newCPU(t)
	sb := newSim(t, 0, time.Millisecond)
	run := func(k kern, m func(dt tensor.DType, n int) *tensor.Tensor) error {
		tok := m(tensor.Int32, 2)
		h, _ := tensor.WrapInt32([]int32{1, 7})
		defer h.Free()
		require.NoError(t, k.Copy(tok, h))
		return k.EncoderForward(m(tensor.Float32, 8), tok, m(tensor.Float32, 12), m(tensor.Float32, 8), 1, 2, 4, 3)
	}
	wantErr := run(cpu, func(dt tensor.DType, n int) *tensor.Tensor {
		x, err := tensor.Empty(dt, n)
		require.NoError(t, err)
		t.Cleanup(func() { x.Free() })
		return x
	})
	var want *backend.ArgError
	require.ErrorAs(t, wantErr, &want)
	mk := func(dt tensor.DType, n int) *tensor.Tensor {
		x, err := sb.Empty(dt, n)
		require.NoError(t, err)
		t.Cleanup(func() { x.Free() })
		return x
	}
	require.NoError(t, run(sb, mk), "the id is only seen when the kernel runs")
	err := sb.Synchronize(ctx(t))
	require.ErrorContains(t, err, "sim:0: kernel EncoderForward failed")
	var got *backend.ArgError
	require.ErrorAs(t, err, &got)
	assert.Equal(t, *want, *got)
	x := mk(tensor.Float32, 3)
	_, err = sb.SumSquares([]*tensor.Tensor{x}, nil)
	assert.ErrorIs(t, err, got)
	assert.ErrorIs(t, sb.Scale([]*tensor.Tensor{x}, 2), got, "later kernels are refused too")
	h, _ := tensor.Empty(tensor.Float32, 3)
	defer h.Free()
	assert.ErrorIs(t, sb.Copy(h, x), got)
}

// Freeing a tensor while kernels that use it are still queued is safe: the
// memory goes after them (run with -race and -asan).
func TestFreeWithQueuedKernels(t *testing.T) {
	b := newSim(t, 0, 200*time.Microsecond)
	s2, err := b.NewStream()
	require.NoError(t, err)
	b2, err := b.On(s2)
	require.NoError(t, err)
	keep, err := b.Empty(tensor.Float32, 1<<12)
	require.NoError(t, err)
	defer keep.Free()
	for range 20 {
		x, err := b.Empty(tensor.Float32, 1<<12)
		require.NoError(t, err)
		y, err := b.Empty(tensor.Float32, 1<<12)
		require.NoError(t, err)
		xs := []*tensor.Tensor{x}
		for range 5 {
			require.NoError(t, b.Scale(xs, 1.5))
			require.NoError(t, b2.Axpy(1, xs, []*tensor.Tensor{keep}))
		}
		require.NoError(t, b.Copy(y, x))
		require.NoError(t, x.Free())
		require.NoError(t, y.Free())
		assert.ErrorContains(t, b.Scale(xs, 2), "storage already freed")
	}
	require.NoError(t, s2.Close())
	require.NoError(t, b.Synchronize(ctx(t)))
	assert.Error(t, b2.Scale([]*tensor.Tensor{keep}, 1), "a closed stream takes no work")
	assert.True(t, errors.Is(b2.Close(), nil), "a backend made by On closes nothing")
}
