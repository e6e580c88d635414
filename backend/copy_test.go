package backend

import (
	"context"
	"math"
	"testing"

	"github.com/deepgo-ml/deepgo/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Copy moves any dtype between host tensors (views included) and Zero
// clears bytes, NaN and Inf included, where Scale by 0 would not.
func TestCopyZero(t *testing.T) {
	b := newCPU(t, 1)
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int64} {
		src, dst := mustEmpty(t, dt, 40), mustEmpty(t, dt, 40)
		s, _ := src.RawBytes()
		for i := range s {
			s[i] = byte(i*7 + 1)
		}
		sv, _ := src.Slice(5, 20)
		dv, _ := dst.Slice(10, 20)
		require.NoError(t, b.Copy(dv, sv))
		d, _ := dst.RawBytes()
		sz := dt.Size()
		assert.Equal(t, s[5*sz:25*sz], d[10*sz:30*sz], "%v", dt)
		assert.Equal(t, make([]byte, 10*sz), d[:10*sz], "%v: outside the view untouched", dt)
		require.NoError(t, b.Zero([]*tensor.Tensor{sv, src}))
		assert.Equal(t, make([]byte, len(s)), s, "%v", dt)
	}
	nan := fill(t, tensor.Float32, []float32{float32(math.Inf(1)), float32(math.NaN())})
	require.NoError(t, b.Zero([]*tensor.Tensor{nan}))
	assert.Equal(t, []float32{0, 0}, read(t, nan))
}

// Copy's and Zero's bad arguments name dst, src or xs[i].
func TestCopyZeroBadArguments(t *testing.T) {
	b := newCPU(t, 1)
	f32, f16, small := mustEmpty(t, tensor.Float32, 8), mustEmpty(t, tensor.Float16, 8), mustEmpty(t, tensor.Float32, 4)
	m, _ := mustEmpty(t, tensor.Float32, 16).Reshape(4, 4)
	col, _ := m.Narrow(1, 0, 2)
	freed := mustEmpty(t, tensor.Float32, 8)
	require.NoError(t, freed.Free())
	dev := tensor.WrapStorage(f32.Ptr(), f32.Bytes(), tensor.Sim(1), nil)
	onDev, err := tensor.FromStorage(dev, tensor.Float32, 0, 8)
	require.NoError(t, err)
	cases := []struct {
		name, arg, msg string
		err            error
	}{
		{"nil dst", "dst", "is nil", b.Copy(nil, f32)},
		{"nil src", "src", "is nil", b.Copy(f32, nil)},
		{"dtype", "dst", "dtype float32, src has float16: Copy does not convert (Cast does)", b.Copy(f32, f16)},
		{"count", "dst", "has 4 elements, src has 8", b.Copy(small, f32)},
		{"strided src", "src", "is not contiguous", b.Copy(small, col)},
		{"freed dst", "dst", "storage already freed", b.Copy(freed, f32)},
		{"other device", "src", "float32[8]@sim:1 is on sim:1: allowed the host or cpu", b.Copy(f32, onDev)},
		{"zero nil", "xs[1]", "is nil", b.Zero([]*tensor.Tensor{f32, nil})},
		{"zero device", "xs[0]", "is on sim:1, backend is on cpu", b.Zero([]*tensor.Tensor{onDev})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { requireArgError(t, c.err, "", c.arg, c.msg) })
	}
	// CheckCopy tells a device backend which side is in host memory
	dh, sh, err := CheckCopy("Copy", onDev, f32, tensor.Sim(1))
	require.NoError(t, err)
	assert.Equal(t, [2]bool{false, true}, [2]bool{dh, sh})
}

// The CPU backend stages trivially: HostEmpty is aligned host memory and
// CopyAsync has copied when it returns; the package functions fall back
// to tensor.Empty and Copy for a backend without HostStager.
func TestHostStagerCPU(t *testing.T) {
	b := newCPU(t, 1)
	for _, tc := range []struct {
		name string
		be   Backend
	}{{"cpu", b}, {"plain backend", plain{b}}} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := HostEmpty(tc.be, tensor.Float32, 3)
			require.NoError(t, err)
			defer h.Free()
			assert.True(t, h.Device().IsCPU())
			assert.Zero(t, uintptr(h.Ptr())%tensor.HostAlign)
			src := fill(t, tensor.Float32, []float32{1, 2, 3})
			c, err := CopyAsync(tc.be, h, src)
			require.NoError(t, err)
			assert.True(t, c.Done())
			require.NoError(t, c.Wait(context.Background()))
			assert.Equal(t, []float32{1, 2, 3}, read(t, h))
			_, err = CopyAsync(tc.be, h, mustEmpty(t, tensor.Float32, 2))
			var ae *ArgError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, "dst", ae.Arg)
		})
	}
}

// plain hides the CPU backend's HostStager methods.
type plain struct{ Backend }
