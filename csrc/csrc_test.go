package csrc

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The binding maps C statuses to *Error values usable with errors.Is.
func TestStatusErrors(t *testing.T) {
	_, err := Alloc(64, 48)
	assert.ErrorIs(t, err, Misaligned, "Alloc with align 48")
	p, err := Alloc(0, 64)
	require.NoError(t, err, "Alloc(0)")
	require.NotNil(t, p, "Alloc(0): want a unique valid pointer")
	Free(p)
	x, err := NewCtx(2)
	require.NoError(t, err)
	defer x.Close()
	assert.Equal(t, 2, x.Threads(), "Threads")
	assert.NoError(t, x.SetISA(ISAScalar), "SetISA(scalar)")
	assert.Equal(t, ISAScalar, x.ISA(), "isa after SetISA(scalar)")
	// a list pointer that is nil with a nonzero count is refused by C, not dereferenced
	err = x.Scale(F32, []unsafe.Pointer{nil}, []int64{4}, 2)
	var ce *Error
	if assert.ErrorAs(t, err, &ce, "Scale(nil ptr): want dg_scale: invalid") {
		assert.Equal(t, "dg_scale", ce.Op, "Scale(nil ptr) = %v", err)
		assert.Equal(t, Invalid, ce.Code, "Scale(nil ptr) = %v", err)
	}
	err = x.Cast(F32, F16, nil, []unsafe.Pointer{nil}, nil)
	assert.ErrorIs(t, err, BadSize, "Cast with mismatched lists")
	assert.NotEmpty(t, Internal.String(), "dg_strerror returned nothing")
}

// AxpyMixed adds a float32 list into a bfloat16 one, rounding once.
func TestAxpyMixed(t *testing.T) {
	x, err := NewCtx(1)
	require.NoError(t, err)
	defer x.Close()
	xp, _ := Alloc(8, 64)
	yp, _ := Alloc(4, 64)
	defer Free(xp)
	defer Free(yp)
	xs := unsafe.Slice((*float32)(xp), 2)
	ys := unsafe.Slice((*uint16)(yp), 2)
	copy(xs, []float32{0.5, 1e-3})
	copy(ys, []uint16{0x3f80, 0x4000}) // bfloat16 1, 2
	require.NoError(t, x.AxpyMixed(F32, BF16, 1, []unsafe.Pointer{xp}, []unsafe.Pointer{yp}, []int64{2}))
	// 1 + 0.5 = 1.5; 2 + 0.001 rounds back to 2 (bfloat16's step there is 2^-6)
	assert.Equal(t, []uint16{0x3fc0, 0x4000}, ys, "y")
	err = x.AxpyMixed(F32, I32, 1, []unsafe.Pointer{xp}, []unsafe.Pointer{yp}, []int64{2})
	assert.ErrorIs(t, err, BadDType, "AxpyMixed into int32")
	_, err = x.ScratchPeak(true)
	require.NoError(t, err)
}

// TestPoolBalance: a two-thread context counts each region that reached its
// pool, with idle time bounded by the parts' time; reset zeroes the counts.
func TestPoolBalance(t *testing.T) {
	x, err := NewCtx(2)
	require.NoError(t, err)
	defer x.Close()
	const n = 1 << 20
	p, err := Alloc(4*n, 64)
	require.NoError(t, err)
	defer Free(p)
	for i := 0; i < 3; i++ {
		require.NoError(t, x.Scale(F32, []unsafe.Pointer{p}, []int64{n}, 0.5))
	}
	b, err := x.PoolBalance(true)
	require.NoError(t, err)
	assert.Equal(t, int64(3), b.Regions)
	assert.Positive(t, b.Busy)
	assert.LessOrEqual(t, b.Idle, b.Busy)
	assert.True(t, b.IdleShare() >= 0 && b.IdleShare() <= 0.5, "idle share %v", b.IdleShare())
	b, err = x.PoolBalance(false)
	require.NoError(t, err)
	assert.Equal(t, PoolBalance{}, b)
	assert.Zero(t, b.IdleShare())
}
