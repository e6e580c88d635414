package backend

import (
	"testing"
	"unsafe"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/require"
)

// requireArgError fails t unless err is an *ArgError on arg whose message
// contains msg and, where op is not "", of op.
func requireArgError(t *testing.T, err error, op, arg, msg string) {
	t.Helper()
	var ae *ArgError
	require.ErrorAs(t, err, &ae, "want an *ArgError")
	if op != "" {
		require.Equal(t, op, ae.Op, "ArgError %q: op", err)
	}
	require.Equal(t, arg, ae.Arg, "ArgError %q: argument", err)
	require.Contains(t, ae.Msg, msg, "ArgError %q: message", err)
}

// Bad input returns an *ArgError naming the argument, never a crash.
func TestBadArguments(t *testing.T) {
	b, err := NewCPU(1)
	require.NoError(t, err)
	defer b.Close()
	f32 := mustEmpty(t, tensor.Float32, 8)
	f16 := mustEmpty(t, tensor.Float16, 8)
	short := mustEmpty(t, tensor.Float32, 4)
	i32 := mustEmpty(t, tensor.Int32, 8)
	freed, _ := tensor.Empty(tensor.Float32, 8)
	freed.Free()
	m, _ := tensor.Empty(tensor.Float32, 4, 4)
	defer m.Free()
	strided, _ := m.Narrow(1, 0, 2)
	T := func(ts ...*tensor.Tensor) []*tensor.Tensor { return ts }

	cases := []struct {
		name    string
		call    func() error
		wantArg string
		wantMsg string
	}{
		{"cast nil src", func() error { return b.Cast(T(f16), T(nil)) }, "srcs[0]", "nil"},
		{"cast list lengths", func() error { return b.Cast(T(f16, f16), T(f32)) }, "dsts", "2 entries"},
		{"cast sizes", func() error { return b.Cast(T(f16), T(short)) }, "dsts[0]", "8 elements, want 4"},
		{"cast int dtype", func() error { return b.Cast(T(f16), T(i32)) }, "srcs[0]", "allowed float32"},
		{"cast mixed dtypes", func() error { return b.Cast(T(f16, f16), T(f32, f16)) }, "srcs[1]", "dtype float16, want float32"},
		{"scale freed", func() error { return b.Scale(T(freed), 2) }, "xs[0]", "freed"},
		{"scale strided", func() error { return b.Scale(T(strided), 2) }, "xs[0]", "not contiguous"},
		{"axpy lengths", func() error { return b.Axpy(1, T(f32), T(f32, f32)) }, "ys", "2 entries"},
		{"axpy ys dtypes", func() error { return b.Axpy(1, T(f32, f32), T(f16, f32)) }, "ys[1]", "dtype float32, want float16 like ys[0]"},
		{"axpy int dtype", func() error { return b.Axpy(1, T(f32), T(i32)) }, "ys[0]", "dtype int32: allowed float32"},
		{"axpy sizes", func() error { return b.Axpy(1, T(f32), T(short)) }, "ys[0]", "4 elements, want 8"},
		{"sumsq per length", func() error { _, err := b.SumSquares(T(f32), make([]float64, 2)); return err }, "per", "2 entries"},
		{"nonfinite nil", func() error { _, err := b.NonFinite(T(f32, nil)); return err }, "xs[1]", "nil"},
		{"pack out of range", func() error { return b.Pack(f32, []int{6}, T(short)) }, "offs[0]", "outside flat"},
		{"pack negative offset", func() error { return b.Pack(f32, []int{-1}, T(short)) }, "offs[0]", "outside flat"},
		{"pack nil flat", func() error { return b.Pack(nil, []int{0}, T(short)) }, "flat", "nil"},
		{"unpack offs length", func() error { return b.Unpack(T(short), f32, nil) }, "offs", "0 entries"},
		{"reduce no sources", func() error { return b.Reduce(Sum, f32, nil) }, "srcs", "empty"},
		{"reduce size", func() error { return b.Reduce(Sum, f32, T(short)) }, "srcs[0]", "4 elements"},
		{"reduce dtype", func() error { return b.Reduce(Sum, f32, T(f16)) }, "srcs[0]", "dtype float16, want float32 like dst"},
		{"pack dtype", func() error { return b.Pack(f32, []int{0}, T(f16)) }, "srcs[0]", "dtype float16, want float32 like flat"},
		{"reduce op", func() error { return b.Reduce(ReduceOp(9), f32, T(f32)) }, "op", "allowed sum"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireArgError(t, c.call(), "", c.wantArg, c.wantMsg)
		})
	}
}

// A float32 view at an odd address is refused before C sees it.
func TestMisalignedBuffer(t *testing.T) {
	b, err := NewCPU(1)
	require.NoError(t, err)
	defer b.Close()
	raw := mustEmpty(t, tensor.Uint8, 64)
	st := tensor.WrapStorage(unsafe.Add(raw.Ptr(), 1), 32, tensor.CPU, nil)
	x, err := tensor.FromStorage(st, tensor.Float32, 0, 4)
	require.NoError(t, err)
	requireArgError(t, b.Scale([]*tensor.Tensor{x}, 2), "", "xs[0]", "not aligned")
}
