//go:build !cuda

package cuda

import (
	"errors"
	"testing"
)

func TestStubSaysNoCUDA(t *testing.T) {
	if Available() {
		t.Fatal("Available() = true without the cuda tag")
	}
	if _, err := DeviceCount(); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("DeviceCount: %v, want ErrNoCUDA", err)
	}
	if _, err := NewBackend(0); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("NewBackend: %v, want ErrNoCUDA", err)
	}
	if _, err := Malloc(0, 0, 4); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("Malloc: %v, want ErrNoCUDA", err)
	}
}

func TestErrorMessage(t *testing.T) {
	e := &Error{Op: "dg_cuda_scale", Code: 700, Msg: "cudaErrorIllegalAddress: an illegal memory access was encountered"}
	want := "cuda: dg_cuda_scale: cudaErrorIllegalAddress: an illegal memory access was encountered (cudaError 700)"
	if e.Error() != want {
		t.Fatalf("Error() = %q, want %q", e.Error(), want)
	}
}

func TestStubOptimKernels(t *testing.T) {
	if _, err := NewOptimKernels(nil); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("NewOptimKernels: %v, want ErrNoCUDA", err)
	}
	var k OptimKernels
	if err := k.Step(nil); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("Step: %v, want ErrNoCUDA", err)
	}
	if _, err := k.UnscaleCheck(nil, 1); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("UnscaleCheck: %v, want ErrNoCUDA", err)
	}
}

func TestStubNNKernels(t *testing.T) {
	if _, err := NewNNKernels(nil); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("NewNNKernels: %v, want ErrNoCUDA", err)
	}
	var k NNKernels
	if err := k.MatmulForward(nil, nil, nil, nil, 1, 1, 1); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("MatmulForward: %v, want ErrNoCUDA", err)
	}
	if err := k.AttentionBackward(nil, nil, nil, nil, 1, 1, 1, 1, 0); !errors.Is(err, ErrNoCUDA) {
		t.Fatalf("AttentionBackward: %v, want ErrNoCUDA", err)
	}
	if CuBLASPath() != "" || CuBLASSoname() != "" {
		t.Fatal("CuBLASPath() or CuBLASSoname() non-empty without CUDA")
	}
}
