//go:build !cuda

package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStubSaysNoCUDA(t *testing.T) {
	require.False(t, Available(), "Available() = true without the cuda tag")
	_, err := DeviceCount()
	require.ErrorIs(t, err, ErrNoCUDA, "DeviceCount")
	_, err = NewBackend(0)
	require.ErrorIs(t, err, ErrNoCUDA, "NewBackend")
	_, err = Malloc(0, 0, 4)
	require.ErrorIs(t, err, ErrNoCUDA, "Malloc")
}

func TestErrorMessage(t *testing.T) {
	e := &Error{Op: "dg_cuda_scale", Code: 700, Msg: "cudaErrorIllegalAddress: an illegal memory access was encountered"}
	want := "cuda: dg_cuda_scale: cudaErrorIllegalAddress: an illegal memory access was encountered (cudaError 700)"
	require.EqualError(t, e, want)
}

func TestStubOptimKernels(t *testing.T) {
	_, err := NewOptimKernels(nil)
	require.ErrorIs(t, err, ErrNoCUDA, "NewOptimKernels")
	var k OptimKernels
	require.ErrorIs(t, k.Step(nil), ErrNoCUDA, "Step")
	_, err = k.UnscaleCheck(nil, 1)
	require.ErrorIs(t, err, ErrNoCUDA, "UnscaleCheck")
}

func TestStubNNKernels(t *testing.T) {
	_, err := NewNNKernels(nil)
	require.ErrorIs(t, err, ErrNoCUDA, "NewNNKernels")
	var k NNKernels
	require.ErrorIs(t, k.MatmulForward(nil, nil, nil, nil, 1, 1, 1), ErrNoCUDA, "MatmulForward")
	require.ErrorIs(t, k.AttentionBackward(nil, nil, nil, nil, 1, 1, 1, 1, 0), ErrNoCUDA, "AttentionBackward")
	require.Empty(t, CuBLASPath(), "CuBLASPath() without CUDA")
	require.Empty(t, CuBLASSoname(), "CuBLASSoname() without CUDA")

}
