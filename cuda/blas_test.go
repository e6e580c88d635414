//go:build cuda

package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The cuBLAS the matmuls load is named after the cuBLAS headers the library
// was compiled with (build-cuda.sh links them as build/cuda/include/cuda),
// not a fixed CUDA 13, and build-cuda.sh's link in build/cuda/lib has that
// name and loads. No GPU needed: loading cuBLAS does not touch the driver.
func TestCuBLASSoname(t *testing.T) {
	h, err := os.ReadFile(filepath.Join("..", "build", "cuda", "include", "cuda", "cublas_api.h"))
	if err != nil {
		t.Fatalf("the headers build-cuda.sh compiled with: %v", err)
	}
	m := regexp.MustCompile(`(?m)^#define CUBLAS_VER_MAJOR ([0-9]+)`).FindSubmatch(h)
	if m == nil {
		t.Fatal("no CUBLAS_VER_MAJOR in cublas_api.h")
	}
	want := "libcublas.so." + string(m[1])
	if got := CuBLASSoname(); got != want {
		t.Fatalf("CuBLASSoname() = %q, the headers say %q", got, want)
	}
	if err := loadCuBLAS(); err != nil {
		t.Fatalf("loading %s: %v", want, err)
	}
	if got := CuBLASPath(); filepath.Base(got) != want {
		t.Fatalf("CuBLASPath() = %q, want a %s", got, want)
	}
}
